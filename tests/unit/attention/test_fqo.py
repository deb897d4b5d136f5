"""fqo math: closed-form fixed point vs the Lohe ODE (3), readout rows, causality, gradients near ||h|| = 0."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.integrate import solve_ivp

from oscrepro.attention.fqo import FixedQueryOscillatorAttention, shifted_cosine_readout


def _attn(**kw) -> FixedQueryOscillatorAttention:
    torch.manual_seed(0)
    return FixedQueryOscillatorAttention(d_model=16, n_heads=2, **kw).double()


@pytest.mark.parametrize("d_osc", [2, 3, 8])
def test_fixed_point_equals_integrated_lohe_ode(d_osc):
    """Eq. (4) z* = h/||h|| is where Eq. (3) dz/dt = (I - z z^T) h settles from a generic z(0)."""
    attn = _attn(d_osc=d_osc)
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    _, aux = attn(x, need_weights=True)
    h, z = aux["h"][0, 0].detach().numpy(), aux["z"][0, 0].detach().numpy()  # (T, N)
    rng = np.random.default_rng(1)
    for i in range(h.shape[0]):
        z0 = rng.normal(size=d_osc)
        z0 /= np.linalg.norm(z0)
        sol = solve_ivp(lambda t, zz, hi=h[i]: hi - zz * (zz @ hi), (0, 200.0), z0, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(sol.y[:, -1], z[i], atol=1e-6)


def test_readout_rows_sum_to_one_and_are_nonnegative():
    for causal in (False, True):
        for p in (1.0, 2.0, 4.0):
            _, aux = _attn(p=p)(torch.randn(3, 7, 16, dtype=torch.float64), causal=causal, need_weights=True)
            a = aux["weights"]
            assert (a >= 0).all()
            torch.testing.assert_close(a.sum(-1), torch.ones_like(a.sum(-1)))
            if causal:
                assert torch.all(a.triu(diagonal=1) == 0)


def test_readout_matches_eq5_by_hand():
    z = F.normalize(torch.randn(1, 1, 4, 3, dtype=torch.float64), dim=-1)
    r = F.normalize(torch.randn(1, 1, 4, 3, dtype=torch.float64), dim=-1)
    a = shifted_cosine_readout(z, r, 2.0, None)
    i, j = 1, 2
    num = (1 + z[0, 0, i] @ r[0, 0, j]) ** 2
    den = sum((1 + z[0, 0, i] @ r[0, 0, k]) ** 2 for k in range(4))
    assert abs(float(a[0, 0, i, j] - num / den)) < 1e-12


@pytest.mark.parametrize("mode", ["fixed_point", "zero_attention"])
def test_causal_no_gradient_from_future_tokens(mode):
    attn = _attn(mode=mode)
    x = torch.randn(2, 6, 16, dtype=torch.float64, requires_grad=True)
    y, _ = attn(x, causal=True)
    y[:, 3].sum().backward()
    assert torch.all(x.grad[:, 4:] == 0)
    assert torch.any(x.grad[:, :4] != 0)


def test_bidirectional_uses_future_tokens():
    attn = _attn()
    x = torch.randn(1, 6, 16, dtype=torch.float64, requires_grad=True)
    attn(x)[0][:, 0].sum().backward()
    assert torch.any(x.grad[:, 5] != 0)


def test_finite_gradients_as_h_vanishes():
    """||h|| -> 0 (all couplings ~ 0): F.normalize's eps keeps z and its gradients finite."""
    attn = _attn()
    with torch.no_grad():  # make softplus scores ~ 0 by pushing them to -inf-ish
        attn.f_proj.weight.zero_()
        attn.f_proj.bias.fill_(1.0)
        attn.g_proj.weight.zero_()
        attn.g_proj.bias.fill_(-200.0)
    x = torch.randn(2, 5, 16, dtype=torch.float64, requires_grad=True)
    y, aux = attn(x, need_weights=True)
    assert aux["h"].norm(dim=-1).max() < 1e-30
    y.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in attn.parameters() if p.grad is not None)


def test_frozen_value_projection_gets_no_gradient():
    attn = _attn(freeze_value=True)
    attn(torch.randn(1, 4, 16, dtype=torch.float64))[0].sum().backward()
    assert attn.v_proj.weight.grad is None and attn.f_proj.weight.grad is not None


def test_random_positions_ignore_equilibrium():
    """Random oscillator positions: z is not h/||h|| (the Table 1 control)."""
    _, aux = _attn(mode="random_positions")(torch.randn(1, 6, 16, dtype=torch.float64), need_weights=True)
    assert not torch.allclose(aux["z"], F.normalize(aux["h"], dim=-1), atol=1e-3)


def test_invalid_mode_lists_valid_ones():
    with pytest.raises(ValueError, match="fixed_point, random_positions, zero_attention"):
        FixedQueryOscillatorAttention(8, 1, mode="nope")
