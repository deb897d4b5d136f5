"""Grouped-query attention (GQA; Ainslie et al., 2023), a published baseline in coupledqk (Sec. 2.3, Table 9).

What: H query heads share n_kv_heads key/value heads. Query head h reads KV head h // (H / n_kv_heads), so
consecutive query heads form a group, as in the usual ``repeat_kv`` layout. Scoring is standard softmax
attention (Eq. 1) with scale 1/sqrt(d_h). Why: this cuts the K and V projections (and a KV cache) by a factor
of H / n_kv_heads at unchanged query resolution. Table 11 counts it at -5.21% parameters.

Parameters: W_Q d -> d, W_K and W_V d -> n_kv_heads d_h, W_O d -> d, with no biases by default. At d 512 with 8
heads and 2 KV heads, one layer saves 2 (512 * 512 - 512 * 128) = 393,216 weights. Over 8 layers that is
3,145,728, so 60,343,296 drops to 57,197,568 (Table 11).

Choices: Table 9 gives a *ratio* (KV heads = 1/4 of the query heads, group size 4), so the config gives
``group_size: 4`` and ``n_kv_heads: null``: n_kv_heads = max(1, n_heads // group_size), i.e. 2 / 3 / 4 for Small /
Medium / Large and 1 for the cpu models' 2 heads (a group of 2: the nearest to the paper's ratio that still
shares KV heads). An explicit ``n_kv_heads`` takes precedence. With ``n_kv_heads == n_heads`` this is exactly
multi-head softmax attention. ``rope=True`` rotates q and k after the projection (index positions 0..T-1,
``pos`` ignored as for every mechanism).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from oscrepro.attention.base import AttentionBase, Aux, dot_product_attention, merge_heads, refuse, split_heads, whole
from oscrepro.attention.rope import rope_problems, rope_qk


def kv_heads(n_heads: int, n_kv_heads: int | None, group_size: int) -> int:
    """The KV head count: ``n_kv_heads`` when given, else ``max(1, n_heads // group_size)`` (module docstring)."""
    return max(1, n_heads // group_size) if n_kv_heads is None else n_kv_heads


class GroupedQueryAttention(AttentionBase):
    """Softmax attention with n_kv_heads key/value heads shared by groups of n_heads / n_kv_heads query heads."""

    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0, n_kv_heads: int | None = 2,
                 group_size: int = 4, bias: bool = False, rope: bool = False, rope_base: float = 10000.0) -> None:
        refuse(GroupedQueryAttention.config_problems(d_model, n_heads, n_kv_heads=n_kv_heads, group_size=group_size,
                                                     rope=rope))
        super().__init__(d_model, n_heads, layer_idx)
        n_kv_heads = kv_heads(n_heads, n_kv_heads, group_size)
        self.n_kv_heads, self.group = n_kv_heads, n_heads // n_kv_heads
        self.rope, self.rope_base = rope, rope_base
        d_kv = n_kv_heads * self.d_head
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_kv, bias=bias)
        self.v_proj = nn.Linear(d_model, d_kv, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    @classmethod
    def config_problems(cls, d_model: int, n_heads: int, *, n_kv_heads: int | None = 2, group_size: int = 4,
                        rope: bool = False, **hparams: Any) -> list[str]:
        """The shared head split; every KV head serves a whole group of query heads; RoPE's even head dimension."""
        problems = super().config_problems(d_model, n_heads, **hparams)
        if problems:
            return problems
        if n_kv_heads is None and not whole(group_size, 1):
            return [f"group_size={group_size!r} must be an integer >= 1 (n_kv_heads = n_heads // group_size)"]
        kv = kv_heads(n_heads, n_kv_heads, group_size)
        if not whole(kv, 1) or n_heads % kv:
            problems.append(f"n_heads={n_heads} is not divisible by n_kv_heads={kv}: every KV head must serve a whole "
                            f"group of query heads (Table 9: n_kv_heads = n_heads / 4)")
        return problems + rope_problems(d_model // n_heads, rope)

    def forward(self, x: Tensor, *, causal: bool = False, pos: Tensor | None = None, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        q = split_heads(self.q_proj(x), self.n_heads)  # (B, H, T, Dh)
        k = split_heads(self.k_proj(x), self.n_kv_heads)  # (B, Hkv, T, Dh)
        v = split_heads(self.v_proj(x), self.n_kv_heads)  # (B, Hkv, T, Dh)
        if self.rope:
            q, k = rope_qk(q, k, self.rope_base)
        # query head h reads KV head h // group
        k, v = (t.repeat_interleave(self.group, dim=1) for t in (k, v))  # (B, H, T, Dh)
        o, weights = dot_product_attention(q, k, v, causal, need_weights)  # (B, H, T, Dh), Eq. (1)
        aux: Aux = {"weights": weights} if need_weights else {}
        return self.out(merge_heads(o)), aux
