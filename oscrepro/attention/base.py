"""Shared attention contract and multi-head plumbing.

Every mechanism in ``oscrepro.attention`` is an ``nn.Module`` built as
``Mechanism(d_model=..., n_heads=..., layer_idx=..., **hyperparameters)`` by the backbone (Hydra
``_partial_`` factory, one call per layer) and called as

    y, aux = attn(x, causal=False, pos=None, times=None, need_weights=False)   # x: (B, T, D) -> y: (B, T, D)

(all arguments after ``x`` keyword-only):

* ``causal``: output i may depend on inputs j <= i only (checked by gradient in the contract test).
* ``pos``: (B, T) integer token positions; ``None`` means 0..T-1, and passing those gives the same output. No
  mechanism reads it yet: the position-aware ones (Kuramoto's RoPE phase drift, fqo_relpos' offsets i - j) use
  the index positions 0..T-1, so today ``pos`` is accepted and ignored like ``times`` below.
* ``times``: (B, T) float irregular observation timestamps of the tokens, for continuous-time mechanisms
  (OsciFormer, ContiFormer), which set ``continuous_time = True``. Every other mechanism is discrete in its
  token index: it accepts ``times`` and ignores it, so a backbone passes ``times`` through whatever
  mechanism it hosts, and its output with ``times`` equals its output without.
* ``need_weights``: ``aux`` is an empty dict unless it is ``True``; then it holds the mechanism's internals
  (attention weights, fixed points, sync matrices, ...) so that analyses never re-implement them.

Torus-phase coupling laws (``kuramoto``, ``fsn``) have the same call, with ``x`` the phases (B, T, k) and ``y``
a tangent update of the same shape (see ``oscrepro.models.torus_lm``).
"""
from __future__ import annotations

import contextlib
import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

Aux = dict[str, Tensor]


def fp32_only(x: Tensor) -> contextlib.AbstractContextManager:
    """Autocast off for the block: mechanisms whose arithmetic needs fp32 (complex phasors) run it in fp32 inside
    a bf16-mixed model (``trainer.precision=bf16-mixed``); the rest of the model keeps autocast."""
    return torch.autocast(x.device.type, enabled=False)


def at_least_fp32(x: Tensor) -> Tensor:
    """``x`` in fp32 if it is a lower-precision float (bf16/fp16 from autocast); fp32/fp64 unchanged."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, T, H*D) -> (B, H, T, D)."""
    b, t, hd = x.shape
    return x.view(b, t, n_heads, hd // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, D) -> (B, T, H*D)."""
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def causal_mask(t: int, device: torch.device | None = None) -> Tensor:
    """Boolean (T, T) mask, True where key j <= query i (allowed)."""
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


def dot_product_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, need_weights: bool
                          ) -> tuple[Tensor, Tensor | None]:
    """softmax(q k^T / sqrt(d)) v for (B, H, T, D) heads -> ((B, H, T, D), weights (B, H, T, T) or None).

    With ``need_weights`` the weights are computed explicitly (the reference path analyses read); otherwise the
    fused ``scaled_dot_product_attention`` runs. Shared by every mechanism that scores with plain softmax."""
    if not need_weights:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal), None
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    if causal:
        scores = scores.masked_fill(~causal_mask(q.shape[-2], q.device), float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


class AttentionBase(nn.Module):
    """Base class: stores the shape arguments every mechanism receives from the backbone."""

    continuous_time: ClassVar[bool] = False  # True: the output depends on ``times`` (continuous-time mechanisms)

    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.layer_idx = layer_idx

    def forward(self, x: Tensor, *, causal: bool = False, pos: Tensor | None = None, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        """(B, T, D) -> ((B, T, D), aux); the contract is in the module docstring."""
        raise NotImplementedError
