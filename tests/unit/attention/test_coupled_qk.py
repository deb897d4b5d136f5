"""Coupled QK dynamics (coupledqk Sec. 2, App. A): the n = 0 limit is softmax attention, the Euler and leapfrog
rules step exactly as Eqs. (4) and (6)-(8) write them, leapfrog preserves volume (Eq. 9) while Euler does not,
mlp_only leaves keys alone, integrators share one state_dict, the Table 11 overhead, gradients reach dt and f."""

from __future__ import annotations

import math

import pytest
import torch

from oscrepro.attention.coupled_qk import INTEGRATORS, CoupledQKAttention
from oscrepro.attention.softmax import SoftmaxAttention

D, H, T, B = 16, 2, 7, 2


def n_params(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def x_in(seed: int = 0) -> torch.Tensor:
    return torch.randn(B, T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def coupled(seed: int = 0, **kw) -> CoupledQKAttention:
    torch.manual_seed(seed)
    return CoupledQKAttention(D, H, **kw).double()


@pytest.mark.parametrize("rope", [False, True])
@pytest.mark.parametrize("integrator", INTEGRATORS)
def test_zero_steps_is_softmax_attention(integrator: str, rope: bool) -> None:
    mech = coupled(integrator=integrator, n_steps=0, rope=rope)
    ref = SoftmaxAttention(D, H, bias=False, rope=rope).double()
    missing, unexpected = ref.load_state_dict(mech.state_dict(), strict=False)
    assert missing == [] and sorted(unexpected) == ["coupling.0.weight", "coupling.2.weight", "log_dt"]
    x = x_in()
    for causal in (False, True):
        assert torch.equal(mech(x, causal=causal)[0], ref(x, causal=causal)[0])
        (y, aux), (y_ref, aux_ref) = mech(x, causal=causal, need_weights=True), ref(x, causal=causal, need_weights=True)
        assert torch.equal(y, y_ref) and torch.equal(aux["weights"], aux_ref["weights"])
        assert torch.equal(aux["q"], aux["q0"]) and torch.equal(aux["k"], aux["k0"])


def test_one_euler_step_is_eq4() -> None:
    """q1 - q0 = dt k0 and k1 - k0 = dt f(q0), both from the old state, with a per-head dt."""
    mech = coupled(integrator="euler", n_steps=1)
    with torch.no_grad():
        mech.log_dt.copy_(torch.tensor([math.log(0.1), math.log(0.3)], dtype=torch.float64))
    _, aux = mech(x_in(), need_weights=True)
    dt = torch.tensor([0.1, 0.3], dtype=torch.float64).view(1, H, 1, 1)
    torch.testing.assert_close(aux["q"] - aux["q0"], dt * aux["k0"], rtol=0, atol=1e-13)
    torch.testing.assert_close(aux["k"] - aux["k0"], dt * mech.coupling(aux["q0"]), rtol=0, atol=1e-13)
    assert (aux["q"] - aux["q0"]).abs().max() > 1e-3  # it moved


def naive_leapfrog(f, q, k, dt, n):
    """Eqs. (6)-(8) as written: two force evaluations per step, no reuse."""
    for _ in range(n):
        k_half = k + dt / 2 * f(q)
        q = q + dt * k_half
        k = k_half + dt / 2 * f(q)
    return q, k


def naive_euler(f, q, k, dt, n):
    for _ in range(n):
        q, k = q + dt * k, k + dt * f(q)
    return q, k


@pytest.mark.parametrize(("integrator", "naive"), [("hamiltonian", naive_leapfrog), ("euler", naive_euler)])
def test_three_steps_match_the_naive_rule(integrator: str, naive) -> None:
    mech = coupled(integrator=integrator, n_steps=3)
    _, aux = mech(x_in(), need_weights=True)
    dt = mech.log_dt.exp().view(1, H, 1, 1)
    q, k = naive(mech.coupling, aux["q0"], aux["k0"], dt, 3)
    torch.testing.assert_close(aux["q"], q, rtol=0, atol=1e-13)
    torch.testing.assert_close(aux["k"], k, rtol=0, atol=1e-13)


def _step_jacobian_det(integrator: str, n_steps: int) -> float:
    """det of d(q', k')/d(q, k) for one token of one head, d_h = 3, on a random f with sizeable weights."""
    mech = coupled(seed=3, integrator=integrator, n_steps=n_steps, dt_init=0.5)
    mech.d_head = 3
    mech.coupling = torch.nn.Sequential(torch.nn.Linear(3, 3, bias=False), torch.nn.SiLU(),
                                        torch.nn.Linear(3, 3, bias=False)).double()
    with torch.no_grad():
        for lin in (mech.coupling[0], mech.coupling[2]):
            lin.weight.normal_(0.0, 1.5)
        mech.log_dt.fill_(math.log(0.5))

    def step(z: torch.Tensor) -> torch.Tensor:
        q, k = mech.integrate(z[:3].view(1, 1, 1, 3).expand(1, H, 1, 3), z[3:].view(1, 1, 1, 3).expand(1, H, 1, 3))
        return torch.cat([q[0, 0, 0], k[0, 0, 0]])

    z0 = torch.randn(6, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    jac = torch.autograd.functional.jacobian(step, z0)  # (6, 6)
    return torch.linalg.det(jac).item()


@pytest.mark.parametrize("n_steps", [1, 3])
def test_leapfrog_preserves_volume_and_euler_does_not(n_steps: int) -> None:
    assert abs(_step_jacobian_det("hamiltonian", n_steps) - 1.0) < 1e-12  # Eq. (9)
    assert abs(_step_jacobian_det("euler", n_steps) - 1.0) > 1e-3


def test_mlp_only_updates_queries_once_and_leaves_keys() -> None:
    for n_steps in (1, 3):
        mech = coupled(integrator="mlp_only", n_steps=n_steps)
        _, aux = mech(x_in(), need_weights=True)
        assert torch.equal(aux["k"], aux["k0"])
        torch.testing.assert_close(aux["q"], aux["q0"] + mech.coupling(aux["q0"]), rtol=0, atol=1e-14)


@pytest.mark.parametrize("src", INTEGRATORS)
@pytest.mark.parametrize("dst", INTEGRATORS)
def test_state_dict_moves_between_integrators(src: str, dst: str) -> None:
    a, b = coupled(seed=0, integrator=src), coupled(seed=1, integrator=dst)
    b.load_state_dict(a.state_dict(), strict=True)
    assert all(torch.equal(a.state_dict()[n], t) for n, t in b.state_dict().items())
    assert set(a.state_dict()) == {"qkv.weight", "out.weight", "coupling.0.weight", "coupling.2.weight", "log_dt"}


@pytest.mark.parametrize("integrator", INTEGRATORS)
def test_parameter_overhead_is_2_dh_squared_plus_heads(integrator: str) -> None:
    for d, h in ((16, 2), (512, 8)):
        extra = n_params(CoupledQKAttention(d, h, integrator=integrator)) - n_params(SoftmaxAttention(d, h, bias=False))
        assert extra == 2 * (d // h) ** 2 + h
    assert 8 * (2 * 64 * 64 + 8) == 65_600  # Table 11 at d 512, 8 heads, 8 layers


def test_dt_is_initialised_and_per_head() -> None:
    mech = CoupledQKAttention(D, H, dt_init=0.1)
    assert mech.log_dt.shape == (H,)
    torch.testing.assert_close(mech.log_dt.exp(), torch.full((H,), 0.1))


@pytest.mark.parametrize("integrator", INTEGRATORS)
def test_gradients_reach_dt_and_coupling(integrator: str) -> None:
    mech = coupled(integrator=integrator)
    y, _ = mech(x_in(), causal=True)
    y.square().sum().backward()
    for name in ("coupling.0.weight", "coupling.2.weight"):
        g = dict(mech.named_parameters())[name].grad
        assert g is not None and g.abs().max() > 0
    if integrator == "mlp_only":  # documented: dt is kept for the parameter count, unused
        assert mech.log_dt.grad is None
    else:
        assert mech.log_dt.grad is not None and (mech.log_dt.grad.abs() > 0).all()


def test_rope_rotates_the_coupled_vectors_before_scoring() -> None:
    """rope changes the output but not the dynamics (aux q, k are the coupled vectors before rotation)."""
    plain, roped = coupled(seed=4), coupled(seed=4, rope=True)
    x = x_in()
    (y0, a0), (y1, a1) = plain(x, need_weights=True), roped(x, need_weights=True)
    assert torch.equal(a0["q"], a1["q"]) and torch.equal(a0["k"], a1["k"])
    assert (y0 - y1).abs().max() > 1e-6


def test_bad_options_are_named() -> None:
    with pytest.raises(ValueError, match="hamiltonian, euler, mlp_only"):
        CoupledQKAttention(D, H, integrator="rk4")
    with pytest.raises(ValueError, match="n_steps"):
        CoupledQKAttention(D, H, n_steps=-1)
