"""osciformer App. E.2 model (oscrepro.papers.osciformer.resonance_model): closed-form logits vs quadrature and ODE
integration, gradients, the [t_i, T] window, shapes, a tiny-batch overfit, and the figures' resonance helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from oscrepro.attention.osciformer_reference import oscillator_ode_reference
from oscrepro.attention.oscillator_kernels import query_eval
from oscrepro.papers.osciformer.resonance_figs import transfer_magnitude
from oscrepro.papers.osciformer.resonance_model import (
    OsciFormerResonanceClassifier,
    oscillator_at,
    query_grid,
    resonance_logits_reference,
)


def _model(seed: int = 0, **kw) -> OsciFormerResonanceClassifier:
    torch.manual_seed(seed)
    return OsciFormerResonanceClassifier(2, 41, d_model=8, n_modes=4, **kw).double()


def _batch(b: int = 2, n: int = 6, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, 2, generator=g, dtype=torch.float64)
    t = (torch.rand(b, n, generator=g, dtype=torch.float64) * 4.9).sort(-1).values  # (B, L) in (0, T)
    return x, t


def test_query_grid_is_evenly_spaced_subset_of_the_data_grid():
    lam = query_grid(8)
    idx = (lam / (2 * math.pi) - 0.5) / 0.1
    assert torch.allclose(idx, idx.round(), atol=1e-9) and idx.round().long().tolist() == [0, 6, 11, 17, 23, 29, 34, 40]


@pytest.mark.parametrize("gamma_range", [(0.05, 0.4), (2.0, 3.0)], ids=["underdamped", "overdamped"])
def test_closed_form_logits_match_quadrature(gamma_range):
    """Float64, both regimes (gamma above omega for the slow channels): agreement to ~1e-11 relative."""
    model = _model(gamma_range=gamma_range)
    with torch.no_grad():  # a drive of the size training reaches, so the drive terms matter
        model.drive.weight.mul_(3.0)
    x, t = _batch()
    closed = model.channel_logits(x, t).sum(-1)  # (B, L)
    ref = resonance_logits_reference(model, x, t, n_panels=32, n_nodes=16)
    assert closed.abs().max() > 0.05  # not trivially zero
    assert torch.allclose(closed, ref, rtol=1e-10, atol=1e-11)


def test_key_trajectory_with_absolute_time_drive_matches_ode():
    """The key of token l solves k'' + 2 gamma k' + omega^2 k = sum_m P cos(varpi t) + Q sin(varpi t) in absolute
    time from k(t_l) = K_l, k'(t_l) = 0 (scipy DOP853): checks the local-drive rotation and the steady state."""
    model = _model()
    x, t = _batch(b=1, n=2)
    o = model.oscillators(x, t)
    tok, c = 1, 3
    lags = np.linspace(0.0, float(o["delta"][0, tok]), 7)
    got, _ = oscillator_at(torch.tensor(lags)[None, None].expand(1, 2, -1), o["k0"], o["ck"], o["lam"],
                           o["omega_k"], o["gamma_k"])  # (1, L, S, d)
    h = model.embed(x)[0, tok]
    pq = model.drive(h).view(2, 2, model.n_modes, model.d_model)[0, :, :, c].detach().numpy()  # (P|Q, J)
    lam, t_l = o["lam"].numpy(), float(t[0, tok])
    p_loc = pq[0] * np.cos(lam * t_l) + pq[1] * np.sin(lam * t_l)  # the same drive in local time s = t - t_l
    q_loc = pq[1] * np.cos(lam * t_l) - pq[0] * np.sin(lam * t_l)
    omega, gamma = float(o["omega_k"][c].detach()), float(o["gamma_k"][c].detach())
    k0 = float(o["k0"][0, tok, c].detach())
    ref, _ = oscillator_ode_reference(lags, k0, 0.0, omega, gamma / omega, p_loc, q_loc, lam)
    np.testing.assert_allclose(got[0, tok, :, c].detach().numpy(), ref, rtol=1e-8, atol=1e-9)


def test_gradients_match_quadrature_reference():
    model = _model()
    x, t = _batch()
    params = [model.log_omega, model.gamma_raw, model.query_cos, model.drive.weight, model.anchor.weight]
    g_closed = torch.autograd.grad(model.channel_logits(x, t).sum(-1).square().sum(), params)
    g_ref = torch.autograd.grad(resonance_logits_reference(model, x, t, 32, 16).square().sum(), params)
    for a, b in zip(g_closed, g_ref, strict=True):
        assert torch.isfinite(a).all()
        assert torch.allclose(a, b, rtol=1e-8, atol=1e-10)


def test_key_uses_only_its_window_t_i_to_T():
    """alpha_i is the average over [t_i, T] (not over [0, T] or a window starting earlier), depends on token i only
    (changing other tokens leaves it unchanged), and tends to <q(t_i), k_i(t_i)> as t_i -> T."""
    model = _model()
    x, t = _batch(b=1, n=4)
    alpha = model.channel_logits(x, t).sum(-1)  # (1, L)
    o = model.oscillators(x, t)
    i = 1
    za, zb = model.query_cos.double(), model.query_sin.double()
    x2, t2 = x.clone(), t.clone()
    x2[0, 2:] += 1.0  # later tokens change
    t2[0, 3] = 4.95
    assert torch.allclose(model.channel_logits(x2, t2).sum(-1)[0, :2], alpha[0, :2], rtol=0, atol=1e-13)
    # the quadrature over exactly [t_i, T] reproduces it; anchoring the key 0.5 earlier changes it
    assert torch.allclose(resonance_logits_reference(model, x, t, 32, 16), alpha, atol=1e-10)
    t3 = t.clone()
    t3[0, i] = t[0, i] - 0.5
    assert not torch.allclose(model.channel_logits(x, t3).sum(-1)[0, i], alpha[0, i], atol=1e-3)
    # the limit Delta -> 0
    t4 = t.clone()
    t4[0, -1] = model.t_query
    near = t.clone()
    near[0, -1] = model.t_query - 1e-7
    limit = (query_eval(za, zb, o["lam"], torch.tensor(model.t_query, dtype=torch.float64))
             * model.oscillators(x, t4)["k0"][0, -1]).sum()
    at, before = (float(model.channel_logits(x, tt).sum(-1)[0, -1].detach()) for tt in (t4, near))
    assert at == pytest.approx(float(limit.detach()), abs=1e-12)
    assert before == pytest.approx(float(limit.detach()), abs=1e-4)


def test_shapes_mask_and_aux():
    model = OsciFormerResonanceClassifier(2, 41)
    x, t = (z.float() for z in _batch(b=3, n=32))
    mask = torch.ones(3, 32, dtype=torch.bool)
    mask[0, 20:] = False
    logits, aux = model(x, times=t, mask=mask)
    assert logits.shape == (3, 41) and logits.dtype == torch.float32 and aux == [{}]
    _, aux = model(x, True, times=t, mask=mask)
    w = aux[0]["weights"]
    assert w.shape == (3, 1, 1, 32) and torch.allclose(w.sum(-1), torch.ones(3, 1, 1))
    assert (w[0, 0, 0, 20:] == 0).all()
    p = model.oscillator_params()
    assert set(p) == {"omega_k", "gamma_k", "omega_v", "gamma_v"} and p["omega_k"].shape == (32,)
    assert (p["omega_k"] > 1e-2 - 1e-9).all() and (p["omega_k"] < 10 + 1e-6).all()
    assert (p["gamma_k"] > 0.05 - 1e-6).all() and (p["gamma_k"] < 0.4 + 1e-6).all()
    with pytest.raises(ValueError, match="after the query time"):
        model(x, times=t + 1.0)


def test_overfits_a_tiny_batch():
    torch.manual_seed(0)
    model = OsciFormerResonanceClassifier(2, 41)
    x, t = (z.float() for z in _batch(b=8, n=32, seed=3))
    y = torch.arange(8) * 5
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        loss = torch.nn.functional.cross_entropy(model(x, times=t)[0], y)
        opt.zero_grad(), loss.backward(), opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_transfer_magnitude_peaks_near_omega0():
    w = np.linspace(0.1, 20, 2000)
    h = transfer_magnitude(w, 10.0, 0.2)
    assert abs(w[h.argmax()] - math.sqrt(100 - 2 * 0.04)) < 0.02
    assert h.max() == pytest.approx(1 / (2 * 0.2 * math.sqrt(100 - 0.04)), rel=1e-3)
