"""Grouped-query attention (coupledqk Table 9): with one KV head per query head it is softmax attention; with
fewer, every query head of a group reads the same keys and values; the KV projections shrink as Table 11 counts."""

from __future__ import annotations

import pytest
import torch

from oscrepro.attention.gqa import GroupedQueryAttention
from oscrepro.attention.softmax import SoftmaxAttention

D, T, B = 16, 6, 2


def x_in(seed: int = 0) -> torch.Tensor:
    return torch.randn(B, T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("rope", [False, True])
def test_one_kv_head_per_query_head_is_softmax_attention(rope: bool) -> None:
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(D, 4, n_kv_heads=4, rope=rope).double()
    ref = SoftmaxAttention(D, 4, bias=False, rope=rope).double()
    with torch.no_grad():  # softmax's fused qkv rows are [W_Q; W_K; W_V]
        ref.qkv.weight.copy_(torch.cat([gqa.q_proj.weight, gqa.k_proj.weight, gqa.v_proj.weight]))
        ref.out.weight.copy_(gqa.out.weight)
    x = x_in()
    for causal in (False, True):
        torch.testing.assert_close(gqa(x, causal=causal)[0], ref(x, causal=causal)[0], rtol=0, atol=1e-13)
        w, w_ref = gqa(x, causal=causal, need_weights=True)[1]["weights"], ref(x, causal=causal, need_weights=True)[1]
        torch.testing.assert_close(w, w_ref["weights"], rtol=0, atol=1e-14)


def test_each_group_reads_one_kv_head() -> None:
    """8 query heads, 2 KV heads: heads 0-3 read KV head 0, heads 4-7 KV head 1. Give all query heads the same
    W_Q: the maps then coincide inside a group (to rounding) and differ across groups."""
    torch.manual_seed(1)
    d, h = 32, 8
    gqa = GroupedQueryAttention(d, h, n_kv_heads=2).double()
    with torch.no_grad():
        w_q = gqa.q_proj.weight[:4].clone()  # (d_h, d): one head's rows
        gqa.q_proj.weight.copy_(w_q.repeat(h, 1))
    x = torch.randn(B, T, d, dtype=torch.float64)
    w = gqa(x, causal=True, need_weights=True)[1]["weights"]  # (B, H, T, T)
    assert w.shape == (B, h, T, T)
    for g in (range(0, 4), range(4, 8)):
        for i in g:
            torch.testing.assert_close(w[:, i], w[:, g[0]], rtol=0, atol=1e-14)
    assert (w[:, 0] - w[:, 4]).abs().max() > 1e-6
    # and the fast path agrees with the weights path
    torch.testing.assert_close(gqa(x, causal=True)[0], gqa(x, causal=True, need_weights=True)[0], rtol=0, atol=1e-13)


def test_kv_projections_shrink_as_table_11() -> None:
    def n(m):
        return sum(p.numel() for p in m.parameters())
    saved = n(SoftmaxAttention(512, 8, bias=False)) - n(GroupedQueryAttention(512, 8, n_kv_heads=2))
    assert saved == 2 * (512 * 512 - 512 * 128) and 8 * saved == 60_343_296 - 57_197_568


@pytest.mark.parametrize("n_kv_heads", [0, 3])
def test_indivisible_heads_are_refused(n_kv_heads: int) -> None:
    with pytest.raises(ValueError, match="not divisible by n_kv_heads"):
        GroupedQueryAttention(D, 4, n_kv_heads=n_kv_heads)


def test_kv_heads_follow_table9_ratio_when_not_given() -> None:
    """Table 9: KV heads = 1/4 of the query heads; at least one (the cpu models' 2 heads share one KV head)."""
    from oscrepro.attention.gqa import GroupedQueryAttention

    for heads, kv in ((8, 2), (12, 3), (16, 4), (2, 1)):
        attn = GroupedQueryAttention(d_model=8 * heads, n_heads=heads, n_kv_heads=None, group_size=4)
        assert attn.n_kv_heads == kv and attn.k_proj.out_features == kv * 8
    assert GroupedQueryAttention(d_model=64, n_heads=8, n_kv_heads=8).n_kv_heads == 8  # explicit wins
