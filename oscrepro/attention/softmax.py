"""Softmax (scaled dot-product) attention: the baseline every mechanism is measured against.

Fast path: ``torch.nn.functional.scaled_dot_product_attention``; when ``need_weights`` is set the
weights are computed explicitly (the reference path) so analyses can read them. ``rope=True`` rotates q and k
after the projection (rotate-half RoPE, ``oscrepro.attention.rope``) for backbones without absolute positions;
the default (no RoPE, biases on) is the historical baseline. The coupledqk paper's "Standard" row (Table 11)
is this class with ``bias=False``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from oscrepro.attention.base import AttentionBase, Aux, dot_product_attention, merge_heads, refuse, split_heads
from oscrepro.attention.rope import rope_problems, rope_qk


class SoftmaxAttention(AttentionBase):
    """Multi-head softmax attention (Vaswani et al., 2017) with fused QKV and output projection W_O."""

    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0, bias: bool = True, rope: bool = False,
                 rope_base: float = 10000.0) -> None:
        refuse(SoftmaxAttention.config_problems(d_model, n_heads, rope=rope))
        super().__init__(d_model, n_heads, layer_idx)
        self.rope, self.rope_base = rope, rope_base
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    @classmethod
    def config_problems(cls, d_model: int, n_heads: int, *, rope: bool = False, **hparams: Any) -> list[str]:
        """The shared head split, and an even head dimension with ``rope`` (rotate-half)."""
        return super().config_problems(d_model, n_heads, **hparams) or rope_problems(d_model // n_heads, rope)

    def forward(self, x: Tensor, *, causal: bool = False, pos: Tensor | None = None, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (split_heads(t, self.n_heads) for t in (q, k, v))  # (B, H, T, Dh)
        if self.rope:
            q, k = rope_qk(q, k, self.rope_base)
        o, weights = dot_product_attention(q, k, v, causal, need_weights)  # (B, H, T, Dh), Eq. (1)
        aux: Aux = {"weights": weights} if need_weights else {}
        return self.out(merge_heads(o)), aux
