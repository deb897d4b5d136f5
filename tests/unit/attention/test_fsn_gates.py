"""FSN fused gates (oscrepro/attention/fsn_gates.py) against the complex-arithmetic PhaseGates reference (values and
gradients of every input and parameter), eager and compiled; the compiled bounded update against the eager one."""

from __future__ import annotations

import math

import pytest
import torch

from oscrepro.attention import fsn_gates
from oscrepro.attention.fsn_gates import gate_features
from oscrepro.attention.kuramoto import PhaseGates, phasors
from oscrepro.papers.fsn import torus_lm
from oscrepro.papers.fsn.torus_lm import bound, bounded_update


def make_gates(k: int, dtype: torch.dtype, seed: int = 0) -> PhaseGates:
    torch.manual_seed(seed)
    g = PhaseGates(k).to(dtype)
    with torch.no_grad():
        g.proj.weight.normal_(0.0, 0.5)
        g.proj.bias.normal_(0.0, 0.5)
        g.log_tau.fill_(math.log(0.7 * math.sqrt(k)))
    return g


def reference(theta: torch.Tensor, gates: PhaseGates) -> list[torch.Tensor]:
    """cos, sin, q, k planes (B, T, 2, k) and gv from PhaseGates.forward (complex, plain autograd)."""
    z = phasors(theta)
    g = gates(z)
    return [z.real, z.imag, g.q.movedim(-1, 2), g.k.movedim(-1, 2), g.gv]


def loss_grads(outs: list[torch.Tensor], inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    torch.manual_seed(7)
    loss = sum((o * torch.randn(o.shape, dtype=o.dtype)).sum() for o in outs)  # randn_like would follow strides
    return list(torch.autograd.grad(loss, inputs))


@pytest.mark.parametrize("compiled,dtype,tol", [(False, torch.float64, 1e-10), (True, torch.float32, 2e-5)])
def test_gate_features_match_phase_gates(compiled: bool, dtype: torch.dtype, tol: float) -> None:
    """Outputs and the gradients of theta, W, b and log tau equal the reference's (eager in float64; the compiled
    stages in float32)."""
    gates = make_gates(12, dtype)
    theta = (torch.randn(2, 9, 12, dtype=dtype) * 3).requires_grad_()
    params = [theta, gates.proj.weight, gates.proj.bias, gates.log_tau]
    fast = list(gate_features(theta, gates, compiled))
    ref = reference(theta, gates)
    for f, r in zip(fast, ref, strict=True):
        torch.testing.assert_close(f, r, rtol=tol, atol=tol)
    for gf, gr in zip(loss_grads(fast, params), loss_grads(ref, params), strict=True):
        torch.testing.assert_close(gf, gr, rtol=tol * 10, atol=tol * 10)
    assert not (fsn_gates._FORWARD.broken or fsn_gates._BACKWARD.broken), "torch.compile fell back to eager"


def test_gate_floor_clamps_like_the_reference() -> None:
    """A query gate whose mean is below the floor is divided by the floor, with the reference's gradient."""
    gates = make_gates(6, torch.float64)
    gates.gate_floor = 0.5
    with torch.no_grad():
        gates.proj.bias[:6] = -8.0  # softplus(-8) ~ 3e-4: the q gates' mean sits below the floor
    theta = (torch.randn(1, 4, 6, dtype=torch.float64) * 3).requires_grad_()
    params = [theta, gates.proj.weight, gates.proj.bias]
    fast, ref = list(gate_features(theta, gates, False)), reference(theta, gates)
    for f, r in zip(fast, ref, strict=True):
        torch.testing.assert_close(f, r)
    for gf, gr in zip(loss_grads(fast, params), loss_grads(ref, params), strict=True):
        torch.testing.assert_close(gf, gr)


def test_compiled_bound_equals_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """bound() takes the compiled path at training sizes; values and gradients equal bounded_update's."""
    monkeypatch.setattr("oscrepro.attention.fsn_fused.COMPILE_MIN_ELEMS", 64)
    x = torch.randn(2, 8, 16, requires_grad=True)
    alpha = torch.tensor(2 * math.pi, requires_grad=True)
    fast, ref = bound(x, alpha), bounded_update(x, alpha)
    assert not torus_lm._BOUND.broken and torus_lm._BOUND._compiled is not None
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-6)
    for gf, gr in zip(loss_grads([fast], [x, alpha]), loss_grads([ref], [x, alpha]), strict=True):
        torch.testing.assert_close(gf, gr, rtol=1e-5, atol=1e-5)


def test_saved_softplus_gives_the_sigmoid_of_deeply_negative_gates() -> None:
    """The backward takes softplus' = sigmoid(raw) = -expm1(-a) from the saved a = softplus(raw): in float32 at
    raw = -30 (sigmoid ~ 9e-14), where 1 - exp(-a) rounds to 0, the bias gradient keeps the reference's value."""
    gates = make_gates(8, torch.float32)
    with torch.no_grad():
        gates.proj.bias[:3] = -30.0  # three q gates far below zero; the others keep the mean above the floor
    theta = (torch.randn(2, 5, 8) * 3).requires_grad_()
    params = [gates.proj.bias]
    (fast,), (ref,) = loss_grads(list(gate_features(theta, gates, False)), params), loss_grads(reference(theta, gates),
                                                                                             params)
    assert ref[:3].abs().min() > 0
    torch.testing.assert_close(fast[:3], ref[:3], rtol=1e-3, atol=0.0)


def test_bound_backward_equals_autograd_in_float64() -> None:
    """The hand-written backward of the bounded update (eager stages in float64) against plain autograd through
    bounded_update: x and alpha gradients, with one all-zero token where only the eps floors keep it finite."""
    torch.manual_seed(3)
    x = torch.randn(2, 5, 7, dtype=torch.float64) * 2
    x[0, 1] = 0.0
    x.requires_grad_()
    alpha = torch.tensor(1.7, dtype=torch.float64, requires_grad=True)
    fast, ref = bound(x, alpha), bounded_update(x, alpha)
    torch.testing.assert_close(fast, ref, rtol=1e-12, atol=1e-12)
    for gf, gr in zip(loss_grads([fast], [x, alpha]), loss_grads([ref], [x, alpha]), strict=True):
        assert torch.isfinite(gf).all()
        torch.testing.assert_close(gf, gr, rtol=1e-10, atol=1e-10)
