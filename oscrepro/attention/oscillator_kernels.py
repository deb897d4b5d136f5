"""Closed-form kernels of OsciFormer (osciformer App. A, Eqs. 2, 11-47, 49-51, 62-64).

What: the pieces ``osciformer.py`` assembles into an attention layer, each usable (and tested) on its own:

* ``damped_basis`` / ``oscillator_state`` / ``oscillator_response``: the homogeneous solution of
  x'' + 2 gamma x' + omega^2 x = 0 (Eq. 2, gamma = zeta omega) in all three regimes (Eq. 11, A.1.2, A.1.3) as one
  formula. With D = (omega^2 - gamma^2) t^2,

      x(t)  = e^{-gamma t} [x0 C(D) + (v0 + gamma x0) t S(D)]
      x'(t) = e^{-gamma t} [v0 C(D) - (omega^2 x0 + gamma v0) t S(D)]

  where C(D) = cos sqrt(D) | cosh sqrt(-D) and S(D) = sin sqrt(D)/sqrt(D) | sinh sqrt(-D)/sqrt(-D) are entire in D.
  The paper's three cases are the branches D > 0, D = 0, D < 0 of these functions; a Taylor series for
  |D| < ``TAYLOR_RADIUS`` removes the 1/omega_d and 1/sigma of Eq. (11) and A.1.3, so the formula and its
  gradients are exact and finite at and near critical damping (zeta = 1). Every branch is evaluated at a safe
  argument, so ``torch.where`` never routes a NaN gradient.
* ``transient_modes``: the same homogeneous solution as exponential modes sum_m a_m e^{r_m s}, which makes sums
  over lags t_j - t_i separable (the fast path of ``osciformer.py``); exact away from zeta = 1, where channels
  are flagged for ``oscillator_state``.
* ``steady_state_amplitude``: Eq. (64) in complex form. With W = C - iD the steady state is
  x_ss(s) = Re sum_m W_m e^{i varpi_m s} and W = (P - iQ) / (omega^2 - varpi^2 + 2i gamma varpi) (Cramer's rule
  of Eq. 64 is exactly this complex division).
* ``driven_state``: the driven key/value with a prescribed state at the anchor,
  x = x_ss + homogeneous(x(0) - x_ss(0), x'(0) - x_ss'(0))  (Eqs. 65-70 with the transient written through
  ``oscillator_state`` instead of the per-regime E, F / U, V coefficients of A.5.3-A.5.4).
* ``frequency_grid``: the collocation bank {omega_1..omega_J} of the query (Eq. 49) for the Table 9 grids.
* ``ridge_query_coef`` / ``ridge_query_fit``: the per-prefix ridge least-squares fit of the query modes (Eq. 48,
  A.4), causal by construction (prefix Gram matrices); the normal equations are solved through G_j^{-1} phi_l, so
  the data enter through one matrix product per batch row (the same least-squares solution, no per-token solve).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

TAYLOR_RADIUS = 0.1  # |D| below this uses the series; the next omitted term is < 0.1^7 / 14! ~ 1e-18
_C_SERIES = [(-1) ** n / math.factorial(2 * n) for n in range(7)]  # cos sqrt(D) = sum (-D)^n / (2n)!
_S_SERIES = [(-1) ** n / math.factorial(2 * n + 1) for n in range(7)]  # sin sqrt(D)/sqrt(D)
FREQ_GRIDS = ("log", "linear", "random", "geometric", "harmonic")


def _horner(d: Tensor, coeffs: list[float]) -> Tensor:
    out = torch.full_like(d, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        out = out * d + c
    return out


def damped_basis(t: Tensor, omega: Tensor, zeta: Tensor) -> tuple[Tensor, Tensor]:
    """(e^{-gamma t} C(D), e^{-gamma t} t S(D)) with gamma = zeta omega, D = omega^2 (1 - zeta^2) t^2.

    Broadcasting, elementwise; stable and differentiable for t >= 0 in every regime (Eq. 11, A.1.2, A.1.3)."""
    t, omega, zeta = torch.broadcast_tensors(t, omega, zeta)
    gt = zeta * omega * t  # gamma t
    d = omega.square() * (1 - zeta) * (1 + zeta) * t.square()  # D = (omega^2 - gamma^2) t^2, exact near zeta = 1
    under, over = d > TAYLOR_RADIUS, d < -TAYLOR_RADIUS
    root_u = torch.where(under, d, 1.0).sqrt()  # omega_d t (underdamped)
    root_o = torch.where(over, -d, 1.0).sqrt() * torch.where(over, t.sign(), 1.0)  # sigma t (overdamped)
    decay = torch.exp(-gt)
    c_u, s_u = decay * root_u.cos(), decay * t * root_u.sin() / root_u  # Eq. (11)
    e_p, e_m = torch.exp(root_o - gt), torch.exp(-root_o - gt)  # e^{-(gamma -+ sigma) t}: no cosh overflow
    c_o, s_o = 0.5 * (e_p + e_m), t * (e_p - e_m) / (2 * root_o)  # A.1.3
    c_t, s_t = decay * _horner(d, _C_SERIES), decay * t * _horner(d, _S_SERIES)  # near A.1.2 (D ~ 0)
    c = torch.where(under, c_u, torch.where(over, c_o, c_t))
    s = torch.where(under, s_u, torch.where(over, s_o, s_t))
    return c, s


def oscillator_state(t: Tensor, x0: Tensor, v0: Tensor, omega: Tensor, zeta: Tensor) -> tuple[Tensor, Tensor]:
    """(x(t), x'(t)) of x'' + 2 zeta omega x' + omega^2 x = 0, x(0) = x0, x'(0) = v0 (Eq. 2 homogeneous)."""
    c, s = damped_basis(t, omega, zeta)
    gamma = zeta * omega
    x = x0 * c + (v0 + gamma * x0) * s
    xdot = v0 * c - (omega.square() * x0 + gamma * v0) * s
    return x, xdot


def transient_modes(x0: Tensor, v0: Tensor, omega: Tensor, zeta: Tensor, crit_tol: float = 1e-2,
                    min_rate: float = 1e-3) -> tuple[Tensor, Tensor, Tensor]:
    """Exponential modes of the homogeneous solution: x(s) = sum_m a_m e^{r_m s}, x'(s) = sum_m r_m a_m e^{r_m s}.

    x0, v0 (..., d) broadcast with omega, zeta (..., d) -> roots r (..., 2d) and amplitudes a (..., 2d), complex,
    modes [+, -] along the last axis: r_pm = -gamma +- i mu, mu = sqrt(omega^2 - gamma^2) (real when underdamped,
    imaginary when overdamped), a_pm = x0 / 2 +- (v0 + gamma x0) / (2 i mu). Because e^{r (t_j - t_i)} =
    e^{r t_j} e^{-r t_i}, this makes pair sums over lags separable (matrix products). The 1/mu loses digits as
    mu -> 0, so channels with |1 - zeta^2| < crit_tol or |mu| < min_rate are flagged ``crit`` (..., d) and get
    a = 0 here (and a safe mu = 1); callers evaluate them with ``oscillator_state`` instead."""
    gamma = zeta * omega
    wd2 = omega.square() * (1 - zeta) * (1 + zeta)  # mu^2 = omega^2 - gamma^2
    crit = ((1 - zeta) * (1 + zeta)).abs().lt(crit_tol) | wd2.abs().lt(min_rate**2)
    wd2 = torch.where(crit, 1.0, wd2)
    root = wd2.abs().sqrt()
    mu = torch.complex(torch.where(wd2 > 0, root, 0.0), torch.where(wd2 > 0, 0.0, root))  # sqrt(wd2), complex
    k1 = (v0 + gamma * x0) / (2j * mu)  # (..., d)
    keep = (~crit).to(root.dtype)
    x_half = 0.5 * x0 * keep
    r = torch.cat([torch.complex(-gamma, torch.zeros_like(gamma)) + 1j * mu,
                   torch.complex(-gamma, torch.zeros_like(gamma)) - 1j * mu], dim=-1)  # (..., 2d)
    a = torch.cat([x_half + k1 * keep, x_half - k1 * keep], dim=-1)  # (..., 2d)
    return r, a, crit


def oscillator_response(t: Tensor, x0: Tensor, v0: Tensor, omega: Tensor, zeta: Tensor) -> Tensor:
    """x(t) solving x'' + 2 zeta omega x' + omega^2 x = 0 with x(0) = x0, x'(0) = v0; broadcasting, elementwise.

    One formula for the under-, critically and overdamped cases (App. A.1), stable and differentiable at and
    near zeta = 1 (see ``damped_basis``). Meant for t >= 0 (the fast path only evaluates lags t_j - t_i >= 0)."""
    return oscillator_state(t, x0, v0, omega, zeta)[0]


def steady_state_amplitude(p_amp: Tensor, q_amp: Tensor, varpi: Tensor, omega: Tensor, zeta: Tensor) -> Tensor:
    """Complex W = C - iD of the steady state of the drive P cos(varpi s) + Q sin(varpi s) (Eq. 64), broadcasting."""
    denom = torch.complex(omega.square() - varpi.square(), 2 * zeta * omega * varpi)  # conj of p(i varpi)
    return torch.complex(p_amp, -q_amp) * denom.reciprocal()  # reciprocal of the small (broadcast) denominator


def driven_state(s: Tensor, x_init: Tensor, v_init: Tensor, w: Tensor, varpi: Tensor, omega: Tensor,
                 zeta: Tensor) -> tuple[Tensor, Tensor]:
    """(x(s), x'(s)) of the driven oscillator with x(0) = x_init, x'(0) = v_init (Eqs. 65-70).

    w: (..., M) complex steady-state amplitudes (``steady_state_amplitude``) on frequencies varpi (..., M);
    s, x_init, v_init, omega, zeta broadcast against w[..., 0]. x = x_ss + transient, the transient being the
    homogeneous solution from the anchor state minus the steady state's."""
    rot = torch.polar(torch.ones_like(s[..., None] * varpi), s[..., None] * varpi)  # e^{i varpi s}  (..., M)
    x_ss, v_ss = (w * rot).real.sum(-1), (w * rot * 1j * varpi).real.sum(-1)
    x0 = x_init - w.real.sum(-1)  # x_ss(0) = Re sum W
    v0 = v_init - (w * 1j * varpi).real.sum(-1)  # x_ss'(0) = Re sum i varpi W
    xh, vh = oscillator_state(s, x0, v0, omega, zeta)
    return x_ss + xh, v_ss + vh


def frequency_grid(kind: str, n_modes: int, n_heads: int, f_range: tuple[float, float] = (1e-2, 1e1),
                   harmonic_span: float = 10.0) -> Tensor:
    """(H, J) float64 collocation frequencies for the Table 9 grid types.

    log: geometric spacing over f_range (the paper's default "Log-Uniform [1e-2, 1e1]"); linear: even spacing
    ("Linear [0.1, 10]" with f_range = (0.1, 10)); random: sorted U(f_range) draws per head (global torch RNG);
    geometric: sparse octaves f_max 2^{-(J-1)}, ..., f_max; harmonic: n pi / L, n = 1..J, L = harmonic_span."""
    lo, hi = f_range
    if kind == "log":
        grid = torch.logspace(math.log10(lo), math.log10(hi), n_modes, dtype=torch.float64)
    elif kind == "linear":
        grid = torch.linspace(lo, hi, n_modes, dtype=torch.float64)
    elif kind == "random":
        return (lo + (hi - lo) * torch.rand(n_heads, n_modes, dtype=torch.float64)).sort(-1).values
    elif kind == "geometric":
        grid = hi * 2.0 ** -torch.arange(n_modes - 1, -1, -1, dtype=torch.float64)
    elif kind == "harmonic":
        grid = torch.arange(1, n_modes + 1, dtype=torch.float64) * math.pi / harmonic_span
    else:
        raise ValueError(f"freq_grid={kind!r}; valid: {', '.join(FREQ_GRIDS)}")
    return grid.expand(n_heads, n_modes).clone()


def ridge_query_coef(times: Tensor, q: Tensor, lam: Tensor, ridge: float, max_elems: int = 2**24) -> Tensor:
    """Per-prefix ridge fit of q(t) = sum_k A_k cos(lam_k t) + B_k sin(lam_k t) (Eq. 48) to the query tokens.

    times (B, T), q (B, H, T, D), lam (H, J) -> coefficients (B, H, T, D, J, 2), last axis (A, B): row j is fitted
    on tokens 1..j only, min sum_{l <= j} ||Q_l - q(t_l)||^2 + ridge (||A||^2 + ||B||^2). With the basis phi_l
    (2J,) and the prefix Gram matrix G_j = sum_{l <= j} phi_l phi_l^T + ridge I, the solution is
    coef_j = sum_{l <= j} (G_j^{-1} phi_l) Q_l^T: one (T 2J, T) @ (T, D) matrix product per batch row instead of
    B H T tiny solves. G depends on times and lam only, so heads that share a fixed grid share it (G^{-1} is then
    computed once for them and the product runs over all their channels); rows are processed in blocks of at
    most ``max_elems`` entries of G^{-1} phi (memory bound O(T^2 J) per block)."""
    b, h, n, d = q.shape
    j = lam.shape[-1]
    shared = h > 1 and not lam.requires_grad and bool((lam == lam[:1]).all())
    lam_g = lam[:1] if shared else lam  # (G, J), G = 1 or H
    g = lam_g.shape[0]
    phase = times[:, None, :, None] * lam_g[None, :, None, :]  # (B, G, T, J)
    phi = torch.stack([phase.cos(), phase.sin()], -1).flatten(-2)  # (B, G, T, 2J): (cos_k, sin_k) pairs
    gram = (phi[..., :, None] * phi[..., None, :]).cumsum(2)  # (B, G, T, 2J, 2J) prefix sums
    ginv = torch.linalg.inv(gram + ridge * torch.eye(2 * j, dtype=phi.dtype, device=phi.device))
    qg = q.reshape(b, g, h // g, n, d).transpose(2, 3).reshape(b, g, n, (h // g) * d)  # (B, G, T, H/G D)
    step = max(1, max_elems // max(1, b * g * 2 * j * n))
    blocks = []
    for j0 in range(0, n, step):
        j1 = min(n, j0 + step)
        proj = ginv[:, :, j0:j1].flatten(2, 3) @ phi[:, :, :j1].mT  # (B, G, C 2J, j1): G_j^{-1} phi_l
        later = torch.arange(j1, device=q.device) > torch.arange(j0, j1, device=q.device)[:, None]  # l > j
        proj.masked_fill_(later.repeat_interleave(2 * j, 0), 0.0)  # causal: row j uses tokens l <= j
        blocks.append(proj @ qg[:, :, :j1])  # (B, G, C 2J, H/G D)
    coef = (blocks[0] if len(blocks) == 1 else torch.cat(blocks, 2)).view(b, g, n, j, 2, h // g, d)
    return coef.permute(0, 1, 5, 2, 6, 3, 4).contiguous().view(b, h, n, d, j, 2)  # (B, H, T, D, J, 2)


def ridge_query_fit(times: Tensor, q: Tensor, lam: Tensor, ridge: float) -> tuple[Tensor, Tensor]:
    """(A, B), each (B, H, T, J, D): ``ridge_query_coef`` in the paper's layout (row j fitted on tokens 1..j)."""
    coef = ridge_query_coef(times, q, lam, ridge)  # (B, H, T, D, J, 2)
    return coef[..., 0].transpose(-1, -2), coef[..., 1].transpose(-1, -2)


def query_eval(a: Tensor, b: Tensor, lam: Tensor, tau: Tensor) -> Tensor:
    """q(tau) = sum_k a_k cos(lam_k tau) + b_k sin(lam_k tau): a, b (..., J, D), lam (..., J), tau (...) -> (..., D)."""
    phase = (tau[..., None] * lam)[..., None]  # (..., J, 1)
    return (a * phase.cos() + b * phase.sin()).sum(-2)


def gauss_legendre(n: int, dtype: torch.dtype = torch.float64, device: torch.device | None = None
                   ) -> tuple[Tensor, Tensor]:
    """n Gauss-Legendre nodes on [0, 1] and weights summing to 1 (the rule for an interval average)."""
    x, w = np.polynomial.legendre.leggauss(n)
    return (torch.tensor((x + 1) / 2, dtype=dtype, device=device),
            torch.tensor(w / 2, dtype=dtype, device=device))
