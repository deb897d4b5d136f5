"""Fused fast path of the FSN coupling kernel (fsn Eq. 2, App. B): harmonics -> field -> strict aggregation ->
projection in one autograd node with a hand-written backward.

The N harmonics and the present + successor fields are folded into one value tensor of 2Nk real columns before the
single quadratic aggregation (fsn App. B "Efficiency"), aggregated in query chunks (causal chunks skip keys in the
future). Every complex quantity is a pair of real planes, (B, T, 2, N, k) = (Re, Im) x harmonic x coordinate: torch's
CPU complex elementwise kernels and the interleaved (re, im) layout cost several times the real ones here.

The elementwise stages around the two GEMM-bound aggregations are four pure functions:

    field_planes   z -> field w0 z_u^n + w1 z_{u+1}^n                        forward prologue
    project        a = sum_n Im[conj(z^n) o^n]                               forward epilogue
    dout_planes    d o = i z^n da                                            backward prologue
    input_grads    d z (field, projection, harmonics by Horner), d w         backward epilogue

run eagerly or through ``torch.compile`` (:mod:`oscrepro.attention.compiled`; inductor fuses each into one loop,
so the (B, T, 2, N, k) intermediates are never written). The harmonics z^n are recomputed in every stage (two
multiplies per harmonic) rather than stored: only the field, the aggregate o and their gradients are
(B, T, 2, N, k) tensors. Compilation is automatic for float32 inputs once
B*T*k reaches :data:`COMPILE_MIN_ELEMS` (the training shapes of the fsn tables) and falls back to eager, with one
warning, where no compiler works. The plain autograd path of :mod:`oscrepro.attention.fsn` (``need_weights=True``)
and :func:`~oscrepro.attention.fsn.fsn_reference` are the references; tests compare outputs and gradients of the
eager and compiled stages with them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from oscrepro.attention.compiled import CompiledPair, run_with_fallback
from oscrepro.attention.kuramoto import from_heads, strict_backward, strict_forward, to_heads

COMPILE_MIN_ELEMS = 1 << 18  # B*T*k from which the elementwise stages are compiled (fsn training: 16*256*176)


def _shift_up(x: Tensor) -> Tensor:
    """x_{u+1} along dim 1 with a zero past the end: (B, T, ...) -> same."""
    return F.pad(x[:, 1:], (0, 0) * (x.dim() - 2) + (0, 1))


def harmonic_planes(zr: Tensor, zi: Tensor, n_harmonics: int) -> tuple[Tensor, Tensor]:
    """z^n for n = 1..N by the recurrence z^(n+1) = z^n z: Re and Im, (B, T, N, k) each. Recomputed inside every
    stage instead of stored: inside a compiled stage it fuses into the loop that reads it."""
    prs, pis = [zr], [zi]
    for _ in range(1, n_harmonics):
        pr, pi = prs[-1], pis[-1]
        prs.append(pr * zr - pi * zi)
        pis.append(pr * zi + pi * zr)
    return torch.stack(prs, dim=2), torch.stack(pis, dim=2)


def field_planes(zr: Tensor, zi: Tensor, wr: Tensor, wi: Tensor, n_harmonics: int) -> Tensor:
    """Eq. 2's value field w0^(n) z_u^n + w1^(n) z_{u+1}^n as planes (B, T, 2, N, k); z = zr + i zi (B, T, k),
    w = wr + i wi (fields, N, k) with fields = 2 (present, successor) or 1 (no delay)."""
    pr, pi = harmonic_planes(zr, zi, n_harmonics)  # (B, T, N, k)
    fr, fi = pr * wr[0] - pi * wi[0], pr * wi[0] + pi * wr[0]
    if wr.shape[0] == 2:  # successor field w1 z_{u+1}^n
        sr, si = _shift_up(pr), _shift_up(pi)
        fr, fi = fr + sr * wr[1] - si * wi[1], fi + sr * wi[1] + si * wr[1]
    return torch.stack([fr, fi], dim=2)


def project(zr: Tensor, zi: Tensor, o: Tensor) -> Tensor:
    """a = sum_n Im[conj(z^n) o^n]: z planes (B, T, k), o (B, T, 2, N, k) -> (B, T, k)."""
    pr, pi = harmonic_planes(zr, zi, o.shape[3])
    return (pr * o[:, :, 1] - pi * o[:, :, 0]).sum(dim=2)


def dout_planes(zr: Tensor, zi: Tensor, da: Tensor, n_harmonics: int) -> Tensor:
    """d o^n = i z^n da as planes (B, T, 2, N, k); da (B, T, k)."""
    pr, pi = harmonic_planes(zr, zi, n_harmonics)
    d = da[:, :, None]
    return torch.stack([-pi * d, pr * d], dim=2)


def input_grads(zr: Tensor, zi: Tensor, o: Tensor, dfield: Tensor, da: Tensor, wr: Tensor, wi: Tensor
                ) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of z (Re, Im planes, (B, T, k) each) and of w ((fields, 2, N, k): Re, Im) from the field
    gradient dfield and the projection gradient da."""
    d = da[:, :, None]
    pr, pi = harmonic_planes(zr, zi, o.shape[3])
    fr, fi = dfield[:, :, 0], dfield[:, :, 1]
    # d z^n = dfield conj(w0) + shift_down(dfield) conj(w1) - i o da   (field, successor field, projection)
    gr = fr * wr[0] + fi * wi[0] + o[:, :, 1] * d
    gi = fi * wr[0] - fr * wi[0] - o[:, :, 0] * d
    dw = [torch.stack([(fr * pr + fi * pi).sum(dim=(0, 1)), (fi * pr - fr * pi).sum(dim=(0, 1))])]
    if wr.shape[0] == 2:
        br, bi = F.pad(fr[:, :-1], (0, 0, 0, 0, 1, 0)), F.pad(fi[:, :-1], (0, 0, 0, 0, 1, 0))  # dfield_{u-1}
        gr, gi = gr + br * wr[1] + bi * wi[1], gi + bi * wr[1] - br * wi[1]
        dw.append(torch.stack([(br * pr + bi * pi).sum(dim=(0, 1)), (bi * pr - br * pi).sum(dim=(0, 1))]))
    n_h = o.shape[3]
    hr, hi = gr[:, :, n_h - 1] * n_h, gi[:, :, n_h - 1] * n_h  # Horner: dz = sum_n n conj(z)^(n-1) dz^n
    for n in range(n_h - 1, 0, -1):
        hr, hi = gr[:, :, n - 1] * n + zr * hr + zi * hi, gi[:, :, n - 1] * n + zr * hi - zi * hr
    return hr, hi, torch.stack(dw)


_FORWARD = CompiledPair("FSN forward", field_planes, project)
_BACKWARD = CompiledPair("FSN backward", dout_planes, input_grads)


class FusedKernel(torch.autograd.Function):
    """harmonics -> field -> strict aggregation -> projection, a = sum_n Im[conj(z^n) (A_strict V^n)], with a
    hand-written backward. Inputs: z = zr + i zi as real planes (B, T, k) each, q (pre-scaled by 1/tau) and k
    (B, H, T, 2kh), w (fields, N, k) complex. Returns a (B, T, k) (without the diagonal term) and diag = A_tt
    (B, H, T).

    The value columns of a head are its (Re | Im) x N x kh block, a fixed permutation of the plain path's columns
    (the aggregation is column-wise, so the result is the same)."""

    @staticmethod
    def forward(ctx, zr: Tensor, zi: Tensor, q: Tensor, k: Tensor, w: Tensor, causal: bool, chunk: int,
                n_harmonics: int, compiled: bool) -> tuple[Tensor, Tensor]:
        b, h, t, e = q.shape
        zr, zi = zr.contiguous(), zi.contiguous()  # (B, T, k)
        wr, wi = w.real.contiguous(), w.imag.contiguous()  # (fields, N, k)
        prologue, epilogue = _FORWARD.get(compiled)
        field = prologue(zr, zi, wr, wi, n_harmonics)  # (B, T, 2, N, k)
        v = to_heads(field, h, -1).reshape(b * h, t, -1)  # (BH, T, 2 N kh)
        q3, k3 = q.reshape(b * h, t, e), k.reshape(b * h, t, e)
        out, diag, probs = strict_forward(q3, k3, v, causal, chunk)
        o = from_heads(out.view(b, h, t, -1), (2, n_harmonics, -1), -1)  # (B, T, 2, N, k)
        a = epilogue(zr, zi, o)  # (B, T, k)
        ctx.causal, ctx.chunk, ctx.compiled = causal, chunk, compiled
        ctx.save_for_backward(zr, zi, o, q3, k3, v, wr, wi, diag, *probs)
        return a, diag.view(b, h, t)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, da: Tensor, ddiag: Tensor) -> tuple[Tensor | None, ...]:
        zr, zi, o, q3, k3, v, wr, wi, diag, *probs = ctx.saved_tensors
        b, t, _, n_h, _ = o.shape
        h = q3.shape[0] // b
        da = da.contiguous()
        prologue, epilogue = _BACKWARD.get(ctx.compiled)
        try:
            dout = prologue(zr, zi, da, n_h)
        except Exception as err:  # noqa: BLE001 -- a compile failure in the backward: eager from here on
            _BACKWARD.mark_broken(err)
            prologue, epilogue = _BACKWARD.get(False)
            dout = prologue(zr, zi, da, n_h)
        dout = to_heads(dout, h, -1).reshape(b * h, t, -1)
        dq, dk, dv = strict_backward(q3, k3, v, probs, diag, dout, ddiag.reshape(b * h, t), ctx.causal, ctx.chunk)
        dfield = from_heads(dv.view(b, h, t, -1), (2, n_h, -1), -1)  # (B, T, 2, N, k)
        dzr, dzi, dw = epilogue(zr, zi, o, dfield, da, wr, wi)
        return (dzr, dzi, dq.view(b, h, t, -1), dk.view(b, h, t, -1), torch.complex(dw[:, 0], dw[:, 1]),
                None, None, None, None)


def use_compiled(x: Tensor) -> bool:
    """The automatic choice: compile for float32 phases of at least :data:`COMPILE_MIN_ELEMS` elements."""
    return x.dtype == torch.float32 and x.numel() >= COMPILE_MIN_ELEMS


def fused_kernel(zr: Tensor, zi: Tensor, q: Tensor, k: Tensor, w: Tensor, causal: bool, chunk: int,
                 n_harmonics: int, compiled: bool | None = None) -> tuple[Tensor, Tensor]:
    """:class:`FusedKernel` with the stages compiled when ``compiled`` (None: :func:`use_compiled`); a compile
    failure warns once and runs the same maths eagerly."""
    if compiled is None:
        compiled = use_compiled(zr)
    return run_with_fallback(lambda c: FusedKernel.apply(zr, zi, q, k, w, causal, chunk, n_harmonics, c), compiled,
                             _FORWARD, _BACKWARD)
