"""Decoder-only GPT backbone of coupledqk (App. B, Table 8): RMSNorm pre-norm, SwiGLU, tied embeddings and
learned positions, hosting any mechanism of ``conf/attention`` (standard, coupled QK, GQA, differential).

Layout (no biases anywhere in the backbone)::

    h <- E[x] + P[0..T-1]                               P: learned (max_positions, d); absent if positional="none"
    h <- h + drop(Attn(RMSNorm(h)))                     causal; Attn from the Hydra _partial_ factory, per layer
    h <- h + drop(W2 (SiLU(W1 RMSNorm(h)) * W3 RMSNorm(h)))     SwiGLU: W1, W3 d -> d_ff, W2 d_ff -> d
    logits = RMSNorm(h) E^T                             LM head tied to the input embedding

Count: V d + P d + L (attn + 3 d d_ff + 2 d) + d. At Small (d 512, H 8, L 8, d_ff 2048, V 50,257, P 2048) with
bias-free standard attention (4 d^2 per layer) the terms are 25,731,584 + 1,048,576 + 8 x 4,195,328 + 512,
which gives 60,343,296 (Table 11, "Standard").

Where the paper is silent, this is what we chose:
* ``max_positions`` = 2048 rows. Training uses seq-len 512, but 2048 is the only table size that makes Table 11
  exact: the other terms sum to 59,294,720, which leaves 1,048,576 = 2048 x 512.
* Init: the token and position embeddings are drawn from N(0, 0.02), as in GPT-2. With the tied head,
  nn.Embedding's N(0, 1) would give initial logits of std ~sqrt(d). All other modules keep their own
  initialisation, and each mechanism owns its own (the coupling f, the lambdas of differential attention).
* RMSNorm has an affine weight and eps 1e-5 (``norm_eps``). Dropout (default 0, the paper names none) acts on
  the embedding sum and on each residual branch.
* The sequence-length check applies only with learned positions. With ``positional="none"`` (the RoPE runs,
  with the mechanism's ``rope=True``) there is no table to overrun.
* ``gradient_checkpointing`` recomputes each block in the backward pass (App. B enables it at 150M and 350M).
  It is active whenever gradients are being recorded.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from oscrepro.attention.base import VECTOR, Aux
from oscrepro.models.block import AttentionFactory

POSITIONAL = ("learned", "none")


class SwiGLU(nn.Module):
    """W2 (SiLU(W1 x) * W3 x), hidden width d_ff, three bias-free matrices (Shazeer, 2020)."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))  # (B, T, d_ff) -> (B, T, D)


class GPTBlock(nn.Module):
    """x + Attn(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)); the attention is causal."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, attention: AttentionFactory, layer_idx: int = 0,
                 dropout: float = 0.0, norm_eps: float = 1e-5) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(d_model, eps=norm_eps)
        self.attn = attention(d_model=d_model, n_heads=n_heads, layer_idx=layer_idx)
        self.ffn_norm = nn.RMSNorm(d_model, eps=norm_eps)
        self.ffn = SwiGLU(d_model, d_ff)
        self.drop = nn.Dropout(dropout)

    def forward(self, h: Tensor, times: Tensor | None = None, need_weights: bool = False) -> tuple[Tensor, Aux]:
        """(B, T, D) -> ((B, T, D), aux); ``times`` (B, T) goes to the mechanism (continuous-time ones read it)."""
        a, aux = self.attn(self.attn_norm(h), causal=True, times=times, need_weights=need_weights)  # (B, T, D)
        h = h + self.drop(a)
        return h + self.drop(self.ffn(self.ffn_norm(h))), aux


class GPTLM(nn.Module):
    """Causal LM: tokens (B, T) -> (logits (B, T, V), per-layer aux), the backbone of coupledqk Table 8."""

    attention_contract: ClassVar[str | None] = VECTOR  # builds each layer's mechanism (oscrepro.attention.base)

    def __init__(self, vocab_size: int, d_model: int, n_heads: int, n_layers: int, d_ff: int,
                 attention: AttentionFactory, max_positions: int = 2048, positional: str = "learned",
                 dropout: float = 0.0, gradient_checkpointing: bool = False, norm_eps: float = 1e-5) -> None:
        super().__init__()
        if positional not in POSITIONAL:
            raise ValueError(f"positional={positional!r}; valid: {', '.join(POSITIONAL)}")
        self.d_model, self.vocab_size, self.max_positions = d_model, vocab_size, max_positions
        self.gradient_checkpointing = gradient_checkpointing
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos_embed = nn.Embedding(max_positions, d_model) if positional == "learned" else None
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            GPTBlock(d_model, n_heads, d_ff, attention, i, dropout, norm_eps) for i in range(n_layers)
        )
        self.norm = nn.RMSNorm(d_model, eps=norm_eps)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.embed.weight  # tied input/output embeddings (App. B)
        for emb in (self.embed, self.pos_embed):
            if emb is not None:
                nn.init.normal_(emb.weight, mean=0.0, std=0.02)

    def forward_hidden(self, x: Tensor, need_weights: bool = False, *, times: Tensor | None = None
                       ) -> tuple[Tensor, list[Aux]]:
        """tokens (B, T) -> (final-norm hidden states (B, T, D), one aux per layer)."""
        t = x.shape[1]
        h = self.embed(x)  # (B, T, D)
        if self.pos_embed is not None:
            if t > self.max_positions:
                raise ValueError(f"sequence length {t} > max_positions={self.max_positions} (learned positional "
                                 f"table): raise model.max_positions or use positional=none with RoPE")
            h = h + self.pos_embed(torch.arange(t, device=x.device))  # (T, D) broadcast over B
        h = self.drop(h)
        auxes: list[Aux] = []
        for block in self.blocks:
            if self.gradient_checkpointing and torch.is_grad_enabled():
                h, aux = checkpoint(block, h, times, need_weights, use_reentrant=False)
            else:
                h, aux = block(h, times, need_weights)
            auxes.append(aux)
        return self.norm(h), auxes  # (B, T, D)

    def forward(self, x: Tensor, need_weights: bool = False, *, times: Tensor | None = None
                ) -> tuple[Tensor, list[Aux]]:
        """tokens (B, T) -> logits (B, T, V). ``times`` goes to every mechanism (discrete ones ignore it)."""
        h, auxes = self.forward_hidden(x, need_weights, times=times)
        return self.head(h), auxes  # (B, T, V)
