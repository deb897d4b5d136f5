"""The FSN paper's transformer baseline: pre-norm RoPE transformer, SwiGLU x4, 1 head, linear head (fsn §4.1,
App. A, Table 3), with the automated width search (steps of 4 model dimensions, nearest a parameter target).

Layout (per layer)::

    h <- h + drop(W_o attn(RoPE(W_qkv LN1(h))))        W_qkv: d -> 3d with bias, W_o: d -> d with bias
    h <- h + drop(W2 (SiLU(W1 LN2(h)) * W3 LN2(h)))     W1, W3: d -> 4d, W2: 4d -> d, no biases

then a linear head d -> V with bias straight on the residual stream (no final norm); the embedding is untied.
Total: L (16 d^2 + 8 d) + 2 V d + V. The paper does not spell the layout out; this is the one whose counts match
Table 3 exactly (derivation: with the 16 d^2 L + 2 V d weight matrices, the two (d, V) pairs (120, 205) ->
974,845 and (124, 97) -> 1,012,185 leave 4,045 and 4,065, i.e. exactly 32 d + V: 8 d per layer (two LayerNorms
with bias + q, k, v, o biases) plus the head bias; a final LayerNorm would add 2 d and break both counts).
``final_norm=True`` is available but is not the paper's count.

RoPE: rotate-half convention on the head dimension with theta_i = base^(-2i/d_head), base 10000. Attention fast
path: ``scaled_dot_product_attention``; ``need_weights=True`` takes the explicit softmax path (its reference).
Width search (:func:`search_width`): d over multiples of ``step`` (and of 2 * n_heads, for RoPE pairs); the d
with the smallest |params - target| wins, ties to the smaller d. At target 10^6 this gives d = 120 for V = 205 and
d = 124 for V = 97, as in Table 3.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.base import AttentionBase, Aux, causal_mask, merge_heads, refuse, split_heads, whole
from oscrepro.attention.rope import apply_rope, rope_problems, rope_tables


def rope_transformer_params(d: int, vocab_size: int, n_layers: int = 4, ffn_mult: int = 4,
                            final_norm: bool = False) -> int:
    """Closed-form parameter count of :class:`RopeTransformerLM` (tested against the instantiated model)."""
    per_layer = 4 * d * d + 4 * d + 3 * d * ffn_mult * d + 4 * d  # attn W + biases, SwiGLU, two LayerNorms
    return n_layers * per_layer + 2 * vocab_size * d + vocab_size + (2 * d if final_norm else 0)


def search_width(target: int, vocab_size: int, n_layers: int = 4, ffn_mult: int = 4, n_heads: int = 1,
                 step: int = 4, final_norm: bool = False) -> int:
    """Smallest-|count - target| width over multiples of ``step`` (count grows monotonically in d)."""
    unit = math.lcm(step, 2 * n_heads)
    best_d, best_gap, d = unit, None, unit
    while True:
        gap = abs(rope_transformer_params(d, vocab_size, n_layers, ffn_mult, final_norm) - target)
        if best_gap is None or gap < best_gap:
            best_d, best_gap = d, gap
        elif rope_transformer_params(d, vocab_size, n_layers, ffn_mult, final_norm) > target:
            return best_d
        d += unit


class RopeAttention(nn.Module):
    """Causal multi-head attention with RoPE on q and k."""

    def __init__(self, d_model: int, n_heads: int, rope_base: float = 10000.0, bias: bool = True) -> None:
        super().__init__()
        self.n_heads, self.rope_base = n_heads, rope_base
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x: Tensor, need_weights: bool = False) -> tuple[Tensor, Aux]:
        q, k, v = (split_heads(y, self.n_heads) for y in self.qkv(x).chunk(3, dim=-1))  # (B, H, T, Dh)
        cos, sin = rope_tables(x.shape[1], q.shape[-1], self.rope_base, x.device)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        aux: Aux = {}
        if need_weights:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, T, T)
            w = s.masked_fill(~causal_mask(x.shape[1], x.device), float("-inf")).softmax(dim=-1)
            o = w @ v
            aux["weights"] = w
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, Dh)
        return self.out(merge_heads(o)), aux


class SwiGLU(nn.Module):
    """W2 (SiLU(W1 x) * W3 x), hidden = ffn_mult * d, W1 | W3 fused."""

    def __init__(self, d_model: int, ffn_mult: int = 4, bias: bool = False) -> None:
        super().__init__()
        self.w_in = nn.Linear(d_model, 2 * ffn_mult * d_model, bias=bias)
        self.w_out = nn.Linear(ffn_mult * d_model, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        gate, val = self.w_in(x).chunk(2, dim=-1)
        return self.w_out(F.silu(gate) * val)


class RopeBlock(nn.Module):
    def __init__(self, d_model: int, n_heads: int, ffn_mult: int, rope_base: float, attn_bias: bool,
                 ffn_bias: bool, dropout: float) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = RopeAttention(d_model, n_heads, rope_base, attn_bias)
        self.ffn = SwiGLU(d_model, ffn_mult, ffn_bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, h: Tensor, need_weights: bool = False) -> tuple[Tensor, Aux]:
        a, aux = self.attn(self.ln1(h), need_weights=need_weights)
        h = h + self.drop(a)
        return h + self.drop(self.ffn(self.ln2(h))), aux


class RopeTransformerLM(nn.Module):
    """Causal LM: tokens (B, T) -> (logits (B, T, V), per-layer aux). ``d_model=None`` runs the width search."""

    attention_contract: ClassVar[str | None] = None  # its own RoPE softmax attention: no attention group

    @classmethod
    def config_problems(cls, d_model: int | None = None, n_heads: int = 1, width_step: int = 4,
                        **hparams: Any) -> list[str]:
        """Its attention's rules: heads of d_model / n_heads, even for RoPE (the width search picks such a width
        itself: multiples of lcm(width_step, 2 n_heads))."""
        if d_model is None:
            return [] if whole(width_step, 1) else [f"width_step={width_step!r} must be an integer >= 1"]
        return (AttentionBase.config_problems(d_model, n_heads)
                or rope_problems(d_model // n_heads, prefix="its attention: "))

    def __init__(self, vocab_size: int, d_model: int | None = None, n_layers: int = 4, n_heads: int = 1,
                 ffn_mult: int = 4, param_target: int = 1_000_000, width_step: int = 4, rope_base: float = 10000.0,
                 dropout: float = 0.1, final_norm: bool = False, attention: object | None = None) -> None:
        super().__init__()
        if attention is not None:  # conf/train.yaml merges an attention group into cfg.model by default
            raise ValueError("RopeTransformerLM has its own RoPE softmax attention: compose it without an attention "
                             "group (experiment defaults `- override /attention: null`, or `~attention` on the CLI)")
        refuse(RopeTransformerLM.config_problems(d_model, n_heads, width_step))
        if d_model is None:
            d_model = search_width(param_target, vocab_size, n_layers, ffn_mult, n_heads, width_step, final_norm)
        self.d_model, self.vocab_size = d_model, vocab_size
        self.embed = nn.Embedding(vocab_size, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            RopeBlock(d_model, n_heads, ffn_mult, rope_base, True, False, dropout) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model) if final_norm else nn.Identity()
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, x: Tensor, need_weights: bool = False, *, times: Tensor | None = None
                ) -> tuple[Tensor, list[Aux]]:
        """tokens (B, T) -> logits (B, T, V). ``times`` is accepted like every backbone's and unused: the built-in
        RoPE softmax attention is discrete-time (positions are token indices)."""
        h = self.drop(self.embed(x))  # (B, T, D)
        auxes: list[Aux] = []
        for block in self.blocks:
            h, aux = block(h, need_weights=need_weights)
            auxes.append(aux)
        return self.head(self.norm(h)), auxes  # (B, T, V)
