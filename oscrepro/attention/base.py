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
a tangent update of the same shape (see ``oscrepro.papers.fsn.torus_lm``).

Declarations read before anything is built (``oscrepro.runs.contracts``, called by config validation):

* ``contracts``: the backbone call contracts a mechanism implements. :data:`VECTOR` is the call above;
  :data:`PHASE` is a torus coupling law, built with one extra keyword ``gates=`` (shared phase gates) by
  ``TorusLM``. A backbone declares the one contract it calls (``attention_contract``, next to its class).
* ``config_problems(d_model, n_heads, **hyperparameters)``: what the mechanism's constructor and forward require
  of its shapes and hyperparameters (``d_model`` divisible by ``n_heads``, an even head dimension for RoPE, ...),
  as messages. The constructor raises them (:func:`refuse`), and validation reports them before a run id or a
  record exists, so both refuse the same configs. A subclass extends its parent's rules (``super()`` first).
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

Aux = dict[str, Tensor]
VECTOR = "vector"  # x (B, T, D) -> (B, T, D), built as Mechanism(d_model=, n_heads=, layer_idx=) (module docstring)
PHASE = "phase"  # phases (B, T, k) -> tangent update (B, T, k), built with gates= as well (papers/fsn/torus_lm.py)


def refuse(problems: list[str]) -> None:
    """Raise ``ValueError`` listing ``problems`` (a mechanism's :meth:`AttentionBase.config_problems`); nothing
    when the list is empty. The constructors' check, so that code that builds a mechanism directly is refused in
    the words validation uses."""
    if problems:
        raise ValueError("; ".join(problems))


def whole(value: Any, least: int) -> bool:
    """``value`` is an integer (not a bool) >= ``least``: the test of most count rules below."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def one_of(name: str, value: Any, valid: tuple[str, ...]) -> list[str]:
    """``[message]`` when ``value`` is not one of ``valid`` (``form='x'; valid: official, paper``), else ``[]``."""
    return [] if value in valid else [f"{name}={value!r}; valid: {', '.join(valid)}"]


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
    contracts: ClassVar[frozenset[str]] = frozenset({VECTOR})  # the backbone call contracts it implements

    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0) -> None:
        super().__init__()
        refuse(AttentionBase.config_problems(d_model, n_heads))
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.layer_idx = layer_idx

    @classmethod
    def config_problems(cls, d_model: int, n_heads: int, **hparams: Any) -> list[str]:
        """What building and running this mechanism requires of ``d_model``, ``n_heads`` and its hyperparameters
        (module docstring), as one message per broken rule; empty when it builds and runs. Every mechanism splits
        ``d_model`` into ``n_heads`` heads of ``d_model / n_heads``. Hyperparameters it does not read are ignored."""
        if not (whole(n_heads, 1) and whole(d_model, 1)):
            return [f"d_model={d_model!r} and n_heads={n_heads!r} must be integers >= 1"]
        if d_model % n_heads:
            return [f"d_model={d_model} is not divisible by n_heads={n_heads} (each head gets d_model / n_heads)"]
        return []

    def forward(self, x: Tensor, *, causal: bool = False, pos: Tensor | None = None, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        """(B, T, D) -> ((B, T, D), aux); the contract is in the module docstring."""
        raise NotImplementedError
