"""Differential attention (Ye et al. 2025; coupledqk Tables 9, 11), both forms, checked against a computation by
hand from the weights: (softmax(Q1 K1^T / sqrt d) - lambda softmax(Q2 K2^T / sqrt d)) V per head, RMSNorm per
head, x (1 - lambda_init), W_O. Also lambda_init per layer, the parameter counts, the fast path, bad options."""

from __future__ import annotations

import math

import pytest
import torch

from oscrepro.attention.diff_attention import DifferentialAttention, lambda_init_at
from oscrepro.attention.softmax import SoftmaxAttention

D, H, T, B = 8, 2, 5, 2


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def by_hand(x, wq, wk, wv, wo, lams, n_diff, d, norm_weight, lam_init, causal):
    """Plain loops over differential heads; head i owns columns [2d i, 2d (i + 1)) of q, k and v, its two
    query/key halves being the first and second d of them."""
    q, k, v = x @ wq.T, x @ wk.T, x @ wv.T  # (B, T, D)
    mask = torch.ones(T, T, dtype=torch.bool).tril() if causal else torch.ones(T, T, dtype=torch.bool)
    outs, maps = [], []
    for i in range(n_diff):
        cols = slice(2 * d * i, 2 * d * (i + 1))
        qi, ki, vi = q[..., cols], k[..., cols], v[..., cols]
        s1 = qi[..., :d] @ ki[..., :d].transpose(1, 2) / math.sqrt(d)  # (B, T, T)
        s2 = qi[..., d:] @ ki[..., d:].transpose(1, 2) / math.sqrt(d)
        a1 = torch.softmax(s1.masked_fill(~mask, -math.inf), dim=-1)
        a2 = torch.softmax(s2.masked_fill(~mask, -math.inf), dim=-1)
        amap = a1 - lams[i] * a2
        o = amap @ vi  # (B, T, 2d)
        o = o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + 1e-5) * norm_weight
        outs.append(o * (1 - lam_init))
        maps.append(amap)
    return torch.cat(outs, dim=-1) @ wo.T, torch.stack(maps, dim=1)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("form", ["official", "paper"])
def test_matches_the_computation_by_hand(form: str, causal: bool) -> None:
    layer = 2
    mech = DifferentialAttention(D, H, layer_idx=layer, form=form).double()
    wq, wk, wv, wo = (torch.randn(D, D, dtype=torch.float64, generator=gen(i)) * 0.7 for i in range(4))
    x = torch.randn(B, T, D, dtype=torch.float64, generator=gen(9))
    lam_init = 0.8 - 0.6 * math.exp(-0.3 * layer)
    with torch.no_grad():
        for lin, w in ((mech.q_proj, wq), (mech.k_proj, wk), (mech.v_proj, wv), (mech.out_proj, wo)):
            lin.weight.copy_(w)
        if form == "official":  # one head of sub-head width d_h = 4, value width 8, shared lambda vectors
            n_diff, d = 1, 4
            lq1, lk1, lq2, lk2 = (torch.randn(d, dtype=torch.float64, generator=gen(20 + i)) * 0.5 for i in range(4))
            mech.lambda_q1.copy_(lq1)
            mech.lambda_k1.copy_(lk1)
            mech.lambda_q2.copy_(lq2)
            mech.lambda_k2.copy_(lk2)
            lam = math.exp(float(lq1 @ lk1)) - math.exp(float(lq2 @ lk2)) + lam_init
            lams = [lam]
            norm_weight = torch.linspace(0.5, 1.5, 2 * d, dtype=torch.float64)
            mech.norm.weight.copy_(norm_weight)
        else:  # two heads of sub-head width d_h / 2 = 2, value width 4, a scalar lambda each, no norm weight
            n_diff, d = 2, 2
            lams = [0.3, -0.45]
            mech.lambda_head.copy_(torch.tensor(lams, dtype=torch.float64))
            norm_weight = torch.ones(2 * d, dtype=torch.float64)
    want, maps = by_hand(x, wq, wk, wv, wo, lams, n_diff, d, norm_weight, lam_init, causal)
    y_fast, aux_fast = mech(x, causal=causal)
    y, aux = mech(x, causal=causal, need_weights=True)
    assert aux_fast == {}
    torch.testing.assert_close(y_fast, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(y, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(aux["diff_weights"], maps, rtol=0, atol=1e-14)
    torch.testing.assert_close(aux["lambda"], torch.tensor(lams, dtype=torch.float64), rtol=0, atol=1e-14)
    # weights: the map per output block of width d_h (the official head's value spans two blocks)
    assert aux["weights"].shape == (B, H, T, T)
    for h in range(H):
        assert torch.equal(aux["weights"][:, h], maps[:, h * n_diff // H])


def test_lambda_init_per_layer() -> None:
    assert lambda_init_at(0) == pytest.approx(0.2, abs=1e-12)
    assert lambda_init_at(1) == pytest.approx(0.355509067591, abs=1e-12)
    assert lambda_init_at(2) == pytest.approx(0.470713018344, abs=1e-12)
    for layer in range(3):
        assert DifferentialAttention(D, H, layer_idx=layer).lambda_init == lambda_init_at(layer)
        paper = DifferentialAttention(D, H, layer_idx=layer, form="paper")
        torch.testing.assert_close(paper.lambda_head, torch.full((H,), lambda_init_at(layer)))


def test_official_lambda_vectors_are_drawn_from_n_0_01() -> None:
    torch.manual_seed(0)
    mech = DifferentialAttention(4096, 2)  # d_h = 2048: enough draws to pin the std
    for p in (mech.lambda_q1, mech.lambda_k1, mech.lambda_q2, mech.lambda_k2):
        assert p.shape == (2048,) and abs(p.std().item() - 0.1) < 0.01 and abs(p.mean().item()) < 0.01


def test_parameter_counts() -> None:
    def n(m):
        return sum(p.numel() for p in m.parameters())
    base = n(SoftmaxAttention(512, 8, bias=False))
    assert n(DifferentialAttention(512, 8, form="paper")) - base == 8  # x 8 layers = Table 11's +64
    assert n(DifferentialAttention(512, 8, form="official")) - base == 6 * 64  # 4 lambda vectors + norm weight
    assert not [k for k, _ in DifferentialAttention(512, 8, form="paper").named_parameters() if "norm" in k]


def test_rope_fast_path_matches_weights_path() -> None:
    for form in ("official", "paper"):
        torch.manual_seed(0)
        mech = DifferentialAttention(16, 4, layer_idx=1, form=form, rope=True).double()
        x = torch.randn(B, T, 16, dtype=torch.float64, generator=gen(3))
        torch.testing.assert_close(mech(x, causal=True)[0], mech(x, causal=True, need_weights=True)[0],
                                   rtol=0, atol=1e-12)


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="official, paper"):
        DifferentialAttention(D, H, form="unilm")
    with pytest.raises(ValueError, match="even n_heads"):
        DifferentialAttention(12, 3)
    with pytest.raises(ValueError, match="even head dimension"):
        DifferentialAttention(6, 2, form="paper")
