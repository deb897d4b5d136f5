"""Plain numerical references for OsciFormer (osciformer App. A), used only by tests and analyses.

* ``oscillator_ode_reference``: the driven oscillator ODE (Eq. 2) integrated by scipy ``solve_ivp`` (DOP853,
  rtol 1e-12, float64): the ground truth for ``oscillator_kernels.oscillator_state`` / ``driven_state``.
* ``averaged_logit_quadrature``: (1/Delta) int_{t_i}^{t_j} <q(tau), k(tau)> dtau (Eq. 78) by composite
  Gauss-Legendre quadrature, for any callables q, k: the ground truth for the closed-form logits.
* ``osciformer_reference``: the whole mechanism with loops over batch, head, query row and key, the query fit
  solved per prefix, each logit by quadrature of the (ODE-checked) trajectories, each value read at t_j. Pure
  torch, so tests compare its gradients with the fast path's too. Slow: tests only.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from scipy.integrate import solve_ivp
from torch import Tensor

from oscrepro.attention.oscillator_kernels import driven_state, gauss_legendre, steady_state_amplitude


def oscillator_ode_reference(t_eval: np.ndarray, x0: float, v0: float, omega: float, zeta: float,
                             p_amp: np.ndarray | None = None, q_amp: np.ndarray | None = None,
                             varpi: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(x, x') at t_eval >= 0 of x'' + 2 zeta omega x' + omega^2 x = sum_m P_m cos(varpi_m t) + Q_m sin(varpi_m t)."""
    p_amp, q_amp, varpi = (np.zeros(0) if a is None else np.asarray(a, dtype=float) for a in (p_amp, q_amp, varpi))

    def rhs(t: float, z: np.ndarray) -> list[float]:
        force = float(np.sum(p_amp * np.cos(varpi * t) + q_amp * np.sin(varpi * t)))
        return [z[1], force - 2 * zeta * omega * z[1] - omega**2 * z[0]]

    sol = solve_ivp(rhs, (0.0, float(np.max(t_eval))), [x0, v0], t_eval=t_eval, method="DOP853",
                    rtol=1e-12, atol=1e-14)
    return sol.y[0], sol.y[1]


def averaged_logit_quadrature(q_fn: Callable[[Tensor], Tensor], k_fn: Callable[[Tensor], Tensor], t_i: float,
                              t_j: float, n_panels: int = 32, n_nodes: int = 16) -> Tensor:
    """(1/Delta) int_{t_i}^{t_j} <q(tau), k(tau)> dtau by composite Gauss-Legendre; <q(t_i), k(t_i)> if Delta = 0.

    q_fn, k_fn map absolute times (N,) to (N, D)."""
    if t_j == t_i:
        tau = torch.tensor([t_i], dtype=torch.float64)
        return (q_fn(tau) * k_fn(tau)).sum()
    nodes, wts = gauss_legendre(n_nodes)
    edges = torch.linspace(t_i, t_j, n_panels + 1, dtype=torch.float64)
    tau = (edges[:-1, None] + (edges[1:] - edges[:-1])[:, None] * nodes).reshape(-1)  # (panels * nodes,)
    f = (q_fn(tau) * k_fn(tau)).sum(-1)
    return (f * wts.repeat(n_panels)).sum() / n_panels


def _drive_amplitudes(mech, role: str, e: Tensor, h: int) -> tuple[Tensor, Tensor]:
    """Drive (P, Q), each (J, d_h), of one token's projection e (d_h,) in head h (Sec. 6 / App. E)."""
    a, b = getattr(mech, f"drive_cos_{role}")[h].double(), getattr(mech, f"drive_sin_{role}")[h].double()
    if mech.drive == "matrix":
        return (a @ e).expand(mech.n_modes, -1), (b @ e).expand(mech.n_modes, -1)
    return a * e, b * e


def _trajectory(mech, role: str, e: Tensor, h: int, lam: Tensor) -> Callable[[Tensor], Tensor]:
    """s (N,) -> (N, d_h): the key/value trajectory of token projection e, lag s after its anchor."""
    omega, zeta = (z[h].double() for z in mech.omega_zeta(role))  # (d_h,)
    v_init = getattr(mech, f"velocity_{role}")[h].double() @ e  # U e
    if mech.drive == "none":
        w = torch.zeros(e.shape[0], 1, dtype=torch.complex128)
        varpi = torch.zeros(1, dtype=torch.float64)
    else:
        p_amp, q_amp = _drive_amplitudes(mech, role, e, h)  # (J, d_h)
        w = steady_state_amplitude(p_amp, q_amp, lam[:, None], omega, zeta).T  # (d_h, J)
        varpi = lam
    return lambda s: driven_state(s[:, None], e, v_init, w, varpi, omega, zeta)[0]


def osciformer_reference(mech, x: Tensor, times: Tensor | None = None, n_panels: int = 16, n_nodes: int = 16
                         ) -> tuple[Tensor, Tensor, Tensor]:
    """Slow OsciFormer forward (loops): x (B, T, D) -> (y (B, T, D), weights (B, H, T, T), logits (B, H, T, T))."""
    b_sz, n, _ = x.shape
    times = torch.arange(n, dtype=torch.float64).expand(b_sz, n) if times is None else times.double()
    q, k, v = (z.double().view(b_sz, n, mech.n_heads, -1) for z in mech.qkv(x).chunk(3, dim=-1))  # (B, T, H, d_h)
    lam_all = mech.log_freqs.double().exp()  # (H, J)
    weights = torch.zeros(b_sz, mech.n_heads, n, n, dtype=torch.float64)
    logits = torch.full_like(weights, float("-inf"))
    ys = []
    for b in range(b_sz):
        rows = []
        for j in range(n):
            heads = []
            for h in range(mech.n_heads):
                lam = lam_all[h]
                tau = times[b, : j + 1]
                phi = torch.cat([torch.cos(tau[:, None] * lam), torch.sin(tau[:, None] * lam)], dim=1)  # (j+1, 2J)
                gram = phi.T @ phi + mech.ridge * torch.eye(phi.shape[1], dtype=torch.float64)
                coef = torch.linalg.solve(gram, phi.T @ q[b, : j + 1, h])  # (2J, d_h), Eq. (48)
                q_fn = lambda t, coef=coef, lam=lam: torch.cat([torch.cos(t[:, None] * lam),
                                                                torch.sin(t[:, None] * lam)], dim=1) @ coef
                alpha, vals = [], []
                for i in range(j + 1):
                    t_i, t_j = float(times[b, i]), float(times[b, j])
                    key = _trajectory(mech, "k", k[b, i, h], h, lam)
                    alpha.append(averaged_logit_quadrature(q_fn, lambda t, key=key, t_i=t_i: key(t - t_i), t_i, t_j,
                                                           n_panels, n_nodes))
                    vals.append(_trajectory(mech, "v", v[b, i, h], h, lam)(times[b, j : j + 1] - t_i)[0])
                alpha = torch.stack(alpha)
                w = torch.softmax(alpha / math.sqrt(mech.d_head), dim=0)  # Eq. (79)
                weights[b, h, j, : j + 1], logits[b, h, j, : j + 1] = w.detach(), alpha.detach()
                heads.append((w[:, None] * torch.stack(vals)).sum(0))  # (d_h,)
            rows.append(torch.cat(heads))
        ys.append(torch.stack(rows))
    y = mech.out(torch.stack(ys).to(mech.out.weight.dtype))
    return y, weights, logits
