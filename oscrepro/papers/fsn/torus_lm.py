"""Torus phase language model: the FSN / Kuramoto-attention backbone (Nunley 2026, fsn §2.1, App. A, Table 3).

Each token's state is a vector of k raw phases theta (B, T, k) (k = 176 in Table 3). Per layer::

    theta <- theta + drop(bound(coupling(theta), alpha_attn[l]))     # coupling law: Kuramoto / FSN / ... (Eq. 1-2)
    theta <- theta + drop(bound(ffn(theta), alpha_ffn[l]))           # SwiGLU on the raw phases, or FSN-MF (Eq. 4)

Readout (§2.1): logit_v = (1 / tau_r) sum_c cos(theta_c - phi_vc) with learned prototype phases phi (V, k) and a
learned temperature tau_r. The coupling law arrives as a Hydra ``_partial_`` factory called once per layer as
``attention(d_model=k, n_heads=H, layer_idx=l, gates=shared)``; the FFN likewise as
``ffn(d_model=k, layer_idx=l)``. Nothing here branches on which law or FFN it is.

Interface differences from the vector attention contract (``oscrepro.attention.base``):

* the coupling module receives phases (B, T, k) and returns a value-gated tangent update (B, T, k), not a
  projected vector; the bound, dropout and residual add live here;
* it receives one extra keyword, ``gates=`` (:class:`~oscrepro.attention.kuramoto.PhaseGates`): the q/k gates,
  value gate, temperature tau and RoPE rates are shared by all layers (App. A) and owned by this model;
* ``forward(tokens)`` returns ``(logits (B, T, V), [aux per layer])`` like ``oscrepro.models.transformer.CausalLM``
  (the lead's ``LanguageModelTask`` unpacks that pair).

Bounded update (App. A "Bounded update"): bound(x) = x * ||alpha tanh(x)|| / ||x|| per token (norm over the k
coordinates): the raw update keeps its direction and takes the norm of the reference alpha*tanh(x); alpha is one
learned scalar per layer and pathway, init 2 pi. A 1e-12 floor inside both square roots keeps x = 0 finite.

Choices where the paper is silent, made so that the Table 3 parameter counts come out exact (derivation in
``tests/unit/models/test_fsn_params.py``; other splits of the same 8k + 10 leftover parameters are possible): the SwiGLU
block is LayerNorm(k) (weight + bias) -> W1, W3: k -> 2k, W2: 2k -> k (no biases) on the raw phases; tau is
shared, and the readout temperature is one scalar. Not constrained by the counts: embedding and prototype phases
start uniform on [-pi, pi); tau_r starts at sqrt(k) (coherence sums have std ~ sqrt(k/2)); dropout (Table 3: 0.1)
is applied to each pathway's bounded update before the residual add. Known gap: at initialisation the RMS of the
phases the SwiGLU reads grows ~1.3x from layer 1 to layer 4 here, against ~33x reported in fsn §2.4, so the
paper's (unstated) initialisation of the embedding and/or FFN differs from this one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.base import PHASE, Aux
from oscrepro.attention.compiled import CompiledPair, run_with_fallback
from oscrepro.attention.fsn_fused import use_compiled
from oscrepro.attention.kuramoto import PhaseGates

TWO_PI = 2.0 * math.pi


def bounded_update(x: Tensor, alpha: Tensor, eps: float = 1e-12) -> Tensor:
    """Norm-matched tanh bound (App. A): x rescaled to the per-token norm of alpha*tanh(x). (B, T, k) -> same."""
    ref = torch.sqrt((torch.tanh(x) * alpha).square().sum(dim=-1, keepdim=True) + eps)  # (B, T, 1)
    return x * (ref / torch.sqrt(x.square().sum(dim=-1, keepdim=True) + eps))


def bound_forward(x: Tensor, alpha: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """Forward stage of :class:`Bound`: y = x |alpha tanh x| / |x| and the row sums sum tanh^2, sum x^2 (B, T, 1)."""
    st = torch.tanh(x).square().sum(dim=-1, keepdim=True)
    sx = x.square().sum(dim=-1, keepdim=True)
    return x * (torch.sqrt(alpha * alpha * st + eps) / torch.sqrt(sx + eps)), st, sx


def bound_backward(gy: Tensor, x: Tensor, alpha: Tensor, st: Tensor, sx: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """Backward stage of :class:`Bound`. With A = sqrt(alpha^2 sum tanh^2 + eps), N = sqrt(sum x^2 + eps),
    s = A / N and G = <gy, x> per token: dx = gy s + G s (alpha^2 tanh (1 - tanh^2) / A^2 - x / N^2),
    d alpha = sum over tokens of G s alpha sum tanh^2 / A^2 (tanh recomputed, not stored)."""
    a2, n2 = alpha * alpha * st + eps, sx + eps
    s = torch.sqrt(a2 / n2)
    gs = (gy * x).sum(dim=-1, keepdim=True) * s  # G s, (B, T, 1)
    t = torch.tanh(x)
    dx = gy * s + gs * (alpha * alpha * t * (1 - t * t) / a2 - x / n2)
    return dx, (gs * alpha * st / a2).sum()


_BOUND = CompiledPair("bounded update", bound_forward, bound_backward)


class Bound(torch.autograd.Function):
    """:func:`bounded_update` as one node with a hand-written backward (only x is saved, plus two row sums); the
    stages run eagerly or compiled. ``bounded_update`` through plain autograd is the reference (tests compare
    values and gradients)."""

    @staticmethod
    def forward(ctx, x: Tensor, alpha: Tensor, eps: float, compiled: bool) -> Tensor:
        y, st, sx = _BOUND.get(compiled)[0](x, alpha, eps)
        ctx.eps, ctx.compiled = eps, compiled
        ctx.save_for_backward(x, alpha, st, sx)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy: Tensor) -> tuple[Tensor | None, ...]:
        x, alpha, st, sx = ctx.saved_tensors
        dx, dalpha = _BOUND.call(ctx.compiled, 1, gy.contiguous(), x, alpha, st, sx, ctx.eps)
        return dx, dalpha.reshape(alpha.shape), None, None


def bound(x: Tensor, alpha: Tensor, eps: float = 1e-12) -> Tensor:
    """:func:`bounded_update` through :class:`Bound`, its stages compiled for float32 updates at training sizes
    (:func:`~oscrepro.attention.fsn_fused.use_compiled`); eager otherwise or after a compile failure (one warning)."""
    return run_with_fallback(lambda c: Bound.apply(x, alpha, eps, c), use_compiled(x), _BOUND)


class SwiGLUPhaseFFN(nn.Module):
    """Feed-forward block on the raw (unwrapped) phases: LN -> SwiGLU with hidden = hidden_mult * k (fsn §2.4)."""

    def __init__(self, d_model: int, layer_idx: int = 0, hidden_mult: float = 2.0) -> None:
        super().__init__()
        hidden = int(round(hidden_mult * d_model))
        self.norm = nn.LayerNorm(d_model)
        self.w_in = nn.Linear(d_model, 2 * hidden, bias=False)  # W1 | W3 fused
        self.w_out = nn.Linear(hidden, d_model, bias=False)
        self.layer_idx = layer_idx

    def forward(self, theta: Tensor) -> Tensor:
        gate, val = self.w_in(self.norm(theta)).chunk(2, dim=-1)  # (B, T, hidden) x2
        return self.w_out(F.silu(gate) * val)  # (B, T, k)


FFNFactory = Callable[..., nn.Module]
CouplingFactory = Callable[..., nn.Module]


class TorusLayer(nn.Module):
    """One residual layer: bounded coupling update, then bounded FFN update, with per-pathway alpha."""

    def __init__(self, k: int, n_heads: int, layer_idx: int, attention: CouplingFactory, ffn: FFNFactory,
                 gates: PhaseGates, alpha_init: float, dropout: float) -> None:
        super().__init__()
        self.attn = attention(d_model=k, n_heads=n_heads, layer_idx=layer_idx, gates=gates)
        self.ffn = ffn(d_model=k, layer_idx=layer_idx)
        self.alpha_attn = nn.Parameter(torch.tensor(float(alpha_init)))
        self.alpha_ffn = nn.Parameter(torch.tensor(float(alpha_init)))
        self.drop = nn.Dropout(dropout)

    def forward(self, theta: Tensor, *, times: Tensor | None = None, need_weights: bool = False
                ) -> tuple[Tensor, Aux]:
        upd, aux = self.attn(theta, causal=True, times=times, need_weights=need_weights)  # (B, T, k)
        theta = theta + self.drop(bound(upd, self.alpha_attn))
        theta = theta + self.drop(bound(self.ffn(theta), self.alpha_ffn))
        return theta, aux


class TorusLM(nn.Module):
    """Causal torus phase LM: tokens (B, T) -> (logits (B, T, V), per-layer aux)."""

    attention_contract: ClassVar[str | None] = PHASE  # coupling laws built with the shared gates= (module docstring)
    attention_shape: ClassVar[dict[str, str]] = {"d_model": "k", "n_heads": "n_heads"}  # k phases, n_heads maps

    def __init__(self, vocab_size: int, attention: CouplingFactory, ffn: FFNFactory, k: int = 176,
                 n_layers: int = 4, n_heads: int = 1, rope_base: float = 10000.0, tau_init: float | None = None,
                 readout_tau_init: float | None = None, alpha_init: float = TWO_PI, gate_floor: float = 1e-6,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.vocab_size, self.k = vocab_size, k
        self.embed = nn.Embedding(vocab_size, k)  # learned torus point per symbol
        self.prototypes = nn.Parameter(torch.empty(vocab_size, k))  # readout prototype phases phi
        nn.init.uniform_(self.embed.weight, -math.pi, math.pi)
        nn.init.uniform_(self.prototypes, -math.pi, math.pi)
        tau_r = readout_tau_init if readout_tau_init is not None else math.sqrt(k)
        self.log_readout_tau = nn.Parameter(torch.tensor(math.log(tau_r)))
        self.gates = PhaseGates(k, rope_base=rope_base, tau_init=tau_init, gate_floor=gate_floor)
        self.layers = nn.ModuleList(
            TorusLayer(k, n_heads, i, attention, ffn, self.gates, alpha_init, dropout) for i in range(n_layers)
        )

    def readout(self, theta: Tensor) -> Tensor:
        """Phase-coherence scores (B, T, k) -> (B, T, V): sum_c cos(theta_c - phi_vc) / tau_r, as one GEMM."""
        feats = torch.cat([torch.cos(theta), torch.sin(theta)], dim=-1)  # (B, T, 2k)
        protos = torch.cat([torch.cos(self.prototypes), torch.sin(self.prototypes)], dim=-1)  # (V, 2k)
        return (feats @ protos.t()) * torch.exp(-self.log_readout_tau)

    def forward_phases(self, theta: Tensor, need_weights: bool = False, *, times: Tensor | None = None
                       ) -> tuple[Tensor, list[Aux]]:
        """Run the layers from embedded phases (B, T, k); exposed for gradient-based causality checks."""
        auxes: list[Aux] = []
        for layer in self.layers:
            theta, aux = layer(theta, times=times, need_weights=need_weights)
            auxes.append(aux)
        return self.readout(theta), auxes

    def forward(self, x: Tensor, need_weights: bool = False, *, times: Tensor | None = None
                ) -> tuple[Tensor, list[Aux]]:
        """tokens (B, T) -> logits (B, T, V); ``times`` (B, T) goes to every layer's coupling law."""
        return self.forward_phases(self.embed(x), need_weights=need_weights, times=times)  # (B, T, V)
