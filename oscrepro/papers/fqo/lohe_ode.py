"""Integrators for the fixed-query Lohe ODE, Eq. (3) of the fqo paper (Pasqualetti & Guo).

For one free oscillator with a *fixed* weighted anchor sum ``h = sum_j w_ij r_j`` (anchors and
couplings do not evolve: fixed-query setting, Section 2) the dynamics are

    z' = (I - z z^T) h,        z(0) = z0 on the unit sphere S^{d-1},                       (3)

a gradient flow of V(z) = -z^T h whose stable fixed point is z* = h / ||h||  (Eq. 4).
Four ways to evaluate z(T_max) live here, side by side:

* :func:`solve_scipy` - the reference: ``scipy.integrate.solve_ivp(method="RK45",
  rtol=atol=1e-6, t_span=(0, T_max))`` per token, exactly Appendix B. Integrates in R^d
  (no re-projection onto the sphere), as scipy does; returns ``nfev``.
* :func:`dopri5_batched` - scipy's RK45 algorithm ported to torch and run for all M rows at once:
  same Dormand-Prince 5(4) tableau, initial-step heuristic and step-size controller (SAFETY 0.9,
  factors in [0.2, 10], RMS error norm, no growth right after a rejection), with per-row times,
  step sizes and ``nfev``. Reproduces scipy's steps and ``nfev`` row by row up to rounding.
* :func:`dopri5_plane` - the fast path of the previous one: RK stages are linear combinations of
  the state and h, so the numerical trajectory stays in span(h, z0) and the stages run on two
  coordinates; only scipy's componentwise error norm is evaluated in R^d. That norm dominates at
  large d_osc, so for big batches (M*d >= ``PLANE_COMPILE_MIN_ELEMS``) it runs as one
  ``torch.compile``d fused kernel (dynamic shapes: the active set shrinks every step); the eager
  :func:`_plane_err_norm` stays beside it as the reference (tests: equal nfev, z to 1e-10).
* :func:`lohe_closed_form` - exact solution. With constant h the flow stays in the plane spanned
  by z0 and h_hat = h/||h||, and the angle theta to h_hat obeys theta' = -||h|| sin(theta), so
  tan(theta(t)/2) = tan(theta0/2) * exp(-||h|| t). Writing L = log tan(theta/2) gives the stable
  form cos(theta) = -tanh(L), sin(theta) = 1/cosh(L).

Choices (paper is silent): z0 is assumed unit-norm (the closed form projects it onto the sphere,
scipy/DOPRI integrate it as given); for h == 0 the flow is frozen, z(t) = z0.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from scipy.integrate import solve_ivp
from torch import Tensor

# Dormand-Prince 5(4) tableau, identical to scipy.integrate.RK45 (C, A, B, E).
_C = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0)
_A = (
    (),
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
)
_B = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84)
_E = (-71 / 57600, 0.0, 71 / 16695, -71 / 1920, 17253 / 339200, -22 / 525, 1 / 40)
# scipy's RungeKutta step-size controller constants.
_SAFETY, _MIN_FACTOR, _MAX_FACTOR = 0.9, 0.2, 10.0
_ERR_EXP = -1.0 / 5.0  # -1 / (error_estimator_order + 1), error_estimator_order = 4
PLANE_COMPILE_MIN_ELEMS = 1 << 20  # M*d from which dopri5_plane fuses its error norm (compile costs seconds)
_COMPILED: dict[str, Callable] = {}


def lohe_rhs(z: Tensor, h: Tensor) -> Tensor:
    """Right-hand side of Eq. (3): (I - z z^T) h = h - z (z . h).  z, h: (M, d) -> (M, d)."""
    return torch.addcmul(h, z, torch.linalg.vecdot(z, h).unsqueeze(-1), value=-1.0)


def _lohe_rhs_np(h: np.ndarray):
    def fun(_t: float, z: np.ndarray) -> np.ndarray:
        return h - z * np.dot(z, h)

    return fun


def solve_scipy(
    h: np.ndarray, z0: np.ndarray, t_max: float = 30.0, rtol: float = 1e-6, atol: float = 1e-6
) -> tuple[np.ndarray, int]:
    """Reference integration of Eq. (3) for one token with scipy's RK45 (Appendix B protocol).

    Args:
        h: (d,) weighted anchor sum of the token, held fixed.
        z0: (d,) initial free-oscillator state.
    Returns:
        (z(T_max) as a (d,) array, number of right-hand-side evaluations ``nfev``).
    """
    h = np.asarray(h, dtype=np.float64)
    sol = solve_ivp(
        _lohe_rhs_np(h), (0.0, float(t_max)), np.asarray(z0, dtype=np.float64), method="RK45", rtol=rtol, atol=atol
    )
    if sol.status != 0:
        raise RuntimeError(f"solve_ivp failed: {sol.message}")
    return sol.y[:, -1].copy(), int(sol.nfev)


def _rms(x: Tensor) -> Tensor:
    """scipy's ``norm``: ||x||_2 / sqrt(d) per row.  (M, d) -> (M,)."""
    return torch.linalg.vector_norm(x, dim=-1) / math.sqrt(x.shape[-1])


def _combine(ks: list[Tensor], coef: tuple[float, ...]) -> Tensor:
    """sum_j coef[j] * ks[j] over the non-zero coefficients (one fused axpy per term)."""
    terms = [(c, k) for c, k in zip(coef, ks, strict=True) if c != 0.0]
    acc = terms[0][1] * terms[0][0]
    for c, k in terms[1:]:
        acc = torch.add(acc, k, alpha=c)
    return acc


def _initial_step(y0: Tensor, f0: Tensor, h: Tensor, t_max: float, rtol: float, atol: float) -> Tensor:
    """Per-row port of scipy.integrate._ivp.common.select_initial_step (Hairer et al. II.4)."""
    scale = atol + y0.abs() * rtol  # (M, d)
    d0, d1 = _rms(y0 / scale), _rms(f0 / scale)  # (M,)
    small = (d0 < 1e-5) | (d1 < 1e-5)
    h0 = torch.where(small, torch.full_like(d0, 1e-6), 0.01 * d0 / torch.where(small, 1.0, d1))
    h0 = h0.clamp(max=t_max)
    f1 = lohe_rhs(y0 + h0[:, None] * f0, h)
    d2 = _rms((f1 - f0) / scale) / h0
    dmax = torch.maximum(d1, d2)
    tiny = (d1 <= 1e-15) & (d2 <= 1e-15)
    h1 = torch.where(tiny, torch.clamp(h0 * 1e-3, min=1e-6), (0.01 / torch.where(tiny, 1.0, dmax)) ** (1.0 / 5.0))
    return torch.minimum(torch.minimum(100 * h0, h1), torch.full_like(h0, t_max))


def _dopri5_core(
    y: Tensor,
    f: Tensor,
    h_abs: Tensor,
    params: tuple[Tensor, ...],
    rhs: Callable[[Tensor, tuple[Tensor, ...]], Tensor],
    err_norm: Callable[[Tensor, Tensor, Tensor, tuple[Tensor, ...]], Tensor],
    t_max: float,
    max_iters: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """scipy RK45's step loop (rk.py ``_step_impl``), one step attempt per running row per iteration.

    ``y``, ``f``: (M, k) states and derivatives in any coordinates; ``params``: per-row tensors that
    ``rhs(y, params)`` and ``err_norm(y, y_new, err, params)`` (scipy's RMS of err / scale) need.
    Finished rows are written out and dropped from the working set. Returns (y_T, nfev, ok).
    """
    m, dev, dt = y.shape[0], y.device, y.dtype
    inf = torch.tensor(math.inf, dtype=dt, device=dev)
    ids = torch.arange(m, device=dev)  # original row ids of the working set
    t = torch.zeros(m, dtype=dt, device=dev)
    nfev_w = torch.full((m,), 2, dtype=torch.int64, device=dev)  # f(t0) + one in the step heuristic
    rejected = torch.zeros(m, dtype=torch.bool, device=dev)
    y_out, nfev = torch.zeros_like(y), torch.zeros(m, dtype=torch.int64, device=dev)
    ok = torch.ones(m, dtype=torch.bool, device=dev)
    for _ in range(max_iters):
        if ids.numel() == 0:
            break
        with torch.no_grad():
            min_step = 10 * (torch.nextafter(t, inf) - t).abs()
            too_small = rejected & (h_abs < min_step)
            ha = torch.where(rejected, h_abs, torch.maximum(h_abs, min_step))
            t_new = torch.clamp(t + ha, max=t_max)
            step = t_new - t  # (m',)
        hs = step[:, None]
        ks = [f]
        for s in range(1, 6):
            ks.append(rhs(torch.addcmul(y, _combine(ks, _A[s]), hs), params))
        y_new = torch.addcmul(y, _combine(ks, _B), hs)
        f_new = rhs(y_new, params)
        ks.append(f_new)
        with torch.no_grad():
            err = _combine(ks, _E) * hs  # no_grad: no graph, no detach needed
            en = err_norm(y, y_new, err, params)  # (m',)
            accept = (en < 1) & ~too_small
            ctrl = _SAFETY * en**_ERR_EXP
            grow = torch.where(en == 0, _MAX_FACTOR, ctrl.clamp(max=_MAX_FACTOR))
            grow = torch.where(rejected, grow.clamp(max=1.0), grow)
            h_abs = step.abs() * torch.where(accept, grow, ctrl.clamp(min=_MIN_FACTOR))
            rejected = ~accept
            t = torch.where(accept, t_new, t)
            nfev_w = nfev_w + torch.where(too_small, 0, 6)
            done = (accept & (t_new >= t_max)) | too_small
        a2 = accept[:, None]
        y = torch.where(a2, y_new, y)
        f = torch.where(a2, f_new, f)
        if bool(done.any()):
            fin = done.nonzero().squeeze(1)
            y_out = y_out.index_copy(0, ids[fin], y[fin])
            nfev = nfev.index_copy(0, ids[fin], nfev_w[fin])
            ok = ok.index_copy(0, ids[fin], ~too_small[fin])
            keep = (~done).nonzero().squeeze(1)
            ids, y, f, t, h_abs = ids[keep], y[keep], f[keep], t[keep], h_abs[keep]
            rejected, nfev_w = rejected[keep], nfev_w[keep]
            params = tuple(q[keep] for q in params)
    else:
        raise RuntimeError(f"RK45 did not finish within max_iters={max_iters}")
    return y_out, nfev, ok


def _full_err_norm(
    y: Tensor, y_new: Tensor, err: Tensor, params: tuple[Tensor, ...], rtol: float, atol: float
) -> Tensor:
    """scipy's RMS of err / (atol + rtol max(|y|, |y_new|)) on R^d states.  -> (m',)."""
    scale = torch.maximum(y.abs(), y_new.abs()).mul_(rtol).add_(atol)  # (m', d)
    return _rms(err / scale)


def dopri5_batched(
    h: Tensor,
    z0: Tensor,
    t_max: float = 30.0,
    rtol: float = 1e-6,
    atol: float = 1e-6,
    max_iters: int = 1_000_000,
) -> tuple[Tensor, Tensor, Tensor]:
    """Batched adaptive Dormand-Prince RK45 for Eq. (3) in R^d, one independent problem per row.

    The plain reference of the fast path :func:`dopri5_plane`: it runs scipy's ``RK45`` algorithm
    (initial step, acceptance, step-size update, ``nfev``) row by row on the full d-dim state, so it
    matches :func:`solve_scipy` to rounding. Differentiable in ``h`` and ``z0`` (step sizes treated
    as constants).

    Args:
        h: (M, d) fixed weighted anchor sums.  z0: (M, d) initial states.
    Returns:
        z_T (M, d), nfev (M,) int64, ok (M,) bool (False where the step size underflowed,
        scipy's "Required step size is less than spacing between numbers").
    """
    if t_max <= 0:
        raise ValueError("t_max must be positive")
    y = z0.to(h.dtype)
    f = lohe_rhs(y, h)  # (M, d)
    with torch.no_grad():
        h_abs = _initial_step(y.detach(), f.detach(), h.detach(), t_max, rtol, atol)  # (M,)
    return _dopri5_core(
        y,
        f,
        h_abs,
        (h,),
        lambda yy, pr: lohe_rhs(yy, pr[0]),
        lambda y_, yn, e, pr: _full_err_norm(y_, yn, e, pr, rtol, atol),
        t_max,
        max_iters,
    )


def _plane_rhs(c: Tensor, params: tuple[Tensor, ...]) -> Tensor:
    """Eq. (3) in plane coordinates c = (p, q), z = p h_hat + q u_hat, h = |h| h_hat:
    dc/dt = |h| (1 - p^2, -p q).  (m', 2) -> (m', 2)."""
    hn = params[0]  # (m', 1)
    p = c[:, :1]
    return hn * torch.addcmul(params[3], c, p, value=-1.0)


def _plane_err_norm(
    c: Tensor, c_new: Tensor, err: Tensor, params: tuple[Tensor, ...], rtol: float, atol: float
) -> Tensor:
    """scipy's componentwise error norm, evaluated on the d-dim vectors the plane coordinates encode."""
    h_hat, u_hat = params[1], params[2]  # (m', 1, d) each
    coords = torch.stack([c, c_new, err], dim=1)  # (m', 3, 2)
    full = torch.addcmul(coords[..., :1] * h_hat, coords[..., 1:], u_hat)  # (m', 3, d): y, y_new, err
    scale = torch.maximum(full[:, 0].abs(), full[:, 1].abs()).mul_(rtol).add_(atol)
    return _rms(full[:, 2] / scale)


def dopri5_plane(
    h: Tensor,
    z0: Tensor,
    t_max: float = 30.0,
    rtol: float = 1e-6,
    atol: float = 1e-6,
    max_iters: int = 1_000_000,
    compiled: bool | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Fast path of :func:`dopri5_batched`: the same scipy-RK45 replica run in the invariant plane.

    With constant h every RK stage is a linear combination of the state and h, so the numerical
    trajectory of scipy's RK45 stays in span(h_hat, u_hat) (u_hat: unit part of z0 orthogonal to h).
    The stages are therefore computed on 2 coordinates; only scipy's componentwise error norm is
    evaluated on the d-dim vectors (two broadcast products), so steps, nfev and z_T match the R^d
    replica up to rounding at a fraction of the (M, d)-sized work. Same signature and returns;
    gradients match too, except w.r.t. h at exactly h = 0 (the basis h/||h|| is not differentiable
    there; the plane path returns a zero h-gradient for such rows). ``compiled``: fuse the d-dim error
    norm with torch.compile (None: when M*d >= PLANE_COMPILE_MIN_ELEMS and no gradient is needed).
    """
    if t_max <= 0:
        raise ValueError("t_max must be positive")
    z0 = z0.to(h.dtype)
    hn = torch.linalg.vector_norm(h, dim=-1, keepdim=True)  # (M, 1)
    live = hn > 0
    h_hat = torch.where(live, h / torch.where(live, hn, 1.0), z0)  # h = 0: any axis through z0
    p0 = (z0 * h_hat).sum(-1, keepdim=True)
    u = z0 - p0 * h_hat
    q0 = torch.linalg.vector_norm(u, dim=-1, keepdim=True)
    u_hat = u / torch.where(q0 > 0, q0, 1.0)
    c0 = torch.cat([p0, q0], dim=-1)  # (M, 2)
    e1 = torch.zeros_like(c0)
    e1[:, 0] = 1.0  # the h_hat axis, per row so that it is compacted with the other row tensors
    params = (hn, h_hat.unsqueeze(1), u_hat.unsqueeze(1), e1)
    f0 = _plane_rhs(c0, params)
    with torch.no_grad():  # scipy's initial-step heuristic needs the d-dim vectors
        y0 = z0.detach()
        h_abs = _initial_step(y0, lohe_rhs(y0, h.detach()), h.detach(), t_max, rtol, atol)
    if compiled is None:
        compiled = h.numel() >= PLANE_COMPILE_MIN_ELEMS and not (h.requires_grad or z0.requires_grad)
    err_norm = _plane_err_norm_fused if compiled else _plane_err_norm
    c_t, nfev, ok = _dopri5_core(
        c0,
        f0,
        h_abs,
        params,
        _plane_rhs,
        lambda c, cn, e, pr: err_norm(c, cn, e, pr, rtol, atol),
        t_max,
        max_iters,
    )
    return torch.addcmul(c_t[:, :1] * h_hat, c_t[:, 1:], u_hat), nfev, ok


def _plane_err_norm_kernel(coords: Tensor, h_hat: Tensor, u_hat: Tensor, rtol: float, atol: float) -> Tensor:
    """:func:`_plane_err_norm` as one expression for torch.compile: coords (m', 3, 2), bases (m', 1, d)."""
    full = coords[..., :1] * h_hat + coords[..., 1:] * u_hat  # (m', 3, d): y, y_new, err
    scale = torch.maximum(full[:, 0].abs(), full[:, 1].abs()) * rtol + atol
    return (full[:, 2] / scale).square().mean(-1).sqrt()


def _plane_err_norm_fused(
    c: Tensor, c_new: Tensor, err: Tensor, params: tuple[Tensor, ...], rtol: float, atol: float
) -> Tensor:
    """Fused (torch.compile, dynamic shapes, built once per process) twin of :func:`_plane_err_norm`."""
    if "plane_err" not in _COMPILED:
        _COMPILED["plane_err"] = torch.compile(_plane_err_norm_kernel, dynamic=True)
    return _COMPILED["plane_err"](torch.stack([c, c_new, err], dim=1), params[1], params[2], rtol, atol)


def lohe_closed_form(h: Tensor, z0: Tensor, t: float | Tensor) -> Tensor:
    """Exact solution z(t) of Eq. (3) for constant h (differentiable; shapes (..., d)).

    theta0 = angle(z0, h_hat); tan(theta/2) = tan(theta0/2) exp(-||h|| t); z(t) = cos(theta) h_hat +
    sin(theta) u_hat with u_hat the unit component of z0 orthogonal to h_hat. z0 is projected onto
    the sphere first. Rows with h == 0 stay at z0; rows with z0 exactly at -h_hat stay there
    (the unstable equilibrium of Theorem 2).
    """
    z0 = z0 / torch.linalg.vector_norm(z0, dim=-1, keepdim=True)
    hn = torch.linalg.vector_norm(h, dim=-1, keepdim=True)  # (..., 1)
    live = hn > 0
    h_hat = h / torch.where(live, hn, 1.0)
    c = (z0 * h_hat).sum(-1, keepdim=True).clamp(-1.0, 1.0)  # cos(theta0)
    u = z0 - c * h_hat  # (..., d), orthogonal to h_hat, norm sin(theta0)
    s = torch.linalg.vector_norm(u, dim=-1, keepdim=True)
    u_hat = u / torch.where(s > 0, s, 1.0)
    # log tan(theta0/2) = log(s / (1 + c)) = log((1 - c) / s): pick the cancellation-free form.
    pos = c >= 0
    num = torch.where(pos, s, 1.0 - c)
    den = torch.where(pos, 1.0 + c, s)
    log_tan = torch.log(num) - torch.log(den)  # -inf at theta0 = 0, +inf at theta0 = pi
    big_l = log_tan - hn * t
    cos_t, sin_t = -torch.tanh(big_l), 1.0 / torch.cosh(big_l)
    z = cos_t * h_hat + sin_t * u_hat
    return torch.where(live, z, z0)


def integrate_fixed_points(
    h: Tensor,
    z0: Tensor,
    t_max: float = 30.0,
    method: str = "closed_form",
    rtol: float = 1e-6,
    atol: float = 1e-6,
    compute_dtype: torch.dtype = torch.float64,
) -> Tensor:
    """z(T_max) of Eq. (3) for every row of ``h``; drop-in replacement for z* = h/||h|| (Eq. 4).

    Intended for ODE inference inside a model forward (Section 4.4): ``h``, ``z0``: (..., d) on any
    device; returns (..., d) in ``h``'s dtype. ``method`` is "closed_form" (exact flow, cheapest) or
    "rk45" (:func:`dopri5_plane`, the numerical integrator of the paper's RK45 runs).
    """
    shape, dtype = h.shape, h.dtype
    hf = h.reshape(-1, shape[-1]).to(compute_dtype)
    zf = z0.reshape(-1, shape[-1]).to(compute_dtype)
    if method == "closed_form":
        out = lohe_closed_form(hf, zf, t_max)
    elif method == "rk45":
        out = dopri5_plane(hf, zf, t_max, rtol, atol)[0]
    else:
        raise ValueError(f"unknown method {method!r}; expected 'closed_form' or 'rk45'")
    return out.reshape(shape).to(dtype)
