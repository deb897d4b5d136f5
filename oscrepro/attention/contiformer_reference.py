"""Plain per-pair reference for ContiFormer attention (tests only; the fast path is ``contiformer.py``).

Every quantity is computed one (batch row, query j, key i) at a time, as the formulas read:

    k_i(t) = K_i + int_{t_i}^{t} f_k(tau, k_i) dtau      solved in real time t (no [-1, 1] rescaling), one odeint
                                                        per pair and per field; dopri5 at tight tolerance by default
    f(t, y) = act(LN(W y + b + w t))                     LayerNorm written out (mean, biased variance, eps 1e-6)
    q(tau)  = Hermite cubic on [t_m, t_{m+1}] with backward-difference knot slopes (basis form h00, h10, h01, h11)
    alpha_ij = sum_m c_m^2 <q(tau_m), k_i(tau_m)> / sqrt(d_h),  y_j = W_O sum_i softmax_i(alpha_ij) sum_m c_m v_i(tau_m)

It shares nothing with the fast path except the module's parameters and settings, so agreement checks the
vectorisation, the rescaling, the spline coefficients and the masking. With ``method="rk4"`` each pair is solved on
the same 21-point grid the fast path uses (step 0.1 in s, i.e. 0.1 (t_j - t_i) / 2 in t) and interior nodes are read
by linear interpolation on it, so the two must agree to rounding; with ``dopri5`` they differ by the RK4 error.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchdiffeq import odeint

from oscrepro.attention.contiformer import ContiFormerAttention
from oscrepro.attention.contiformer_ode import ACTIVATIONS


def _field(mech: ContiFormerAttention, f: int):
    """Field f (0 = keys, 1 = values) of ``mech`` as a plain function (t scalar, y (D,)) -> (D,)."""
    p, act = mech.field, ACTIVATIONS[mech.field.actfn]

    def rhs(t: Tensor, y: Tensor) -> Tensor:
        h = p.weight[f] @ y + p.bias[f] + (p.time_weight[f] * t if p.time_dependent else 0.0)
        if p.layer_norm:
            mu, var = h.mean(), ((h - h.mean()) ** 2).mean()
            h = (h - mu) / torch.sqrt(var + 1e-6) * p.ln_weight[f] + p.ln_bias[f]
        return act(h)

    return rhs


def _trajectory(rhs, y0: Tensor, ti: Tensor, tj: Tensor, s: Tensor, method: str, rtol: float) -> Tensor:
    """y at t_i + (s + 1)(t_j - t_i)/2 for each node s (M,) -> (M, D)."""
    if tj == ti:
        return y0.expand(len(s), -1)
    if method == "rk4":  # the fast path's grid: 20 steps of 0.1 in s, nodes read by linear interpolation
        grid = torch.linspace(-1, 1, 21, dtype=y0.dtype)
        ys = odeint(rhs, y0, ti + (grid + 1) * (tj - ti) / 2, method="rk4")  # (21, D)
        pos = ((s + 1) / 0.1).clamp(0, 20)
        lo = pos.floor().long().clamp(max=19)
        frac = (pos - lo)[:, None]
        return ys[lo] * (1 - frac) + ys[lo + 1] * frac
    out = odeint(rhs, y0, torch.cat([ti.view(1), ti + (s[s > -1] + 1) * (tj - ti) / 2]), method=method,
                 rtol=rtol, atol=rtol)
    return out if bool((s == -1).any()) else out[1:]


def _hermite(x: Tensor, t: Tensor, tau: Tensor, kind: str) -> Tensor:
    """Backward-difference Hermite (or linear) interpolant of knots (t (T,), x (T, D)) at one time tau -> (D,)."""
    n = len(t)
    if n == 1:
        return x[0]
    m = max(0, min(n - 2, int((t < tau).sum()) - 1))  # piece [t_m, t_{m+1}] holding tau
    h = t[m + 1] - t[m]
    slope = lambda a: (x[a + 1] - x[a]) / (t[a + 1] - t[a]) if t[a + 1] > t[a] else torch.zeros_like(x[a])  # noqa: E731
    if h == 0:
        return x[m]
    u = (tau - t[m]) / h
    if kind == "linear":
        return x[m] + u * (x[m + 1] - x[m])
    d0, d1 = slope(max(m - 1, 0)), slope(m)  # backward differences at t_m (d_0 = d_1) and t_{m+1}
    h00, h10, h01, h11 = 2 * u**3 - 3 * u**2 + 1, u**3 - 2 * u**2 + u, -2 * u**3 + 3 * u**2, u**3 - u**2
    return h00 * x[m] + h10 * h * d0 + h01 * x[m + 1] + h11 * h * d1


def contiformer_reference(mech: ContiFormerAttention, x: Tensor, times: Tensor | None = None, causal: bool = False,
                          method: str = "dopri5", rtol: float = 1e-10) -> Tensor:
    """(B, T, D) -> (B, T, D): ``mech``'s output computed pair by pair (see the module docstring)."""
    b, t, d = x.shape
    h, dh = mech.n_heads, mech.d_head
    times = torch.arange(t, dtype=x.dtype).expand(b, t) if times is None else times.to(x.dtype)
    q, k, v = mech.qkv(x).chunk(3, dim=-1)  # (B, T, D)
    s = mech.nodes[mech.read].to(x)  # (M,) rescaled read nodes
    c = mech.node_weights.to(x)  # (M,)
    fk, fv = _field(mech, 0), _field(mech, 1)
    rows = []
    for bi in range(b):
        for j in range(t):
            keys = range(j + 1) if causal and not mech.attend_future else range(t)
            logits, vbars = [], []
            for i in keys:
                ti, tj = times[bi, i], times[bi, j]
                k_m = _trajectory(fk, k[bi, i], ti, tj, s, method, rtol)  # (M, D)
                v_m = _trajectory(fv, v[bi, i], ti, tj, s, method, rtol)
                if mech.approximation == "bilinear":  # the interpolant at its knots t_i and t_j
                    q_m = torch.stack([q[bi, i], q[bi, j]])
                else:
                    q_m = torch.stack([_hermite(q[bi], times[bi], ti + (sm + 1) * (tj - ti) / 2, mech.interpolation)
                                       for sm in s])
                qk = (q_m * k_m).view(len(s), h, dh).sum(-1)  # (M, H)
                logits.append((c[:, None] ** 2 * qk).sum(0) / dh**0.5)  # (H,)
                vbars.append((c[:, None] * v_m).sum(0).view(h, dh))  # (H, Dh)
            w = torch.stack(logits).softmax(dim=0)  # (n_keys, H)
            rows.append((w[..., None] * torch.stack(vbars)).sum(0).reshape(d))  # (D,)
    return mech.out(torch.stack(rows).view(b, t, d))
