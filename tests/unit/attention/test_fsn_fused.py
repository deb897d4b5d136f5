"""FSN fused fast path (oscrepro/attention/fsn_fused.py): the real-plane stages against their complex definitions,
the compiled stages against the eager ones (outputs and gradients), and the automatic compile choice."""

from __future__ import annotations

import math

import pytest
import torch

from oscrepro.attention import fsn_fused
from oscrepro.attention.fsn import FSNAttention
from oscrepro.attention.fsn_fused import dout_planes, field_planes, fused_kernel, harmonic_list, project
from oscrepro.attention.kuramoto import PhaseGates


def test_stages_match_complex_definitions() -> None:
    """Planes (Re, Im) of z^n, of the field w0 z_u^n + w1 z_{u+1}^n, of Im[conj(z^n) o^n] and of i z^n da."""
    torch.manual_seed(0)
    b, t, n, k = 2, 5, 3, 4
    theta = torch.randn(b, t, k, dtype=torch.float64) * 3
    z = torch.polar(torch.ones_like(theta), theta)
    w = torch.randn(2, n, k, dtype=torch.complex128)
    zn = torch.stack([z**m for m in range(1, n + 1)], dim=2)  # (B, T, N, k)
    pr, pi = (torch.stack(p, dim=2) for p in harmonic_list(z.real, z.imag, n))
    torch.testing.assert_close(torch.complex(pr, pi), zn)
    succ = torch.cat([zn[:, 1:], torch.zeros_like(zn[:, :1])], dim=1)
    fld = field_planes(z.real, z.imag, w.real, w.imag, n)
    torch.testing.assert_close(torch.complex(fld[:, :, 0], fld[:, :, 1]), zn * w[0] + succ * w[1])
    fld0 = field_planes(z.real, z.imag, w.real[:1], w.imag[:1], n)  # no delay
    torch.testing.assert_close(torch.complex(fld0[:, :, 0], fld0[:, :, 1]), zn * w[0])
    o = torch.randn(b, t, n, k, dtype=torch.complex128)
    o_planes = torch.stack([o.real, o.imag], dim=2)
    torch.testing.assert_close(project(z.real, z.imag, o_planes), (zn.conj() * o).imag.sum(dim=2))
    da = torch.randn(b, t, k, dtype=torch.float64)
    d = dout_planes(z.real, z.imag, da, n)
    torch.testing.assert_close(torch.complex(d[:, :, 0], d[:, :, 1]), 1j * zn * da[:, :, None])


def kernel_inputs(causal_seed: int = 0, b: int = 2, t: int = 33, k: int = 8, h: int = 2, fields: int = 2):
    torch.manual_seed(causal_seed)
    theta = torch.randn(b, t, k) * 3
    zr, zi = torch.cos(theta).requires_grad_(), torch.sin(theta).requires_grad_()
    q = (torch.randn(b, h, t, 2 * k // h) * 0.5).requires_grad_()
    kk = (torch.randn(b, h, t, 2 * k // h) * 0.5).requires_grad_()
    w = torch.randn(fields, 3, k, dtype=torch.complex64).requires_grad_()
    return [zr, zi, q, kk, w]


@pytest.mark.parametrize("causal,fields", [(True, 2), (False, 1)])
def test_compiled_kernel_equals_eager(causal: bool, fields: int) -> None:
    """fused_kernel with torch.compile'd stages vs the eager stages (float32): a, diag and every input gradient.
    Ragged chunks (T = 33, chunk 8) and two heads."""
    inputs = kernel_inputs(fields=fields)
    outs = {}
    for compiled in (False, True):
        a, diag = fused_kernel(*inputs, causal, 8, 3, compiled=compiled)
        torch.manual_seed(5)
        loss = (a * torch.randn_like(a)).sum() + (diag * torch.randn_like(diag)).sum()
        outs[compiled] = (a.detach(), diag.detach(), *torch.autograd.grad(loss, inputs))
    assert not (fsn_fused._FORWARD.broken or fsn_fused._BACKWARD.broken), "torch.compile fell back to eager"
    for eager, comp in zip(outs[False], outs[True], strict=True):
        torch.testing.assert_close(comp, eager, rtol=2e-5, atol=2e-5)


def test_module_compiles_only_float32_at_training_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The automatic choice: float64 and small float32 inputs run eagerly, float32 from COMPILE_MIN_ELEMS on
    compiled; an FSN layer's output is the same either way (within float32 rounding)."""
    seen: list[bool] = []
    real = fsn_fused.FusedKernel.apply
    monkeypatch.setattr(fsn_fused.FusedKernel, "apply", lambda *a: seen.append(a[-1]) or real(*a))
    monkeypatch.setattr(fsn_fused, "COMPILE_MIN_ELEMS", 2 * 16 * 8)
    gates = PhaseGates(8)
    attn = FSNAttention(8, 1, gates=gates, chunk_size=4)
    with torch.no_grad():
        gates.proj.weight.normal_(0.0, 0.3)
    theta = torch.randn(2, 16, 8) * math.pi
    y_compiled, _ = attn(theta, causal=True)
    y_small, _ = attn(theta[:, :8], causal=True)
    attn.double()
    gates.double()
    attn(theta.double(), causal=True)
    assert seen == [True, False, False]
    attn.float()
    gates.float()
    attn.compiled = False
    y_eager, _ = attn(theta, causal=True)
    torch.testing.assert_close(y_compiled, y_eager, rtol=1e-5, atol=1e-5)
