"""Rotary position embedding (RoPE, Su et al. 2024), rotate-half convention, shared by every mechanism with a
``rope`` option (softmax, coupled_qk, gqa, diff_attention) and by the FSN RoPE transformer baseline.

Frequencies theta_i = base^(-2i/d_head); the tables are built in fp32 from the token indices 0..T-1 (the
mechanisms' positions, see ``oscrepro.attention.base``). :func:`rope_qk` casts them to the dtype of q so that a
bf16/fp16 (autocast) or fp64 model keeps one dtype through the attention kernel.
"""

from __future__ import annotations

import torch
from torch import Tensor


def rope_problems(dim: int, rope: bool = True, what: str = "head dimension (d_model / n_heads)",
                  prefix: str = "rope=True: ") -> list[str]:
    """The rule RoPE declares for the mechanisms that use it: rotate-half pairs the first and second halves of
    what it rotates, so ``rope=True`` needs an even ``dim`` (the check :func:`rope_qk` makes at run time, reported
    by config validation before anything is built)."""
    if rope and dim % 2:
        return [f"{prefix}RoPE needs an even {what}, got {dim}"]
    return []


def rope_tables(t: int, d_head: int, base: float, device: torch.device | None = None) -> tuple[Tensor, Tensor]:
    """cos, sin tables (T, d_head) for rotate-half RoPE."""
    inv = base ** (-torch.arange(0, d_head, 2, dtype=torch.float32, device=device) / d_head)  # (d_head/2,)
    ang = torch.arange(t, dtype=torch.float32, device=device)[:, None] * inv  # (T, d_head/2)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """(B, H, T, Dh) rotated by position: x * cos + rotate_half(x) * sin."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def rope_qk(q: Tensor, k: Tensor, base: float) -> tuple[Tensor, Tensor]:
    """q, k (B, H, T, Dh) (any head counts, same T and Dh) rotated by their token index 0..T-1."""
    if q.shape[-1] % 2:
        raise ValueError(f"RoPE needs an even head dimension, got {q.shape[-1]}")
    cos, sin = rope_tables(q.shape[-2], q.shape[-1], base, q.device)
    cos, sin = cos.to(q.dtype), sin.to(q.dtype)  # (T, Dh)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)
