"""OsciFormer's per-head oscillator constants (osciformer Sec. 6, App. A.5, App. E; Eqs. 2, 58-64): everything
the closed form needs from the parameters alone, built once per forward and shared by every token.

What: for the key or value oscillators of each head and channel (omega, zeta, gamma = zeta omega) with drive
u_i = W_u E_i and steady-state response G_m (Eq. 64 in complex form, ``steady_state_amplitude``), the transient
anchor state of token i is (x0, v0) = (P_x E_i, P_v E_i) with

    P_x = I - Re(diag(sum_m G_m) W_u),  P_v = U - Re(diag(sum_m i lam_m G_m) W_u)     (x(t_i) = E_i, x'(t_i) = U E_i)

(Sec. 6; minus the steady state at s = 0). Every per-token key factor is then one linear map of (E_i, s_i E_i)
(s_i = t_i - t_1) followed by the phase e^{i lam t_i}; ``key_projection`` builds that map, so the per-token key
work is one small matrix product per head instead of complex elementwise passes over (B, H, T, J, d_h).

The F(0) key factor of Eq. (78) (``osciformer.py``): integrating the homogeneous ODE against e^{i lam s} gives
int_0^Delta e^{i lam s} x(s) ds = (F(0) - F(Delta)) / p, F(s) = e^{i lam s}(x'(s) + (2 gamma - i lam) x(s)),
p = omega^2 - lam^2 - 2 i gamma lam; with the constant parts of the drive integrals (S+, S-: one over
lam_k + lam_m, one over lam_k - lam_m) and the key half of the secular term, K_ik = e^{i lam_k t_i} kappa_ik,

    kappa_k = v0 / p_k + x0 (2 gamma - i lam_k) / p_k + S+_k u + S-_k conj(u) - (s_i / 2) conj(G_k u),
    S+_k = (i/2) sum_m G_m / (lam_k + lam_m),  S-_k = (i/2) sum_{m != k} conj(G_m) / (lam_k - lam_m),

and the steady-state drive factor is conj(X_im) = e^{i lam_m t_i} conj(G_m u_i).
"""

from __future__ import annotations

import torch
from torch import Tensor

from oscrepro.attention.oscillator_kernels import steady_state_amplitude


def _real_map(m: Tensor) -> Tensor:
    """(H, J, d, d') complex row-scaled maps -> (H, d', J d 2) real matrix acting on E (d',) from the right,
    outputs ordered (mode, channel, Re|Im)."""
    h, j, d, d_in = m.shape
    return torch.view_as_real(m).permute(0, 3, 1, 2, 4).reshape(h, d_in, j * d * 2)


def oscillator_constants(
    omega: Tensor,
    zeta: Tensor,
    velocity: Tensor,
    drive: str,
    drive_cos: Tensor | None,
    drive_sin: Tensor | None,
    lam: Tensor,
) -> dict[str, Tensor | None]:
    """omega, zeta (H, d), U (H, d, d), the drive parameters, grid lam (H, J) -> constants of one role:
    omega, zeta, gamma, mu2 = omega^2 - gamma^2 (H, d); w_u (H, d, d) and g (H, J, d) complex (None when
    undriven); p_x, p_v (H, d, d) (module doc)."""
    h, d = omega.shape
    gamma = omega * zeta
    eye = torch.eye(d, dtype=omega.dtype, device=omega.device)
    out: dict[str, Tensor | None] = {
        "omega": omega,
        "zeta": zeta,
        "gamma": gamma,
        "w_u": None,
        "g": None,
        "mu2": omega.square() * (1 - zeta) * (1 + zeta),
        "p_x": eye.expand(h, d, d),
        "p_v": velocity,
    }
    if drive == "none":
        return out
    lam3, om3, ze3 = lam[:, :, None], omega[:, None], zeta[:, None]  # (H, J, 1), (H, 1, d)
    if drive == "matrix":  # P_im = A_h E_i, Q_im = B_h E_i for every m: u = (A - iB) E, G = 1 / conj(p)
        w_u = torch.complex(drive_cos, -drive_sin)  # (H, d, d)
        g = steady_state_amplitude(torch.ones_like(om3), torch.zeros_like(om3), lam3, om3, ze3)  # (H, J, d)
    else:  # P_im = g_m E_i, Q_im = h_m E_i: u = E, G = (g - ih) / conj(p)
        w_u = torch.complex(eye, torch.zeros_like(eye)).expand(h, d, d)
        g = steady_state_amplitude(drive_cos, drive_sin, lam3, om3, ze3)  # (H, J, d)
    out["p_x"] = eye - (g.sum(1)[..., None] * w_u).real  # x_ss(0) = Re sum_m W_m
    out["p_v"] = velocity - ((1j * lam3 * g).sum(1)[..., None] * w_u).real  # x_ss'(0) = Re sum_m i lam_m W_m
    out["w_u"], out["g"] = w_u, g
    return out


def key_projection(c: dict, lam: Tensor) -> tuple[Tensor, Tensor]:
    """Per-head maps of the key factors (module doc).

    -> (proj (H, d, O J d 2 + 2 d), qcoef (H, d, 2J, 3)). proj maps E_i to [kappa_i without its secular
    term, conj(G u_i) (when driven; the secular term is -(s_i / 2) times it) as (mode, channel, Re|Im), x0_i, v0_i];
    qcoef maps zeta_j (Re, Im) to (pq_j, rq_j, q_j(t_j)): pq = Re sum_k zeta_k / p_k and
    rq = Re sum_k zeta_k (2 gamma - i lam_k) / p_k, the query sides of -F(Delta) = -(pq x'(Delta) + rq x(Delta))."""
    om, ga, lam3 = c["omega"][:, None], c["gamma"][:, None], lam[:, :, None]  # (H, 1, d), (H, J, 1)
    inv_p = torch.complex(om.square() - lam3.square(), -2 * ga * lam3).reciprocal()  # 1 / p  (H, J, d)
    beta = torch.complex(2 * ga.expand_as(inv_p.real), -lam3.expand_as(inv_p.real)) * inv_p  # (2 gamma - i lam) / p
    m1 = inv_p[..., None] * c["p_v"][:, None] + beta[..., None] * c["p_x"][:, None]  # (H, J, d, d): kappa from E
    cols = [c["p_x"].mT, c["p_v"].mT]  # x0, v0
    if c["w_u"] is None:
        proj = torch.cat([_real_map(m1), *cols], -1)  # (H, d, J d 2 + 2d)
    else:
        g, w_u = c["g"], c["w_u"][:, None]  # (H, J, d), (H, 1, d, d)
        eye = torch.eye(lam.shape[-1], dtype=torch.bool, device=lam.device)
        m_pl = 1 / (lam[:, :, None] + lam[:, None, :])  # (H, J_k, J_m)
        m_mi = torch.where(eye, 0.0, 1 / torch.where(eye, 1.0, lam[:, :, None] - lam[:, None, :]))  # 1/(lam_k-lam_m)
        s_pl = 0.5j * (m_pl.to(g.dtype) @ g)  # (H, J_k, d): S+
        s_mi = 0.5j * (m_mi.to(g.dtype) @ g.conj())  # S-
        m1 = m1 + s_pl[..., None] * w_u + s_mi[..., None] * w_u.conj()
        m3 = g.conj()[..., None] * w_u.conj()  # conj(G_m u) from E
        proj = torch.cat([_real_map(m1), _real_map(m3), *cols], -1)  # (H, d, 2 J d 2 + 2d)
    # Re(a b) = <(a_r, a_i), (b_r, -b_i)>; q(t_j) = sum_k Re zeta_k
    coefs = [torch.view_as_real(c) * c.real.new_tensor([1.0, -1.0]) for c in (inv_p, beta)]
    coefs.append(torch.stack([torch.ones_like(inv_p.real), torch.zeros_like(inv_p.real)], -1))
    qcoef = torch.stack(coefs, -1).transpose(1, 2).flatten(2, 3)  # (H, d, 2J, 3)
    return proj, qcoef


def value_projection(c: dict) -> Tensor:
    """(H, d, 2d [+ d J 2]) map of V_i to [x0_i, v0_i] and, when driven, G_m u_i as (channel, mode, Re|Im): the
    value steady state at t_j is Re sum_m e^{i lam_m t_j} sum_i w_ji G_m u_i e^{-i lam_m t_i}."""
    cols = [c["p_x"].mT, c["p_v"].mT]
    if c["w_u"] is not None:
        gu = c["g"].mT[..., None] * c["w_u"][:, :, None]  # (H, d, J, d'): G_mc W_u[c, d']
        cols.append(torch.view_as_real(gu).permute(0, 3, 1, 2, 4).flatten(2))  # (H, d', d J 2)
    return torch.cat(cols, -1)
