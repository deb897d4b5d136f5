"""OsciFormer (osciformer App. A): closed-form oscillator trajectories equal the integrated ODE in all three
regimes and across zeta = 1; gradients are finite and correct at critical damping; the query ridge fit
reproduces a sinusoid; closed-form logits equal quadrature; the fast forward equals the slow reference in values
and gradients; one token gives W_O v; causal flag and chunking do not change the output; planted mutations fail."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oscrepro.attention import osciformer as osc
from oscrepro.attention import osciformer_core as core
from oscrepro.attention import oscillator_kernels as ok
from oscrepro.attention.osciformer import OsciFormerAttention
from oscrepro.attention.osciformer_core import causal_core, pair_classes
from oscrepro.attention.osciformer_reference import osciformer_reference, oscillator_ode_reference
from oscrepro.attention.oscillator_kernels import (
    driven_state,
    frequency_grid,
    oscillator_response,
    oscillator_state,
    query_eval,
    ridge_query_fit,
    steady_state_amplitude,
)
from oscrepro.papers.osciformer.legacy_kernel import LegacyOsciFormerAttention

F64 = torch.float64
ZETAS = [0.0, 0.3, 1 - 1e-9, 1.0, 1 + 1e-9, 2.5]
T_EVAL = np.linspace(0.0, 6.0, 25)


def t64(v) -> torch.Tensor:
    return torch.as_tensor(v, dtype=F64)


def ode_error(omega: float, zeta: float, x0: float = 0.7, v0: float = -1.3) -> float:
    """max |closed form - solve_ivp| over T_EVAL of (x, x'), homogeneous."""
    x_ref, v_ref = oscillator_ode_reference(T_EVAL, x0, v0, omega, zeta)
    x, v = oscillator_state(t64(T_EVAL), t64(x0), t64(v0), t64(omega), t64(zeta))
    return max(np.abs(x.numpy() - x_ref).max(), np.abs(v.numpy() - v_ref).max())


@pytest.mark.parametrize("zeta", ZETAS)
@pytest.mark.parametrize("omega", [0.05, 1.3, 6.0])
def test_homogeneous_matches_ode(omega: float, zeta: float) -> None:
    assert ode_error(omega, zeta) < 1e-6


def test_response_is_continuous_across_critical_damping() -> None:
    t = t64(np.linspace(0, 8, 81))
    xs = [oscillator_response(t, t64(1.0), t64(-2.0), t64(1.7), t64(z)) for z in (1 - 1e-9, 1.0, 1 + 1e-9)]
    assert (xs[0] - xs[1]).abs().max() < 1e-8 and (xs[2] - xs[1]).abs().max() < 1e-8
    # and the three regimes agree with the textbook critical solution e^{-w t}(x0 + (v0 + w x0) t)
    crit = torch.exp(-1.7 * t) * (1.0 + (-2.0 + 1.7) * t)
    assert (xs[1] - crit).abs().max() < 1e-12


@pytest.mark.parametrize("zeta", [0.2, 1.0, 3.0])
def test_driven_matches_ode(zeta: float) -> None:
    omega, lam = 1.1, t64([0.3, 1.1, 2.5])
    p_amp, q_amp = t64([0.5, -0.2, 0.7]), t64([0.1, 0.4, -0.3])
    w = steady_state_amplitude(p_amp, q_amp, lam, t64(omega), t64(zeta))
    x, v = driven_state(t64(T_EVAL), t64(0.4), t64(0.9), w, lam, t64(omega), t64(zeta))
    x_ref, v_ref = oscillator_ode_reference(T_EVAL, 0.4, 0.9, omega, zeta, p_amp.numpy(), q_amp.numpy(), lam.numpy())
    assert np.abs(x.numpy() - x_ref).max() < 1e-6 and np.abs(v.numpy() - v_ref).max() < 1e-6


@pytest.mark.parametrize("zeta", [1.0, 1 - 1e-7, 1 + 1e-7, 0.99, 1.03])
@pytest.mark.parametrize("t", [0.0, 0.05, 2.0])
def test_gradients_at_critical_damping(zeta: float, t: float) -> None:
    """Finite and equal to finite differences (gradcheck) in t, x0, v0, omega, zeta at and near zeta = 1."""
    args = tuple(t64(a).requires_grad_() for a in (t, 0.6, -0.8, 1.4, zeta))
    assert torch.autograd.gradcheck(lambda *a: oscillator_state(*a), args)
    grads = torch.autograd.grad(oscillator_response(*args), args)
    assert all(torch.isfinite(g) for g in grads)


def test_ridge_fit_reproduces_sinusoid() -> None:
    lam = frequency_grid("linear", 6, 1, (0.5, 3.0))  # (1, J)
    times = torch.sort(torch.rand(1, 40, dtype=F64, generator=torch.Generator().manual_seed(0)) * 12).values
    q = (1.5 * torch.cos(lam[0, 2] * times) - 0.7 * torch.sin(lam[0, 2] * times))[:, None, :, None]  # (B,H,T,1)
    a, b = ridge_query_fit(times, q, lam, ridge=1e-10)  # (1, 1, T, J, 1)
    assert torch.allclose(a[0, 0, -1, :, 0], t64([0, 0, 1.5, 0, 0, 0]), atol=1e-6)
    assert torch.allclose(b[0, 0, -1, :, 0], t64([0, 0, -0.7, 0, 0, 0]), atol=1e-6)
    fitted = query_eval(a[0, 0, -1], b[0, 0, -1], lam[0], times[0])  # (T, 1) on the grid
    assert (fitted - q[0, 0]).abs().max() < 1e-8


def mech_and_input(
    drive: str = "matrix", seed: int = 0, **kw
) -> tuple[OsciFormerAttention, torch.Tensor, torch.Tensor]:
    """A small float64 layer with random drive and velocity maps, channels in all regimes and exactly critical,
    and times with a tie and a 1e-9 gap."""
    torch.manual_seed(seed)
    mech = OsciFormerAttention(8, 2, drive=drive, zeta_range=(0.2, 2.0), **kw).double()
    with torch.no_grad():
        for name, p in mech.named_parameters():
            if "drive" in name or "velocity" in name:
                p.normal_(0, 0.3)
        mech.zeta_raw_k[0, :3] = torch.log(torch.expm1(t64([1.0, 1 - 1e-9, 1 + 1e-9])))
        mech.zeta_raw_v[1, :1] = torch.log(torch.expm1(t64([1.0])))
    x = torch.randn(2, 5, 8, dtype=F64, generator=torch.Generator().manual_seed(seed + 1))
    times = (torch.rand(2, 5, dtype=F64, generator=torch.Generator().manual_seed(seed + 2)) * 1.5 + 0.01).cumsum(1)
    times[0, 2] = times[0, 1]
    times[1, 3] = times[1, 2] + 1e-9
    return mech, x, times


@pytest.mark.parametrize("drive", ["matrix", "gains", "none"])
def test_logits_match_quadrature(drive: str) -> None:
    mech, x, times = mech_and_input(drive)
    _, aux = mech(x, times=times, need_weights=True)
    _, _, ref = osciformer_reference(mech, x, times)
    ok_ = torch.isfinite(ref)
    assert torch.equal(ok_, torch.isfinite(aux["logits"]))  # same causal support i <= j
    assert (aux["logits"][ok_] - ref[ok_]).abs().max() < 1e-8


def test_fast_forward_matches_reference_values_and_gradients() -> None:
    mech, x, times = mech_and_input("matrix", chunk_size=2)
    x = x.requires_grad_()
    y, _ = mech(x, times=times)
    y_ref, _, _ = osciformer_reference(mech, x, times)
    assert (y - y_ref).abs().max() < 1e-9
    params = [p for p in mech.parameters() if p.requires_grad]
    g = torch.autograd.grad(y.square().sum(), [x, *params])
    g_ref = torch.autograd.grad(y_ref.square().sum(), [x, *params])
    for a, b in zip(g, g_ref, strict=True):
        assert torch.isfinite(a).all() and (a - b).abs().max() < 1e-7


def test_small_lag_branch_agrees_with_closed_form() -> None:
    """Logits where the Gauss-Legendre branch (small_lag = 1) and the 1/Delta closed form (small_lag = 1e-3) meet."""
    mech, x, times = mech_and_input("gains")
    times = times * 0.05  # lags ~ 0.04: rho * Delta between 1e-3 and 1
    _, aux = mech(x, times=times, need_weights=True)
    mech.small_lag = 1e-3
    _, aux2 = mech(x, times=times, need_weights=True)
    fin = torch.isfinite(aux["logits"])
    assert (aux["logits"][fin] - aux2["logits"][fin]).abs().max() < 1e-7


def test_single_token_is_wo_v() -> None:
    mech, x, _ = mech_and_input("matrix")
    x1 = x[:, :1]
    y, _ = mech(x1, times=t64([[3.0], [7.5]]))
    v = mech.qkv(x1).chunk(3, dim=-1)[2]
    assert torch.allclose(y, mech.out(v), atol=1e-12)


def test_causal_flag_and_chunking_do_not_change_output() -> None:
    mech, x, times = mech_and_input("gains")
    y, _ = mech(x, times=times)
    assert torch.equal(mech(x, times=times, causal=True)[0], y)
    mech.chunk_size = 2
    assert torch.allclose(mech(x, times=times)[0], y, atol=1e-12)


@pytest.mark.parametrize("grid", ["log", "linear", "random", "geometric", "harmonic"])
def test_table9_grids_and_learnable_frequencies(grid: str) -> None:
    mech = OsciFormerAttention(8, 2, n_modes=4, freq_grid=grid, learn_freqs=True).double()
    x = torch.randn(1, 4, 8, dtype=F64)
    mech(x)[0].sum().backward()
    assert mech.log_freqs.shape == (2, 4) and torch.isfinite(mech.log_freqs.grad).all()


def test_planted_mutations_fail() -> None:
    """A sign flip in the damped kernel or in the critical series is caught by the checks above."""
    orig, series = ok.damped_basis, list(ok._S_SERIES)
    try:
        ok.damped_basis = lambda t, w, z: (orig(t, w, z)[0], -orig(t, w, z)[1])
        assert ode_error(1.3, 0.3) > 1e-3
        ok.damped_basis = orig
        ok._S_SERIES[1] = -ok._S_SERIES[1]
        assert ode_error(0.3, 0.95) > 1e-3  # |D| < 0.1 up to t ~ 3.4: the series branch
    finally:
        ok.damped_basis, ok._S_SERIES[:] = orig, series
    mech, x, times = mech_and_input("none")
    _, _, ref = osciformer_reference(mech, x, times)
    state = osc.oscillator_state
    try:  # the key velocity at t_j enters the closed-form logit with the wrong sign
        osc.oscillator_state = lambda *a: (state(*a)[0], -state(*a)[1])
        _, aux = mech(x, times=times, need_weights=True)
    finally:
        osc.oscillator_state = state
    fin = torch.isfinite(ref)
    assert (aux["logits"][fin] - ref[fin]).abs().max() > 1e-3
    assert torch.isfinite(aux["logits"][fin]).all()


@pytest.mark.parametrize("zeta", [0.05, 0.4, 0.999, 1.5, 4.0])
def test_transient_modes_match_state(zeta: float) -> None:
    """x(s) = sum_m a_m e^{r_m s} (and x' with r_m a_m) equals oscillator_state away from critical damping;
    channels within crit_tol of zeta = 1 are flagged and get zero amplitude."""
    s = t64(np.linspace(0, 6, 25))[:, None]
    x0, v0, om = t64([0.7, -0.2]), t64([-1.3, 0.4]), t64([1.3, 0.05])
    r, a, crit = ok.transient_modes(x0, v0, om, t64(zeta))
    x, v = oscillator_state(s, x0, v0, om, t64(zeta))
    modes = a * torch.exp(r * s)  # (S, 2d)
    assert torch.equal(crit, torch.full((2,), abs(1 - zeta**2) < 1e-2))
    if not crit.any():
        assert (modes[:, :2] + modes[:, 2:]).imag.abs().max() < 1e-12
        assert ((modes[:, :2] + modes[:, 2:]).real - x).abs().max() < 1e-12
        assert ((r * modes)[:, :2] + (r * modes)[:, 2:]).real.sub(v).abs().max() < 1e-12


@pytest.mark.parametrize("drive", ["matrix", "gains"])
def test_fast_path_matches_reference_on_xor_times(drive: str) -> None:
    """XOR-like times (gaps k/32, k in {0, 1, 2}, then padding that repeats the last time: many ties): the
    separable fast path (closed form for Delta > 0, Gauss-Legendre for Delta * rho < small_lag, the tie product
    for Delta = 0) equals the loop/quadrature reference in values, logits and gradients."""
    mech, x, _ = mech_and_input(drive, seed=3)
    gaps = torch.tensor([[0, 1, 2, 1, 0, 0], [1, 0, 2, 2, 1, 0]], dtype=F64) / 32
    times = gaps.cumsum(1)
    times[0, 4:] = times[0, 3]  # padding: ties with the last real token
    x = torch.randn(2, 6, 8, dtype=F64, generator=torch.Generator().manual_seed(7)).requires_grad_()
    y, aux = mech(x, times=times, need_weights=True)
    y_ref, _, ref = osciformer_reference(mech, x, times, n_panels=4)
    fin = torch.isfinite(ref)
    assert (aux["logits"][fin] - ref[fin]).abs().max() < 1e-8
    assert (y - y_ref).abs().max() < 1e-9
    params = [p for p in mech.parameters() if p.requires_grad]
    g = torch.autograd.grad(y.square().sum(), [x, *params])
    g_ref = torch.autograd.grad(y_ref.square().sum(), [x, *params])
    for a, b in zip(g, g_ref, strict=True):
        assert torch.isfinite(a).all() and (a - b).abs().max() < 1e-7


@pytest.mark.parametrize("grid", ["log", "random"])
def test_ridge_coef_matches_prefix_solves(grid: str) -> None:
    """The (G_j^{-1} phi_l) @ Q form of the query fit equals one ridge solve per prefix, for a grid shared by the
    heads (one Gram matrix for all) and per-head grids, with the rows split into several memory blocks."""
    lam = frequency_grid(grid, 4, 3, (0.05, 3.0))  # (H, J)
    gen = torch.Generator().manual_seed(4)
    times = torch.sort(torch.rand(2, 9, dtype=F64, generator=gen) * 6, dim=1).values
    q = torch.randn(2, 3, 9, 5, dtype=F64, generator=gen)
    coef = ok.ridge_query_coef(times, q, lam, 1e-2, max_elems=300)  # (B, H, T, D, J, 2), 300: blocks of 1-2 rows
    for b in range(2):
        for h in range(3):
            for j in range(9):
                phase = times[b, : j + 1, None] * lam[h]  # (j+1, J)
                phi = torch.cat([phase.cos(), phase.sin()], 1)  # (j+1, 2J)
                sol = torch.linalg.solve(phi.T @ phi + 1e-2 * torch.eye(8, dtype=F64), phi.T @ q[b, h, : j + 1])
                assert torch.allclose(coef[b, h, j].permute(2, 1, 0).reshape(8, 5), sol, atol=1e-10)


@pytest.mark.parametrize("drive", ["matrix", "gains"])
def test_small_lag_threshold_error_bound(drive: str) -> None:
    """The closed form replaces Gauss-Legendre for Delta * rho >= small_lag, where its error ~eps |F| / Delta is
    largest just above the threshold: XOR-like times (gaps 0, 1/32, 2/32) with gaps placed at 1.01 x the
    threshold still give the loop/quadrature reference's logits, values and gradients, and the same logits as
    the Gauss-Legendre branch on those pairs."""
    mech, _, _ = mech_and_input(drive, seed=5)
    lam, (om, ze) = mech.log_freqs.double().exp(), mech.omega_zeta("k")
    rho = float((lam.max() + torch.maximum(lam.max(), torch.maximum(om.max(), 2 * (om * ze).max()))).detach())
    edge = 1.01 * mech.small_lag / rho
    assert rho / 32 >= mech.small_lag  # the XOR gaps themselves take the closed form
    gaps = torch.tensor([[0, 1 / 32, edge, 2 / 32, edge, 0], [1 / 32, edge, 0, 1 / 32, 2 / 32, edge]], dtype=F64)
    times = gaps.cumsum(1)
    x = torch.randn(2, 6, 8, dtype=F64, generator=torch.Generator().manual_seed(8)).requires_grad_()
    y, aux = mech(x, times=times, need_weights=True)
    y_ref, _, ref = osciformer_reference(mech, x, times, n_panels=4)
    fin = torch.isfinite(ref)
    assert (aux["logits"][fin] - ref[fin]).abs().max() < 1e-8
    assert (y - y_ref).abs().max() < 1e-9
    params = [p for p in mech.parameters() if p.requires_grad]
    g = torch.autograd.grad(y.square().sum(), [x, *params])
    g_ref = torch.autograd.grad(y_ref.square().sum(), [x, *params])
    for a, b in zip(g, g_ref, strict=True):
        assert (a - b).abs().max() < 1e-7
    with torch.no_grad():
        mech.small_lag = 1.0  # Gauss-Legendre for Delta * rho < 1: exact there (6 nodes)
        _, aux_gl = mech(x, times=times, need_weights=True)
    near = (times[:, :, None] - times[:, None, :]).mul(rho).lt(1.0)[:, None].expand_as(ref) & fin
    assert (aux["logits"][near] - aux_gl["logits"][near]).abs().max() < 1e-8


# --- the rebuilt kernel (issue 37): causal core, anchored transient, batch blocks, against references -----------


def _dense_core(q, k, v, sp_alpha, sp_index, times, row0, scale, rho, small_lag):
    """Plain autograd version of ``causal_core``: the whole (B, H, C, K) logit matrix at once."""
    c, n_keys = q[0].shape[2], k[0].shape[2]
    delta = times[:, row0 : row0 + c, None] - times[:, None, :n_keys]  # (B, C, K)
    allowed = torch.arange(n_keys) <= torch.arange(row0, row0 + c)[:, None]
    tie, small = pair_classes(delta, allowed, rho, small_lag)
    regular = allowed & ~(tie | small)
    num = sum(q_p @ k_p.mT for q_p, k_p in zip(q, k, strict=True))  # (B, H, C, K)
    alpha = torch.where(regular[:, None], num / torch.where(regular, delta, 1.0)[:, None], 0.0)
    alpha = alpha.permute(0, 2, 3, 1).index_put((sp_index[0], sp_index[1], sp_index[2]), sp_alpha)  # (B, C, K, H)
    alpha = alpha.permute(0, 3, 1, 2)  # (B, H, C, K)
    w = (alpha * scale).masked_fill(~allowed, float("-inf")).softmax(-1)
    return [w @ v_p for v_p in v]


def _core_inputs(seed: int = 0):
    """Factor parts of a segment starting at row 2 (C = 5 rows, K = 7 keys), times with a tie and a tiny gap, and
    the special pairs with their logits."""
    gen = torch.Generator().manual_seed(seed)
    times = torch.tensor([[0.0, 0.3, 0.3, 0.9, 0.9 + 1e-4, 1.6, 2.0], [0.1, 0.2, 0.7, 0.71, 1.5, 1.5, 1.5]], dtype=F64)
    row0, c, n_keys, rho, small_lag = 2, 5, 7, 20.0, 0.5
    q = [torch.randn(2, 3, c, w, dtype=F64, generator=gen) for w in (4, 3)]
    k = [torch.randn(2, 3, n_keys, w, dtype=F64, generator=gen) for w in (4, 3)]
    v = [torch.randn(2, 3, n_keys, w, dtype=F64, generator=gen) for w in (5, 2)]
    delta = times[:, row0:, None] - times[:, None, :]
    allowed = torch.arange(n_keys) <= torch.arange(row0, row0 + c)[:, None]
    sp_index = torch.stack(torch.cat([m.nonzero() for m in pair_classes(delta, allowed, rho, small_lag)]).unbind(1))
    sp_alpha = torch.randn(sp_index.shape[1], 3, dtype=F64, generator=gen)
    return q, k, v, sp_alpha, sp_index, times, row0, rho, small_lag


@pytest.mark.parametrize("keep", [True, False])
def test_core_matches_dense_softmax_and_gradcheck(keep: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocked causal core (2-row blocks, weights kept or recomputed in the backward) equals plain autograd
    softmax attention over the same logits in values and gradients, and passes gradcheck (finite differences)."""
    monkeypatch.setattr(core, "KEEP_BYTES", 2**30 if keep else 0)
    q, k, v, sp_alpha, sp_index, times, row0, rho, small_lag = _core_inputs()
    assert sp_index.shape[1] >= 4  # ties and tiny lags both present
    leaves = [z.requires_grad_() for z in (*q, *k, *v, sp_alpha)]

    def blocked(*z):
        mix, _, _ = causal_core(
            list(z[0:2]), list(z[2:4]), list(z[4:6]), z[6], times, row0, sp_index, 0.4, rho, small_lag, 2, False
        )
        return tuple(mix)

    out = blocked(*leaves)
    ref = _dense_core(q, k, v, sp_alpha, sp_index, times, row0, 0.4, rho, small_lag)
    assert all((a - b).abs().max() < 1e-13 for a, b in zip(out, ref, strict=True))
    probe = [torch.randn_like(o) for o in out]
    g = torch.autograd.grad(sum((o * p).sum() for o, p in zip(out, probe, strict=True)), leaves)
    g_ref = torch.autograd.grad(sum((o * p).sum() for o, p in zip(ref, probe, strict=True)), leaves)
    for a, b in zip(g, g_ref, strict=True):
        assert (a - b).abs().max() <= 1e-12 * b.abs().max()
    assert torch.autograd.gradcheck(blocked, tuple(leaves))


def hard_regime_mech(drive: str, seed: int = 0) -> tuple[OsciFormerAttention, torch.Tensor, torch.Tensor]:
    """A float64 layer whose key and value channels sit exactly at, and 1e-9 around, critical damping, slightly
    off it (0.995, 1.005), strongly overdamped (zeta 2.5..4: eigenmodes), weakly damped at a grid frequency
    (near resonance) and very slow (omega 0.02); random drive and velocity maps; times with a tie."""
    torch.manual_seed(seed)
    mech = OsciFormerAttention(12, 2, n_modes=3, drive=drive).double()
    lam = mech.log_freqs.double().exp()
    omega = t64([[1.3, 0.7, 5.0, float(lam[0, 1]), 0.02, 2.0], [0.9, 4.0, 6.0, float(lam[1, 2]), 1.1, 0.3]])
    zeta = t64([[1.0, 1 - 1e-9, 3.0, 0.05, 0.3, 1.005], [1 + 1e-9, 2.5, 4.0, 0.05, 0.995, 1.0]])
    with torch.no_grad():
        for name, p in mech.named_parameters():
            if "drive" in name or "velocity" in name:
                p.normal_(0, 0.3)
        for role, flip in (("k", False), ("v", True)):
            om, ze = (omega.flip(0), zeta.flip(0)) if flip else (omega, zeta)
            getattr(mech, f"log_omega_{role}").copy_(om.log())
            getattr(mech, f"zeta_raw_{role}").copy_(torch.log(torch.expm1(ze)))
    x = torch.randn(2, 6, 12, dtype=F64, generator=torch.Generator().manual_seed(seed + 1))
    times = (torch.rand(2, 6, dtype=F64, generator=torch.Generator().manual_seed(seed + 2)) * 0.8 + 0.05).cumsum(1)
    times[0, 3] = times[0, 2]
    return mech, x, times


def _grad_rel_error(
    y: torch.Tensor, y_ref: torch.Tensor, leaves: list[torch.Tensor], leaves_ref: list[torch.Tensor] | None = None
) -> float:
    """max over leaves of max |g - g_ref| / max |g_ref| for the loss sum(y^2) (y_ref's leaves: ``leaves_ref``, or
    the same)."""
    g = torch.autograd.grad(y.square().sum(), leaves)
    g_ref = torch.autograd.grad(y_ref.square().sum(), leaves if leaves_ref is None else leaves_ref)
    assert all(torch.isfinite(a).all() for a in g)
    return max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(g, g_ref, strict=True))


@pytest.mark.parametrize("drive", ["matrix", "gains", "none"])
def test_hard_regimes_match_reference(drive: str) -> None:
    """Critical, near-critical, strongly overdamped (the eigenmode path) and near-resonant channels: outputs equal
    the loop/quadrature reference to 1e-10 and gradients to 1e-8 relative, in float64."""
    mech, x, times = hard_regime_mech(drive)
    lam = mech.log_freqs.double().exp()
    span = float((times[:, -1] - times[:, 0]).amax())
    eig = mech._transient_constants(mech.constants("k", lam), mech.constants("v", lam), span)["eig"]
    assert eig is not None and eig.any() and not eig.all()  # both transient representations are exercised
    x = x.requires_grad_()
    y, aux = mech(x, times=times, need_weights=True)
    y_ref, _, ref = osciformer_reference(mech, x, times)
    fin = torch.isfinite(ref)
    assert (y - y_ref).abs().max() < 1e-10
    assert (aux["logits"][fin] - ref[fin]).abs().max() < 1e-9
    assert _grad_rel_error(y, y_ref, [x, *(p for p in mech.parameters() if p.requires_grad)]) < 1e-8


def _legacy_twin(mech: OsciFormerAttention) -> LegacyOsciFormerAttention:
    """The pre-rebuild kernel with ``mech``'s parameters."""
    legacy = LegacyOsciFormerAttention(mech.d_model, mech.n_heads, n_modes=mech.n_modes, drive=mech.drive).double()
    legacy.load_state_dict(mech.state_dict())
    return legacy


@pytest.mark.parametrize("drive", ["matrix", "gains"])
@pytest.mark.parametrize("max_growth", [300.0, 3.0])
def test_matches_pre_rebuild_kernel(drive: str, max_growth: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bench-like layer (random drive and velocity maps, XOR-like times with ties, T 40): the rebuilt kernel equals
    the pre-rebuild one (papers/osciformer/legacy_kernel.py) to 1e-10 in the output and 1e-8 relative in every
    gradient, in one anchor segment and in several (max_growth 3). omega starts at 0.1 here: with omega ~ lam ~ 0.01
    (the default range's edge) the closed form itself is ill-conditioned, and both kernels sit ~3e-10 (output) and
    ~1e-6 (relative gradient of the key omega, zeta and drive) from the quadrature reference, in different
    directions; ``test_hard_regimes_match_reference`` covers slow and near-resonant channels against quadrature."""
    monkeypatch.setattr(osc, "MAX_GROWTH", max_growth)
    torch.manual_seed(6)
    mech = OsciFormerAttention(16, 2, n_modes=4, drive=drive, omega_range=(0.1, 10.0)).double()
    with torch.no_grad():
        for name, p in mech.named_parameters():
            if "drive" in name or "velocity" in name:
                p.normal_(0, 0.1)
    times = (torch.randint(0, 3, (2, 40), generator=torch.Generator().manual_seed(7)).double() / 32).cumsum(1)
    lam = mech.log_freqs.double().exp()
    n_segments = len(mech._segments(times, mech.constants("k", lam), mech.constants("v", lam)))
    assert (n_segments == 1) == (max_growth == 300.0)
    x = torch.randn(2, 40, 16, dtype=F64, generator=torch.Generator().manual_seed(8)).requires_grad_()
    y, _ = mech(x, times=times)
    legacy = _legacy_twin(mech)
    y_old, _ = legacy(x, times=times)
    assert (y - y_old).abs().max() < 1e-10
    assert _grad_rel_error(y, y_old, [x, *mech.parameters()], [x, *legacy.parameters()]) < 1e-8


def test_blocks_do_not_change_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch rows one at a time, 3-row core blocks, several anchor segments and recomputed weights give the same
    output (1e-11) and gradients (1e-9 relative) as the defaults."""
    mech, x, times = hard_regime_mech("matrix", seed=4)
    x = x.requires_grad_()
    leaves = [x, *(p for p in mech.parameters() if p.requires_grad)]
    y, _ = mech(x, times=times)
    monkeypatch.setattr(osc, "BATCH_BYTES", 1)
    monkeypatch.setattr(osc, "MAX_GROWTH", 2.0)
    monkeypatch.setattr(core, "KEEP_BYTES", 0)
    mech.chunk_size = 3
    lam = mech.log_freqs.double().exp()
    assert len(mech._segments(times, mech.constants("k", lam), mech.constants("v", lam))) > 1
    assert mech._batch_step(2, 6, 3) == 1
    y_blocked, _ = mech(x, times=times)
    assert (y - y_blocked).abs().max() < 1e-11
    assert _grad_rel_error(y_blocked, y, leaves) < 1e-9


def test_long_spans_with_slow_and_overdamped_channels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Integer times up to 1200 with slow channels (rate ~0.3: one anchor segment spans ~1000 time units) and some
    overdamped enough for eigenmodes: every anchored factor stays finite, gradients too, and the output and
    gradients equal those of short segments (max_growth 20)."""
    torch.manual_seed(9)
    mech = OsciFormerAttention(4, 1, n_modes=2, omega_range=(0.05, 0.1), zeta_range=(0.05, 0.3)).double()
    with torch.no_grad():
        mech.zeta_raw_k[0, :2] = torch.log(torch.expm1(t64([1.5, 2.0])))  # sigma ~0.1, sigma * span >> 1
        for name, p in mech.named_parameters():
            if "drive" in name or "velocity" in name:
                p.normal_(0, 0.3)
    x = torch.randn(1, 1201, 4, dtype=F64, generator=torch.Generator().manual_seed(10)).requires_grad_()
    leaves = [x, *(p for p in mech.parameters() if p.requires_grad)]
    lam = mech.log_freqs.double().exp()
    times = torch.arange(1201, dtype=F64)[None]
    assert len(mech._segments(times, mech.constants("k", lam), mech.constants("v", lam))) <= 2
    y, _ = mech(x)
    monkeypatch.setattr(osc, "MAX_GROWTH", 20.0)
    y_short, _ = mech(x)
    assert torch.isfinite(y).all() and (y - y_short).abs().max() < 1e-9
    assert _grad_rel_error(y, y_short, leaves) < 1e-8
