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


def _shift_down(x: Tensor) -> Tensor:
    """x_{u-1} along dim 1 with a zero before the start: (B, T, ...) -> same."""
    return F.pad(x[:, :-1], (0, 0) * (x.dim() - 2) + (1, 0))


def harmonic_list(zr: Tensor, zi: Tensor, n_harmonics: int) -> tuple[list[Tensor], list[Tensor]]:
    """z^n for n = 1..N by the recurrence z^(n+1) = z^n z: lists of Re and Im, (B, T, k) each. Recomputed inside
    every stage instead of stored, and kept as separate tensors: inside a compiled stage they fuse into the loop
    that reads them (a stacked (B, T, N, k) tensor would be written out and read back)."""
    prs, pis = [zr], [zi]
    for _ in range(1, n_harmonics):
        pr, pi = prs[-1], pis[-1]
        prs.append(pr * zr - pi * zi)
        pis.append(pr * zi + pi * zr)
    return prs, pis


def _planes(re: list[Tensor], im: list[Tensor]) -> Tensor:
    """Per-harmonic Re and Im (B, T, k) -> planes (B, T, 2, N, k), written once (one concatenation)."""
    b, t, k = re[0].shape
    return torch.stack(re + im, dim=2).view(b, t, 2, len(re), k)


def _colsum(x: Tensor) -> Tensor:
    """Sum over (B, T) of (B, T, k) -> (k,), over T first: a compiled sum over both leading dims at once walks
    the rows with a page-sized stride per column block (measured 2-3x slower at the training shapes)."""
    return x.sum(dim=1).sum(dim=0)


def field_planes(zr: Tensor, zi: Tensor, wr: Tensor, wi: Tensor, n_harmonics: int) -> Tensor:
    """Eq. 2's value field w0^(n) z_u^n + w1^(n) z_{u+1}^n as planes (B, T, 2, N, k); z = zr + i zi (B, T, k),
    w = wr + i wi (fields, N, k) with fields = 2 (present, successor) or 1 (no delay)."""
    frs, fis = [], []
    for n, (pr, pi) in enumerate(zip(*harmonic_list(zr, zi, n_harmonics), strict=True)):
        fr, fi = pr * wr[0, n] - pi * wi[0, n], pr * wi[0, n] + pi * wr[0, n]
        if wr.shape[0] == 2:  # successor field w1 z_{u+1}^n
            sr, si = _shift_up(pr), _shift_up(pi)
            fr, fi = fr + sr * wr[1, n] - si * wi[1, n], fi + sr * wi[1, n] + si * wr[1, n]
        frs.append(fr)
        fis.append(fi)
    return _planes(frs, fis)


def project(zr: Tensor, zi: Tensor, o: Tensor) -> Tensor:
    """a = sum_n Im[conj(z^n) o^n]: z planes (B, T, k), o (B, T, 2, N, k) -> (B, T, k)."""
    prs, pis = harmonic_list(zr, zi, o.shape[3])
    terms = [pr * o[:, :, 1, n] - pi * o[:, :, 0, n] for n, (pr, pi) in enumerate(zip(prs, pis, strict=True))]
    return sum(terms[1:], terms[0])  # a chain of adds: one fused loop (a stack + sum would be written out)


def dout_planes(zr: Tensor, zi: Tensor, da: Tensor, n_harmonics: int) -> Tensor:
    """d o^n = i z^n da as planes (B, T, 2, N, k); da (B, T, k)."""
    prs, pis = harmonic_list(zr, zi, n_harmonics)
    return _planes([-pi * da for pi in pis], [pr * da for pr in prs])


def input_grads(zr: Tensor, zi: Tensor, o: Tensor, dfield: Tensor, da: Tensor, wr: Tensor, wi: Tensor
                ) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of z (Re, Im planes, (B, T, k) each) and of w ((fields, 2, N, k): Re, Im) from the field
    gradient dfield and the projection gradient da."""
    n_h, delay = o.shape[3], wr.shape[0] == 2
    grs, gis, dws = [], [], []
    for n, (pr, pi) in enumerate(zip(*harmonic_list(zr, zi, n_h), strict=True)):
        fr, fi = dfield[:, :, 0, n], dfield[:, :, 1, n]
        # d z^n = dfield conj(w0) + shift_down(dfield) conj(w1) - i o da   (field, successor field, projection)
        gr = fr * wr[0, n] + fi * wi[0, n] + o[:, :, 1, n] * da
        gi = fi * wr[0, n] - fr * wi[0, n] - o[:, :, 0, n] * da
        dw = [_colsum(fr * pr + fi * pi), _colsum(fi * pr - fr * pi)]
        if delay:
            br, bi = _shift_down(fr), _shift_down(fi)  # dfield_{u-1}
            gr, gi = gr + br * wr[1, n] + bi * wi[1, n], gi + bi * wr[1, n] - br * wi[1, n]
            dw += [_colsum(br * pr + bi * pi), _colsum(bi * pr - br * pi)]
        grs.append(gr)
        gis.append(gi)
        dws.append(torch.stack(dw))  # (fields * 2, k): (field, Re | Im)
    hr, hi = grs[-1] * n_h, gis[-1] * n_h  # Horner: dz = sum_n n conj(z)^(n-1) dz^n
    for n in range(n_h - 1, 0, -1):
        hr, hi = grs[n - 1] * n + zr * hr + zi * hi, gis[n - 1] * n + zr * hi - zi * hr
    return hr, hi, torch.stack(dws, dim=1).unflatten(0, (-1, 2))  # (fields, 2, N, k)


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
        dout = _BACKWARD.call(ctx.compiled, 0, zr, zi, da, n_h)
        dout = to_heads(dout, h, -1).reshape(b * h, t, -1)
        dq, dk, dv = strict_backward(q3, k3, v, probs, diag, dout, ddiag.reshape(b * h, t), ctx.causal, ctx.chunk)
        dfield = from_heads(dv.view(b, h, t, -1), (2, n_h, -1), -1)  # (B, T, 2, N, k)
        dzr, dzi, dw = _BACKWARD.call(ctx.compiled, 1, zr, zi, o, dfield, da, wr, wi)
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
