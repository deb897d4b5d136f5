"""SSA mechanism (ssa paper Eqs. 6-13, Algorithm 1): tiled fast path vs dense reference, causality, locking-boundary
gradients, permutation equivariance, half precision. Paper-level analyses (Figs. 4-5, Thm. 2, parameter counts) are
tested in tests/papers/ssa/test_structure.py."""

from __future__ import annotations

import pytest
import torch

from oscrepro.attention.ssa import SelectiveSynchronizationAttention, ssa_fast
from oscrepro.attention.ssa_reference import order_parameter, pairwise_sq_dist, sync_matrix

D, H, T = 32, 4, 11  # T not a multiple of the tile size: edge tiles are exercised


def _ssa(top_k: int | None = None, omega_scale: float = 0.3, dtype: torch.dtype = torch.float64,
         **kw) -> SelectiveSynchronizationAttention:
    """Small SSA whose frequencies are scaled so that a fair share (not all, not none) of pairs lock."""
    torch.manual_seed(0)
    m = SelectiveSynchronizationAttention(D, H, top_k=top_k, block=4, tile_elems=2 * 4 * 4, **kw).to(dtype)
    with torch.no_grad():
        m.w_omega.weight.mul_(omega_scale)
        m.w_omega.bias.mul_(omega_scale)
    return m


def _grads(m: torch.nn.Module, x: torch.Tensor, causal: bool, need_weights: bool, g: torch.Tensor):
    y, aux = m(x, causal=causal, need_weights=need_weights)
    return y, aux, torch.autograd.grad(y, [x, *m.parameters()], g)


@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
@pytest.mark.parametrize("top_k", [None, 3], ids=["dense", "topk3"])
def test_fast_matches_reference(causal: bool, top_k: int | None) -> None:
    """Tiled fast path == dense formulas (Eqs. 6-13): outputs and gradients of x and every parameter."""
    m = _ssa(top_k)
    x = torch.randn(2, T, D, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, T, D, dtype=torch.float64)
    y_ref, aux, g_ref = _grads(m, x, causal, True, g)
    y_fast, aux_fast, g_fast = _grads(m, x, causal, False, g)
    locked = (aux["sync"] > 0).double().mean().item()
    assert 0.1 < locked < 0.9, f"test regime should lock some but not all pairs, got {locked:.2f}"
    assert aux_fast == {}
    torch.testing.assert_close(y_fast, y_ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_fast, g_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert all(gr.abs().sum() > 0 for gr in g_ref), "every parameter must receive gradient"


def test_fast_matches_reference_float32() -> None:
    """Same in float32, where Delta^2 from the matmul expansion carries rounding error."""
    m = _ssa(None, dtype=torch.float32)
    x = torch.randn(2, T, D, requires_grad=True)
    g = torch.randn(2, T, D)
    y_ref, _, g_ref = _grads(m, x, False, True, g)
    y_fast, _, g_fast = _grads(m, x, False, False, g)
    torch.testing.assert_close(y_fast, y_ref, rtol=1e-4, atol=1e-5)
    for a, b in zip(g_fast, g_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


def test_far_pairs_floor_changes_nothing() -> None:
    """Large frequencies (alpha Delta^2 >> 80, where the fast path floors J) give identical S, y and grads."""
    m = _ssa(None, omega_scale=30.0)
    x = torch.randn(1, T, D, dtype=torch.float64, requires_grad=True)
    g = torch.randn(1, T, D, dtype=torch.float64)
    y_ref, aux, g_ref = _grads(m, x, False, True, g)
    assert (aux["coupling"] < 1e-35).float().mean() > 0.5  # most pairs really are beyond the floor
    y_fast, _, g_fast = _grads(m, x, False, False, g)
    torch.testing.assert_close(y_fast, y_ref, rtol=1e-6, atol=1e-8)
    for a, b in zip(g_fast, g_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "reference"])
def test_causal_gradient_has_no_future(need_weights: bool) -> None:
    """dy_i/dx_j = 0 for j > i with causal=True (mask AND prefix order parameter); nonzero without it."""
    m = _ssa(None)
    x = torch.randn(1, T, D, dtype=torch.float64, requires_grad=True)
    for causal in (True, False):
        leak = 0.0
        for i in range(T - 1):
            y, _ = m(x, causal=causal, need_weights=need_weights)
            (gx,) = torch.autograd.grad(y[0, i].sum(), x)
            leak += gx[0, i + 1:].abs().sum().item()
        if causal:
            assert leak == 0.0
        else:
            assert leak > 1e-6  # the bidirectional variant does see the future: the test can fail


def test_causal_order_parameter_is_prefix() -> None:
    """Row i of the causal order parameter is Eq. (11) over tokens 1..i."""
    theta = torch.randn(2, 3, 9, 5, dtype=torch.float64)
    r = order_parameter(theta, causal=True)  # (B, H, N)
    for i in range(9):
        torch.testing.assert_close(r[..., i], order_parameter(theta[..., : i + 1, :])[..., 0])
    assert not torch.allclose(r[..., 3], r[..., -1])


def test_finite_gradients_at_locking_boundary() -> None:
    """Pairs exactly at Delta = K r J + eps, just inside it, and duplicate tokens (Delta = 0 off the diagonal):
    fast path and reference give equal, finite gradients; the literal cos(arcsin(clamp(.))) of the authors'
    code (float32, clamp to 1 - 1e-8 == 1) does not."""
    eps = 1e-8
    omega = torch.tensor([0.0, 1.0, 1.0 - 1e-12, 0.5, 0.5, 2.0], dtype=torch.float64).view(1, 1, 6, 1)
    v = torch.randn(1, 1, 6, 3, dtype=torch.float64)
    alpha = torch.zeros(1, dtype=torch.float64)  # J = 1: the threshold is K r + eps = 1 exactly
    coupling = torch.tensor(1.0 - eps, dtype=torch.float64)
    r = torch.ones(1, 1, 6, dtype=torch.float64)
    grads = []
    for fast in (True, False):
        ins = [t.clone().requires_grad_() for t in (omega, v, r, coupling)]
        if fast:
            y = ssa_fast(ins[0], ins[1], ins[2], alpha, ins[3], eps=eps, block=4, tile_elems=16)
        else:  # reference with the same r (bypass theta): one head, exact differences
            s, _ = sync_matrix(pairwise_sq_dist(ins[0]), ins[2], alpha, ins[3], eps=eps)
            assert s[0, 0, 0, 1].item() == pytest.approx(1e-3)  # locked exactly at u = 1: S = J sqrt(sync_eps)
            y = (s / (s.sum(-1, keepdim=True) + eps)) @ ins[1]
        grads.append(torch.autograd.grad(y.square().sum(), ins))
    for a, b in zip(*grads, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b)
    # the authors' literal formula at the same boundary pair, float32
    w = omega.float().requires_grad_()
    delta = (w - w.transpose(-2, -1)).square().relu().sqrt()  # (1, 1, 6, 6) ||w_i - w_j|| for d = 1
    ratio = (delta / (1.0 + eps)).clamp(-1 + eps, 1 - eps)
    (gw,) = torch.autograd.grad(torch.cos(torch.asin(ratio)).sum(), w)
    assert not torch.isfinite(gw).all()


def test_sync_matrix_properties() -> None:
    """S_ii = 1 (self-synchronization, Sec. IV.3), S in [0, 1], top-k keeps <= k entries per row, aux shapes."""
    m = _ssa(top_k=3)
    _, aux = m(torch.randn(2, T, D, dtype=torch.float64), need_weights=True)
    s = aux["sync"]
    assert set(aux) == {"weights", "sync", "coupling", "order", "freq"}
    assert s.shape == (2, H, T, T) and aux["order"].shape == (2, H, 1)
    torch.testing.assert_close(s.diagonal(dim1=-2, dim2=-1), torch.ones(2, H, T, dtype=torch.float64))
    assert ((s >= 0) & (s <= 1)).all()
    assert ((s > 0).sum(-1) <= 3).all()
    torch.testing.assert_close(aux["weights"].sum(-1), torch.ones(2, H, T, dtype=torch.float64))


def test_reference_is_permutation_equivariant() -> None:
    """Bidirectional SSA has no positional signal besides the frequencies: permuting tokens permutes y."""
    m = _ssa(None)
    x = torch.randn(1, T, D, dtype=torch.float64)
    perm = torch.randperm(T)
    y, _ = m(x)
    y_perm, _ = m(x[:, perm])
    torch.testing.assert_close(y_perm, y[:, perm])


def test_half_precision_is_computed_in_float32() -> None:
    """float16 inputs (autocast/GPU) run the tiles in float32: finite gradients, output close to float32."""
    m = _ssa(None, dtype=torch.float32)
    x = torch.randn(1, T, D)
    y32, _ = m(x)
    m16 = _ssa(None, dtype=torch.float16)
    x16 = x.half().requires_grad_()
    y16, _ = m16(x16)
    y16.float().square().sum().backward()
    assert y16.dtype == torch.float16 and torch.isfinite(x16.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in m16.parameters())
    torch.testing.assert_close(y16.float(), y32, rtol=0.05, atol=0.02)


@pytest.mark.slow
def test_compiled_kernels_match_reference() -> None:
    """torch.compile'd kernels (the large-N path) == reference in float64, dense/top-k x bidir/causal, and
    float32 outputs agree too (float32 gradients are ill-conditioned at u ~ 1: dS/du ~ 1/sqrt(sync_eps))."""
    for causal in (False, True):
        for top_k in (None, 3):
            for dtype in (torch.float64, torch.float32):
                m = _ssa(top_k, dtype=dtype, compile_min_elems=0)
                x = torch.randn(2, 16, D, dtype=dtype, requires_grad=True)
                g = torch.randn(2, 16, D, dtype=dtype)
                y_ref, _, g_ref = _grads(m, x, causal, True, g)
                y_fast, _, g_fast = _grads(m, x, causal, False, g)
                torch.testing.assert_close(y_fast, y_ref, rtol=1e-5, atol=1e-5)
                if dtype == torch.float64:
                    for a, b in zip(g_fast, g_ref, strict=True):
                        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
