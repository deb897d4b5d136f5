"""Lohe ODE (3) integrators and the Table 6 / Figure 7 convergence analysis of the fqo paper."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oscrepro.papers.fqo.lohe_ode import (
    dopri5_batched,
    dopri5_plane,
    integrate_fixed_points,
    lohe_closed_form,
    lohe_rhs,
    solve_scipy,
)
from oscrepro.papers.fqo.ode_convergence import (
    classify,
    convergence_table,
    failure_vs_dosc,
    plot_figure7,
    random_problem,
    sample_sphere,
    tmax_sweep,
)


def _random_rows(m: int, d: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """h with norms spread over [0.02, 3] and z0 uniform on the sphere, float64."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(m, d, generator=g, dtype=torch.float64)
    h = h / h.norm(dim=1, keepdim=True) * torch.empty(m, 1, dtype=torch.float64).uniform_(0.02, 3.0, generator=g)
    return h, sample_sphere((m,), d, g)


def _scipy_rows(h: torch.Tensor, z0: torch.Tensor, t_max: float) -> tuple[np.ndarray, np.ndarray]:
    out = [solve_scipy(h[i].numpy(), z0[i].numpy(), t_max) for i in range(h.shape[0])]
    return np.stack([o[0] for o in out]), np.array([o[1] for o in out])


@pytest.mark.parametrize("solver", [dopri5_batched, dopri5_plane])
@pytest.mark.parametrize("d", [2, 3, 8, 32])
def test_batched_rk45_reproduces_scipy(d, solver):
    h, z0 = _random_rows(40, d, seed=d)
    z_ref, nfev_ref = _scipy_rows(h, z0, 30.0)
    z_b, nfev_b, ok = solver(h, z0, 30.0)
    assert ok.all()
    # same algorithm, same steps: agreement far below the 1e-4 required for converged tokens
    np.testing.assert_allclose(z_b.numpy(), z_ref, atol=1e-9, rtol=0)
    assert (nfev_b.numpy() == nfev_ref).mean() >= 0.95
    assert nfev_ref.min() > 20  # the reference really integrated adaptively


@pytest.mark.parametrize("d", [2, 8, 32])
@pytest.mark.parametrize("t_max", [0.5, 3.0, 30.0])
def test_closed_form_matches_scipy(d, t_max):
    h, z0 = _random_rows(30, d, seed=100 + d)
    z_ref, _ = _scipy_rows(h, z0, t_max)
    z_c = lohe_closed_form(h, z0, t_max).numpy()
    h_hat = (h / h.norm(dim=1, keepdim=True)).numpy()
    away = (z0.numpy() * h_hat).sum(1) > -0.995  # not within ~0.1 rad of the unstable point -z*
    assert away.sum() >= 25
    np.testing.assert_allclose(z_c[away], z_ref[away], atol=1e-4, rtol=0)
    converged = np.linalg.norm(z_ref - h_hat, axis=1) < 0.01
    np.testing.assert_allclose(z_c[converged], z_ref[converged], atol=1e-4, rtol=0)


def test_closed_form_solves_the_ode_on_the_sphere():
    h, z0 = _random_rows(64, 5, seed=7)
    t = torch.full((64, 1), 1.3, dtype=torch.float64, requires_grad=True)  # one time per row
    z = lohe_closed_form(h, z0, t)  # (M, d)
    dz_dt = torch.cat([torch.autograd.grad(z[:, k].sum(), t, retain_graph=True)[0] for k in range(5)], 1)
    torch.testing.assert_close(dz_dt, lohe_rhs(z, h).detach(), atol=1e-10, rtol=1e-8)  # Eq. (3)
    torch.testing.assert_close(z.norm(dim=1), torch.ones(64, dtype=torch.float64))  # stays on S^{d-1}
    # stays in span(z0, h): residual after projecting onto that plane is zero
    basis, _ = torch.linalg.qr(torch.stack([h, z0], dim=2))  # (M, d, 2)
    resid = z - (basis @ (basis.transpose(1, 2) @ z.unsqueeze(2))).squeeze(2)
    assert resid.abs().max() < 1e-12
    # and converges to z* = h / ||h|| (Eq. 4, Theorem 2) for a long horizon
    z_inf = lohe_closed_form(h, z0, 1e4)
    torch.testing.assert_close(z_inf, F.normalize(h, dim=-1), atol=1e-9, rtol=0)


def test_closed_form_edge_cases():
    h = torch.tensor([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]], dtype=torch.float64)
    z0 = torch.tensor([[0.6, 0.8], [-1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    z = lohe_closed_form(h, z0, 30.0)
    torch.testing.assert_close(z[0], z0[0])  # h = 0: no driving force, frozen
    torch.testing.assert_close(z[1], z0[1])  # exactly antipodal: unstable equilibrium
    torch.testing.assert_close(z[2], z0[2])  # already at z*
    assert torch.isfinite(z).all()


def test_gradients_closed_form_vs_batched_rk45():
    h, z0 = _random_rows(12, 4, seed=3)
    keep = (F.normalize(h, dim=-1) * z0).sum(1) > -0.9
    h, z0 = h[keep], z0[keep]
    w = torch.randn(h.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    grads = []
    for fn in (lambda a, b: lohe_closed_form(a, b, 2.0), lambda a, b: dopri5_batched(a, b, 2.0)[0]):
        a, b = h.clone().requires_grad_(), z0.clone().requires_grad_()
        (fn(a, b) * w).sum().backward()
        grads.append((a.grad, b.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-4, rtol=1e-4)
    # z0 gradients agree on the tangent space (closed form projects z0 onto the sphere first)
    proj = lambda g: g - z0 * (g * z0).sum(1, keepdim=True)  # noqa: E731
    torch.testing.assert_close(proj(grads[0][1]), proj(grads[1][1]), atol=1e-4, rtol=1e-4)
    assert grads[0][0].abs().max() > 1e-3  # non-trivial gradients
    hs, zs = h[:3].clone().requires_grad_(), z0[:3].clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: lohe_closed_form(a, b, 0.7), (hs, zs))


def test_plane_fast_path_matches_full_replica_outputs_and_gradients():
    h, z0 = _random_rows(50, 16, seed=11)
    h = torch.cat([h, torch.zeros(1, 16, dtype=torch.float64)])  # include a degenerate h = 0 row
    z0 = torch.cat([z0, z0[:1]])
    w = torch.randn(h.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    outs = []
    for solver in (dopri5_batched, dopri5_plane):
        a, b = h.clone().requires_grad_(), z0.clone().requires_grad_()
        z_t, nfev, ok = solver(a, b, 5.0)
        (z_t * w).sum().backward()
        outs.append((z_t.detach(), nfev, a.grad, b.grad))
    (zf, nf, gh_f, gz_f), (zp, np_, gh_p, gz_p) = outs
    torch.testing.assert_close(zp, zf, atol=1e-10, rtol=0)
    torch.testing.assert_close(zp[-1], z0[-1])  # h = 0: frozen
    assert (nf == np_).double().mean() >= 0.98
    # gradients agree except at the exactly degenerate row, where the plane basis h/||h|| is not
    # differentiable (documented in dopri5_plane)
    torch.testing.assert_close(gh_p[:-1], gh_f[:-1], atol=1e-7, rtol=1e-6)
    torch.testing.assert_close(gz_p[:-1], gz_f[:-1], atol=1e-7, rtol=1e-6)
    assert gh_f.abs().max() > 1e-3


def test_fused_plane_error_norm_matches_eager_reference():
    """The torch.compile'd error norm (big batches) takes the same steps as the eager one: equal nfev, same z_T."""
    h, z0 = _random_rows(400, 32, seed=5)
    h = h * 4.0  # stiffer rows: more steps, more rejections
    z_e, n_e, ok_e = dopri5_plane(h, z0, 30.0, compiled=False)
    z_c, n_c, ok_c = dopri5_plane(h, z0, 30.0, compiled=True)
    assert bool(ok_e.all()) and bool(ok_c.all())
    assert torch.equal(n_c, n_e) and int(n_e.max()) > 100
    torch.testing.assert_close(z_c, z_e, atol=1e-10, rtol=0)


def _verdicts(t):
    return t["converged"].long() + 2 * t["apparent_antipodal"].long() + 4 * t["degenerate"].long()


def test_verdict_fractions_equal_between_methods():
    coupling, anchors = random_problem(2, 2, 16, 2, coupling_scale=0.04, seed=5)  # 64 tokens x 5 inits
    tabs = {
        m: convergence_table(coupling, anchors, method=m, return_arrays=True)
        for m in ("scipy", "batched", "closed_form")
    }
    ref = tabs["scipy"]
    assert ref["n_solves"] == 320
    # a non-trivial mix of verdicts, otherwise equality would prove nothing
    assert 0.2 < ref["frac_converged"] < 0.95 and ref["frac_apparent_antipodal"] > 0.02
    assert ref["nfev_per_token"] > 20
    for m in ("batched", "closed_form"):
        for k in ("frac_converged", "frac_apparent_antipodal", "frac_degenerate", "frac_intermediate"):
            assert abs(tabs[m][k] - ref[k]) <= 0.005, (m, k)
        assert (_verdicts(tabs[m]) != _verdicts(ref)).sum() <= 1, m
    assert (
        torch.equal(tabs["batched"]["nfev"], ref["nfev"])
        or (tabs["batched"]["nfev"] == ref["nfev"]).double().mean() > 0.98
    )


def test_convergence_rises_with_d_osc():
    # Prop. 4 (and 3): same coupling distribution, fraction converged rises with d_osc
    problems = {d: random_problem(8, 2, 32, d, coupling_scale=0.05, seed=2, coupling_seed=2) for d in (2, 4, 8, 16, 32)}
    rows = failure_vs_dosc(problems, method="closed_form")
    conv = [r["frac_converged"] for r in rows]
    anti = [r["frac_apparent_antipodal"] for r in rows]
    assert [r["d_osc"] for r in rows] == [2, 4, 8, 16, 32]
    assert all(b > a for a, b in zip(conv, conv[1:], strict=False)), conv
    assert anti[0] > 3 * anti[-1], anti


def test_tmax_sweep_monotone_and_methods_agree():
    coupling, anchors = random_problem(2, 2, 16, 2, coupling_scale=0.04, seed=8)
    t_maxes = (30, 100, 300, 1000, 5000)
    fast = tmax_sweep(coupling, anchors, t_maxes, method="closed_form", n_inits=3)
    rk = tmax_sweep(coupling, anchors, t_maxes, method="batched", n_inits=3)
    conv = [r["frac_converged"] for r in fast]
    assert [r["t_max"] for r in fast] == [float(t) for t in t_maxes]
    assert all(b >= a for a, b in zip(conv, conv[1:], strict=False)) and conv[-1] > conv[0]
    assert [r["frac_converged"] for r in rk] == pytest.approx(conv, abs=1 / 192 + 1e-12)


def test_sequential_init_uses_previous_fixed_point_and_helps():
    coupling, anchors = random_problem(4, 2, 32, 2, coupling_scale=0.1, causal=True, seed=1)
    rand = convergence_table(coupling, anchors, method="closed_form", init="random")
    seq = convergence_table(coupling, anchors, method="closed_form", init="sequential")
    assert seq["mean_err"] < rand["mean_err"]
    # with t_max -> 0 the state is z(0): sequential z_i(0) must equal z*_{i-1}
    tiny = convergence_table(
        coupling, anchors, method="closed_form", init="sequential", t_max=1e-12, n_inits=1, return_arrays=True
    )
    z_star = F.normalize(coupling @ anchors, dim=-1, eps=1e-8)  # (B, H, T, d)
    expected = (z_star[..., :-1, :] - z_star[..., 1:, :]).norm(dim=-1)  # ||z*_{i-1} - z*_i||
    got = tiny["err"].view(4, 2, 32)[..., 1:]
    torch.testing.assert_close(got, expected, atol=1e-9, rtol=0)


def test_degenerate_and_masking():
    # Sec. 3 example: on S^1 with r2 = -r1 and w1 = w2 the anchor sum vanishes exactly.
    anchors = torch.tensor([[[[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]]]], dtype=torch.float64)
    coupling = torch.tensor([[[[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 2.0]]]], dtype=torch.float64)
    tab = convergence_table(coupling, anchors, method="batched", return_arrays=True)
    assert tab["frac_degenerate"] == pytest.approx(2 / 3)
    assert tab["frac_converged"] == pytest.approx(1 / 3)
    masked = convergence_table(coupling, anchors, method="closed_form", token_mask=torch.tensor([[False, False, True]]))
    assert masked["n_tokens"] == 1 and masked["frac_converged"] == 1.0
    v = classify(torch.tensor([0.005, 0.05, 0.5, 0.5]), torch.tensor([1.0, 1.0, 1.0, 0.001]))
    assert v["converged"].tolist() == [True, False, False, False]
    assert v["intermediate"].tolist() == [False, True, False, False]
    assert v["apparent_antipodal"].tolist() == [False, False, True, False]
    assert v["degenerate"].tolist() == [False, False, False, True]


@pytest.mark.parametrize("method", ["closed_form", "rk45"])
def test_integrate_fixed_points_for_model_use(method):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(2, 3, 5, 4, generator=g) * 2  # (B, H, T, d) float32, like a model's aux["h"]
    z0 = F.normalize(torch.randn(2, 3, 5, 4, generator=g), dim=-1)
    z = integrate_fixed_points(h, z0, t_max=30.0, method=method)
    assert z.shape == h.shape and z.dtype == torch.float32
    z_star = F.normalize(h, dim=-1)
    err = (z - z_star).norm(dim=-1)
    assert (err < 1e-3).float().mean() > 0.9
    short = integrate_fixed_points(h, z0, t_max=0.01, method=method)
    assert (short - z_star).norm(dim=-1).mean() > 0.1  # a short horizon is genuinely not converged
    with pytest.raises(ValueError):
        integrate_fixed_points(h, z0, method="euler")


def test_on_fqo_mechanism_aux():
    fqo = pytest.importorskip("oscrepro.attention.fqo")
    torch.manual_seed(0)
    attn = fqo.FixedQueryOscillatorAttention(d_model=16, n_heads=2, d_osc=4)
    _, aux = attn(torch.randn(2, 6, 16), causal=True, need_weights=True)
    torch.testing.assert_close(aux["coupling"] @ aux["anchors"], aux["h"])
    tab = convergence_table(aux["coupling"], aux["anchors"], n_inits=2, method="batched")
    assert tab["n_tokens"] == 2 * 2 * 6 and tab["n_solves"] == 48 and tab["nfev_per_token"] > 0


def test_plot_figure7(tmp_path):
    coupling, anchors = random_problem(1, 1, 8, 2, coupling_scale=0.05, seed=0)
    sweep = tmax_sweep(coupling, anchors, (30, 300), method="closed_form")
    rows = failure_vs_dosc({d: random_problem(1, 1, 8, d, 0.05, seed=0) for d in (2, 8)}, method="closed_form")
    out = plot_figure7(sweep, rows, tmp_path / "fig7.png")
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_unknown_method_and_init_raise():
    coupling, anchors = random_problem(1, 1, 4, 2, seed=0)
    with pytest.raises(ValueError):
        convergence_table(coupling, anchors, method="euler")
    with pytest.raises(ValueError):
        convergence_table(coupling, anchors, init="warm")
