"""Fused shared gates of the FSN fast path (fsn Eq. 1, App. A): phases -> (cos, sin), the gate map, the gated rotary
query/key features and the value gate in one autograd node with a hand-written backward.

:class:`~oscrepro.attention.kuramoto.PhaseGates` (complex arithmetic, plain autograd) is the reference; this is the
same computation in real arithmetic::

    c, s = cos theta, sin theta;   x = (c_1, s_1, ..., c_k, s_k) = view_as_real(z)
    raw = x W^T + b   (W: the shared Linear(2k, 3k));   gq, gk = softplus(raw_q), softplus(raw_k) / their means
    gv = raw_v;   rot = (c cos wt - s sin wt, s cos wt + c sin wt);   q = rot gq / tau,   k = rot gk

Backward, with m the coordinate mean of a = softplus(raw_q) (clamped at the gate floor):
d rot = dq gq / tau + dk gk;  d gq = <dq, rot> / tau;  d a = (d gq - <d gq, gq> / k) / m;  d raw_q = d a sigmoid(raw_q)
with sigmoid(raw_q) = 1 - exp(-a) from the a saved by the forward (likewise k);  d raw_v = d gv;
dx = d raw W,  dW = d raw^T x,  db = sum d raw (the GEMMs);
d theta = -s (dx_c + d rot . d rot/dc + dc) + c (dx_s + d rot . d rot/ds + ds);  d log tau = -<dq, q>.

The elementwise stages around the GEMMs are pure functions, run eagerly or through ``torch.compile``
(:mod:`oscrepro.attention.compiled`), chosen like the kernel's stages
(:func:`~oscrepro.attention.fsn_fused.use_compiled`).
Measured (issue 16, results/fsn/cpu/step_time.md): the gates' backward through plain autograd cost ~190 ms of a
950 ms FSN training step at batch 16 on one CPU thread. The drift exp(i omega t) is a (T, k) table computed once
per call and the softplus activations are saved rather than recomputed: inside the compiled stages both were
transcendentals evaluated per element of (B, T, k) in the forward and again in the backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from oscrepro.attention.compiled import CompiledPair, run_with_fallback
from oscrepro.attention.kuramoto import PhaseGates


def drift(t: int, omega: Tensor) -> tuple[Tensor, Tensor]:
    """cos, sin of omega t: (T, k) each. Computed once per call outside the compiled stages (inside, the trig
    would be recomputed for every batch row)."""
    ang = torch.arange(t, device=omega.device, dtype=omega.dtype)[:, None] * omega
    return torch.cos(ang), torch.sin(ang)


def gate_inputs(theta: Tensor) -> tuple[Tensor, Tensor]:
    """cos theta, sin theta (B, T, k): Re z, Im z."""
    return torch.cos(theta), torch.sin(theta)


def gate_outputs(raw: Tensor, c: Tensor, s: Tensor, cw: Tensor, sw: Tensor, log_tau: Tensor, floor: float
                 ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """q (pre-scaled by 1/tau) and k features as (Re, Im) planes (B, T, 2, k), the value gate (B, T, k) and the
    softplus activations a (B, T, 2, k) (kept for the backward) from raw = x W^T + b and the drift cw, sw (T, k).
    (Planes, not PhaseGates' interleaved (B, T, k, 2): the score is a dot product over all features, so any
    layout shared by q and k gives the same scores.)"""
    kk = c.shape[-1]
    a = F.softplus(raw[..., : 2 * kk]).unflatten(-1, (2, kk))  # (B, T, 2, k)
    g = a / a.mean(dim=-1, keepdim=True).clamp_min(floor)
    gq, gk = g[..., 0, :] * torch.exp(-log_tau), g[..., 1, :]
    rr, ri = c * cw - s * sw, s * cw + c * sw  # rot = z exp(i omega t), (B, T, k)
    return torch.stack([rr * gq, ri * gq], dim=2), torch.stack([rr * gk, ri * gk], dim=2), raw[..., 2 * kk:], a


def _gate_grad(a: Tensor, dg: Tensor, floor: float) -> tuple[Tensor, Tensor]:
    """Through g = a / max(mean a, floor) and a = softplus(raw): d raw and g, (B, T, k) each. softplus' = sigmoid
    = 1 - exp(-a), from the saved a (expm1: exact where a is tiny)."""
    mean = a.mean(dim=-1, keepdim=True)
    m = mean.clamp_min(floor)
    g = a / m
    active = (mean >= floor).to(a.dtype)
    return (dg - active * (dg * g).mean(dim=-1, keepdim=True)) / m * -torch.expm1(-a), g


def raw_grads(dq: Tensor, dk: Tensor, dgv: Tensor, a: Tensor, c: Tensor, s: Tensor, cw: Tensor, sw: Tensor,
              log_tau: Tensor, floor: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Backward before the GEMMs: d raw (B, T, 3k), the rotation's share of dc, ds (B, T, k) and d log tau ()."""
    scale = torch.exp(-log_tau)
    rr, ri = c * cw - s * sw, s * cw + c * sw  # rot, (B, T, k)
    dqr, dqi, dkr, dki = dq[:, :, 0], dq[:, :, 1], dk[:, :, 0], dk[:, :, 1]  # planes (B, T, 2, k)
    dgq = dqr * rr + dqi * ri  # d g^q without the 1/tau
    draw_q, gq = _gate_grad(a[:, :, 0], dgq * scale, floor)
    draw_k, gk = _gate_grad(a[:, :, 1], dkr * rr + dki * ri, floor)
    drr = dqr * gq * scale + dkr * gk
    dri = dqi * gq * scale + dki * gk
    dc = drr * cw + dri * sw  # d rot / d c = (cw, sw), d rot / d s = (-sw, cw)
    ds = dri * cw - drr * sw
    return torch.cat([draw_q, draw_k, dgv], dim=-1), dc, ds, -(dgq * gq).sum() * scale


def theta_grad(theta: Tensor, dxc: Tensor, dxs: Tensor, dc_rot: Tensor, ds_rot: Tensor, dc: Tensor, ds: Tensor
               ) -> Tensor:
    """d theta = -sin theta (dc total) + cos theta (ds total); dxc, dxs: the gate map's input gradients (B, T, k)."""
    return -torch.sin(theta) * (dxc + dc_rot + dc) + torch.cos(theta) * (dxs + ds_rot + ds)


_FORWARD = CompiledPair("FSN gates forward", gate_inputs, gate_outputs)
_BACKWARD = CompiledPair("FSN gates backward", raw_grads, theta_grad)


class GateFeatures(torch.autograd.Function):
    """theta (B, T, k) -> cos theta, sin theta (B, T, k), q, k planes (B, T, 2, k), gv (B, T, k); module docstring.
    The gate map x W^T with x = view_as_real(z) interleaved is computed as c W_c^T + s W_s^T (W_c, W_s: the even
    and odd columns of W), so no interleaved copy of the phases is made."""

    @staticmethod
    def forward(ctx, theta: Tensor, weight: Tensor, bias: Tensor, log_tau: Tensor, omega: Tensor, floor: float,
                compiled: bool) -> tuple[Tensor, ...]:
        pre, post = _FORWARD.get(compiled)
        c, s = pre(theta)
        b, t, kk = c.shape
        wc, ws = weight[:, 0::2], weight[:, 1::2]  # (3k, k) each
        raw = torch.addmm(bias, c.view(b * t, kk), wc.t()).addmm_(s.view(b * t, kk), ws.t()).view(b, t, 3 * kk)
        cw, sw = drift(t, omega)
        q, k, gv, a = post(raw, c, s, cw, sw, log_tau, floor)
        ctx.floor, ctx.compiled = floor, compiled
        ctx.save_for_backward(theta, c, s, a, weight, log_tau, cw, sw)
        return c, s, q, k, gv

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dc: Tensor, ds: Tensor, dq: Tensor, dk: Tensor, dgv: Tensor) -> tuple[Tensor | None, ...]:
        theta, c, s, a, weight, log_tau, cw, sw = ctx.saved_tensors
        b, t, kk = c.shape
        dc, ds, dgv = (torch.zeros_like(c) if g is None else g.contiguous() for g in (dc, ds, dgv))
        dq, dk = (c.new_zeros(b, t, 2, kk) if g is None else g.contiguous() for g in (dq, dk))
        draw, dc_rot, ds_rot, dlog_tau = _BACKWARD.call(ctx.compiled, 0, dq, dk, dgv, a, c, s, cw, sw, log_tau,
                                                        ctx.floor)
        draw2 = draw.view(b * t, 3 * kk)
        dxc = (draw2 @ weight[:, 0::2]).view(b, t, kk)
        dxs = (draw2 @ weight[:, 1::2]).view(b, t, kk)
        dweight = torch.stack([draw2.t() @ c.view(b * t, kk), draw2.t() @ s.view(b * t, kk)], dim=-1).flatten(-2)
        dtheta = _BACKWARD.call(ctx.compiled, 1, theta, dxc, dxs, dc_rot, ds_rot, dc, ds)
        return dtheta, dweight, draw2.sum(dim=0), dlog_tau, None, None, None


def gate_features(theta: Tensor, gates: PhaseGates, compiled: bool) -> tuple[Tensor, ...]:
    """(cos theta, sin theta, q, k, gv) of the shared gates through :class:`GateFeatures`; a compile failure warns
    once and runs the same maths eagerly."""
    args = (theta, gates.proj.weight, gates.proj.bias, gates.log_tau, gates.omega, float(gates.gate_floor))
    return run_with_fallback(lambda c: GateFeatures.apply(*args, c), compiled, _FORWARD, _BACKWARD)
