"""Tiled fixed-query oscillator attention: fqo Eqs. (2)-(6) without any stored (T, T) tensor.

The plain forward (``FixedQueryOscillatorAttention`` in fqo.py, kept as the reference) materializes the coupling
w, the cosines z_i.r_j and the readout a, each (B, H, T, T), and autograd keeps them: 3.25x the softmax block's
time and 7x its memory at T = 1024 (issue 16). Here the heads are folded into the batch (G = B H) and the queries
are taken in row blocks of I rows against all T keys (a row's fixed point needs every key: Eq. 3 sums over j), so
one block holds (G_t, I, T) entries, G_t I T ~ ``tile_elems``. Per block:

    S = f g^T / sqrt(d_h),  w = softplus(S) m           Eq. (2)   (m: 0/1 causal mask)
    h = w r,  z = h / max(||h||, eps)                    Eqs. (3)-(4)
    c = clamp(z r^T, -1, 1),  u = (1 + c)^p m            Eq. (5) numerator
    o = (u v) / sum_j u                                   Eqs. (5)-(6)

Only o, the row sums sum_j u and h (G, T, .) are saved. Backward recomputes each block and applies the analytic
gradient, with a = u / s, D_i = <dO_i, o_i>:

    du = (dO v^T - D) / s;   dv += a^T dO
    dc = du p (1 + c)^(p-1) 1[|z.r| < 1] m;   dz = dc r;   dr += dc^T z
    dh = (dz - z <z, dz>) / ||h||   (dz / eps where ||h|| <= eps: F.normalize's clamp);   dr += w^T dh
    dS = (dh r^T) sigmoid(S) m;   df = dS g / sqrt(d_h);   dg += dS^T f / sqrt(d_h)

tests/unit/attention/test_fqo_tiled.py compares outputs and gradients with the reference (causal and not, p != 1,
ragged blocks). The denominator guard (clamp at 1e-12) and NORM_EPS are the reference's.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from oscrepro.attention.compiled import CompiledPair, run_with_fallback

NORM_EPS = 1e-8  # App. B, as in fqo.py
DEN_EPS = 1e-12  # Eq. (5) denominator guard, as in fqo.readout_from_cosines


def _blocks(g: int, t: int, tile_elems: int) -> list[tuple[slice, slice, bool]]:
    """(head slice, query slice, full-size) covering (G, T): I = min(T, tile_elems // T) rows (>= 1), G_t heads."""
    rows = max(1, min(t, tile_elems // t))
    heads = max(1, min(g, tile_elems // (rows * t)))
    return [(slice(g0, min(g0 + heads, g)), slice(i0, min(i0 + rows, t)), g0 + heads <= g and i0 + rows <= t)
            for g0 in range(0, g, heads) for i0 in range(0, t, rows)]


def _mask(qs: slice, t: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """(I, T) 0/1: key j visible from query i (j <= i)."""
    return (torch.arange(t, device=device)[None, :] <= torch.arange(qs.start, qs.stop, device=device)[:, None]
            ).to(dtype)


def forward_block(fb: Tensor, g: Tensor, r: Tensor, v: Tensor, m: Tensor | None, scale: float,
                  p: float) -> tuple[Tensor, Tensor, Tensor]:
    """One row block: fb (G_t, I, d), g / v (G_t, T, d), r (G_t, T, N), m (I, T) or None -> o (G_t, I, d),
    h (G_t, I, N), row sums s (G_t, I)."""
    w = F.softplus(torch.bmm(fb, g.transpose(1, 2)) * scale)  # (G_t, I, T) Eq. (2)
    if m is not None:
        w = w * m
    h = torch.bmm(w, r)  # (G_t, I, N) Eq. (3)
    z = h / h.norm(dim=-1, keepdim=True).clamp_min(NORM_EPS)  # Eq. (4), F.normalize
    u = 1.0 + torch.bmm(z, r.transpose(1, 2)).clamp(-1.0, 1.0)  # Eq. (5) numerator
    if p != 1.0:
        u = u.pow(p)
    if m is not None:
        u = u * m
    s = u.sum(-1).clamp_min(DEN_EPS)  # (G_t, I)
    return torch.bmm(u, v) / s[..., None], h, s  # Eq. (6) per head


def backward_block(fb: Tensor, g: Tensor, r: Tensor, v: Tensor, m: Tensor | None, h: Tensor, s: Tensor, do: Tensor,
                   dd: Tensor, scale: float, p: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradient of one row block (module docstring): df of its rows (G_t, I, d) and its contributions to dg, dr, dv
    over all keys (G_t, T, .). h, s from :func:`forward_block`; do = dO of its rows; dd = <dO_i, o_i> (G_t, I)."""
    sc = torch.bmm(fb, g.transpose(1, 2)) * scale  # (G_t, I, T)
    w = F.softplus(sc)
    if m is not None:
        w = w * m
    norm = h.norm(dim=-1, keepdim=True)
    z = h / norm.clamp_min(NORM_EPS)
    cos = torch.bmm(z, r.transpose(1, 2))
    c = cos.clamp(-1.0, 1.0)
    u = 1.0 + c if p == 1.0 else (1.0 + c).pow(p)
    if m is not None:
        u = u * m
    s3 = s[..., None]
    dv = torch.bmm((u / s3).transpose(1, 2), do)  # a^T dO
    du = (torch.bmm(do, v.transpose(1, 2)) - dd[..., None]) / s3
    dc = du * ((cos >= -1.0) & (cos <= 1.0)).to(du.dtype)  # clamp passes gradient on [-1, 1]
    if p != 1.0:
        dc = dc * (p * (1.0 + c).pow(p - 1.0))
    if m is not None:
        dc = dc * m
    dz = torch.bmm(dc, r)  # (G_t, I, N)
    live = (norm > NORM_EPS).to(dz.dtype)  # F.normalize divides by max(||h||, eps)
    dh = live * (dz - z * (z * dz).sum(-1, keepdim=True)) / norm.clamp_min(NORM_EPS) + (1.0 - live) * dz / NORM_EPS
    dr = torch.bmm(dc.transpose(1, 2), z) + torch.bmm(w.transpose(1, 2), dh)
    ds = torch.bmm(dh, r.transpose(1, 2)) * torch.sigmoid(sc) * scale  # dL/d(f.g)
    if m is not None:
        ds = ds * m
    return torch.bmm(ds, g), torch.bmm(ds.transpose(1, 2), fb), dr, dv


_KERNELS = CompiledPair("fqo", forward_block, backward_block)  # full-size blocks compiled (compiled.py)


class _TiledFQO(torch.autograd.Function):
    """o = readout(fixed point(coupling)) per row block; blocks recomputed in backward (module docstring)."""

    @staticmethod
    def forward(ctx, f: Tensor, g: Tensor, r: Tensor, v: Tensor, p: float, causal: bool, tile_elems: int,
                compiled: bool) -> Tensor:
        b, h, t, dh = f.shape
        scale = 1.0 / math.sqrt(dh)
        f3, g3, r3, v3 = (x.detach().reshape(b * h, t, -1).contiguous() for x in (f, g, r, v))  # (G, T, .)
        out, hsum = torch.empty_like(v3), f3.new_empty(b * h, t, r3.shape[-1])
        den = f3.new_empty(b * h, t)
        for hs, qs, full in _blocks(b * h, t, tile_elems):
            fwd, _ = _KERNELS.get(compiled and full)  # ragged edge blocks run eagerly: no recompile per odd shape
            m = _mask(qs, t, f3.device, f3.dtype) if causal else None
            out[hs, qs], hsum[hs, qs], den[hs, qs] = fwd(f3[hs, qs], g3[hs], r3[hs], v3[hs], m, scale, p)
        ctx.save_for_backward(f3, g3, r3, v3, out, hsum, den)
        ctx.cfg = (b, h, p, causal, tile_elems, scale, compiled)
        return out.view(b, h, t, -1)

    @staticmethod
    def backward(ctx, d_out: Tensor):
        f3, g3, r3, v3, out, hsum, den = ctx.saved_tensors
        b, h, p, causal, tile_elems, scale, compiled = ctx.cfg
        gt, t, _ = f3.shape
        do3 = d_out.reshape(gt, t, -1).to(out.dtype).contiguous()
        dd = (do3 * out).sum(-1)  # (G, T) D_i = <dO_i, o_i>
        df, dg, dr, dv = (torch.zeros_like(x) for x in (f3, g3, r3, v3))
        for hs, qs, full in _blocks(gt, t, tile_elems):
            _, bwd = _KERNELS.get(compiled and full)
            m = _mask(qs, t, f3.device, f3.dtype) if causal else None
            dfb, dgb, drb, dvb = bwd(f3[hs, qs], g3[hs], r3[hs], v3[hs], m, hsum[hs, qs], den[hs, qs], do3[hs, qs],
                                     dd[hs, qs], scale, p)
            df[hs, qs] = dfb
            dg[hs] += dgb
            dr[hs] += drb
            dv[hs] += dvb
        shape = (b, h, t)
        return (df.view(*shape, -1), dg.view(*shape, -1), dr.view(*shape, -1), dv.view(*shape, -1), None, None,
                None, None)


def fqo_tiled(f: Tensor, g: Tensor, r: Tensor, v: Tensor, p: float = 1.0, causal: bool = False,
              tile_elems: int = 1 << 20, compiled: bool = False) -> Tensor:
    """Eqs. (2)-(6) per head without (T, T) tensors. f, g, v: (B, H, T, d_h) (F e, G e, W_V e per head);
    r: (B, H, T, N) unit anchors. Returns o (B, H, T, d_h), the reference's ``a @ v``. ``compiled``: the block
    functions through ``torch.compile`` (full-size blocks; the same maths, fused elementwise loops)."""
    return _TiledFQO.apply(f, g, r, v, float(p), causal, int(tile_elems), bool(compiled))


def tiled_with_fallback(f: Tensor, g: Tensor, r: Tensor, v: Tensor, p: float, causal: bool, tile_elems: int,
                        compiled: bool) -> Tensor:
    """:func:`fqo_tiled`, compiled when asked unless ``torch.compile`` already failed in this process (then, after
    one warning, eagerly: the same maths)."""
    return run_with_fallback(lambda c: fqo_tiled(f, g, r, v, p, causal, tile_elems, compiled=c), compiled, _KERNELS)
