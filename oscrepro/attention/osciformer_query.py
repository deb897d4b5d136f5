"""OsciFormer's query side (osciformer Eq. 48, App. A.4; the drive terms of Eqs. 58-64): the per-prefix ridge fit
by prefix sums, and the per-token query factors of the closed-form logit as one small matrix per token.

What: query j is q_j(tau) = sum_k A_jk cos(lam_k tau) + B_jk sin(lam_k tau), ridge-fitted to Q_1..Q_j (Eq. 48):
with phi_l = (cos lam_k t_l, sin lam_k t_l)_k (2J,), the prefix moments S_j = sum_{l <= j} phi_l Q_l^T (2J, D)
and the prefix Gram matrix G_j = sum_{l <= j} phi_l phi_l^T + ridge I,

    (A_j, B_j) = G_j^{-1} S_j          (prefix sums: O(T J^2 D) instead of O(T^2 J D))

Every query factor of the logit is linear in (A_j, B_j) with a (2J, 2J) map that depends only on t_j and the
grid, so all of them are one product (maps_j G_j^{-1}) S_j per token, shared by the heads of a common grid.
With z = A - iB (so q_j(tau) = Re sum_k z_k e^{i lam_k tau}):

* zeta_jk = z_jk e^{i lam_k t_j}: the query at its own time, q_j(t_j) = Re sum_k zeta_jk, and the query side of
  the transient terms (pq, rq in ``osciformer.py``).
* conj Qd_jm (driven keys only): the query side of the steady-state drive terms that pair with the key factor
  conj X_im = conj(u_i G_m) e^{i lam_m t_i} (Eqs. 58-64 re-derived). With M+_mk = 1 / (lam_k + lam_m),
  M-_mk = 1 / (lam_k - lam_m) (0 for k = m) and s_j = t_j - t_1,

      conj Qd_jm = -(i/2) e^{i lam_m t_j} sum_k (M+_mk zeta_jk - M-_mk conj zeta_jk) + (s_j / 2) conj z_jm,

  the two oscillating products (lam_k +- lam_m) and the secular k = m term's query half (Delta = s_j - s_i).
Real layout: each complex factor is stored as (Re, Im) and paired with a key factor (Re, Im) so that the real
dot product is the real part the logit needs.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _drive_map(cos: Tensor, sin: Tensor, s: Tensor, lam: Tensor) -> Tensor:
    """(B, G, T, 2J, 2J) real map (A, B) -> (Re, Im) conj Qd_j (module doc), rows (m, part), columns (k, part).

    cos, sin (B, G, T, J) of lam_k t_j; s (B, 1, T) = t_j - t_1; lam (G, J)."""
    eye = torch.eye(lam.shape[-1], dtype=torch.bool, device=lam.device)
    m_pl = 0.5 / (lam[:, :, None] + lam[:, None, :])  # (G, J_m, J_k): M+ / 2
    m_mi = torch.where(eye, 0.0, 0.5 / torch.where(eye, 1.0, lam[:, None, :] - lam[:, :, None]))  # M- / 2
    cm, sm, ck, sk = cos[..., :, None], sin[..., :, None], cos[..., None, :], sin[..., None, :]  # (B, G, T, J, J)
    # alpha_mk = -(i/2) M+ e^{i (lam_m + lam_k) t}, beta_mk = (i/2) M- e^{i (lam_m - lam_k) t} + (s/2) delta_mk;
    # conj Qd_m = sum_k alpha_mk z_k + beta_mk conj z_k = sum_k (alpha + beta)_mk A_k + i (beta - alpha)_mk B_k
    re_a, im_a = m_pl[:, None] * (sm * ck + cm * sk), -m_pl[:, None] * (cm * ck - sm * sk)  # (B, G, T, J, J)
    re_b, im_b = -m_mi[:, None] * (sm * ck - cm * sk), m_mi[:, None] * (cm * ck + sm * sk)
    re_b = re_b + torch.diag_embed(0.5 * s[..., None].expand_as(cos))  # the secular half (s_j / 2) conj z_j
    rows = [torch.stack([re_a + re_b, im_a - im_b], -1), torch.stack([im_a + im_b, re_b - re_a], -1)]
    return torch.stack(rows, -3).flatten(-4, -3).flatten(-2)  # (B, G, T, J, 2, J, 2) -> (B, G, T, 2J, 2J)


def _zeta_map(cos: Tensor, sin: Tensor) -> Tensor:
    """(B, G, T, 2J, 2J) block-diagonal map (A, B) -> (Re, Im) zeta_j = (A - iB) e^{i lam t_j}, per mode
    [[cos, sin], [sin, -cos]]."""
    block = torch.stack([torch.stack([cos, sin], -1), torch.stack([sin, -cos], -1)], -2)  # (B, G, T, J, 2, 2)
    full = torch.diag_embed(block.movedim(-3, -1))  # (B, G, T, 2, 2, J, J): [p, p', k, k']
    return full.permute(0, 1, 2, 5, 3, 6, 4).flatten(-4, -3).flatten(-2)


def query_factors(
    times: Tensor, q: Tensor, lam: Tensor, ridge: float, driven: bool
) -> tuple[Tensor, Tensor | None, Tensor]:
    """Ridge fit (Eq. 48, row j on tokens 1..j) and the query factors, per token and head.

    times (B, T), q (B, H, T, D), lam (H, J) -> (coef (B, H, T, J, D, 2) = (A, B), conj Qd (B, H, T, J, D, 2)
    as (Re, Im) or None when not driven, zeta (B, H, T, D, J, 2)) (module doc). Heads that share a fixed grid
    share the Gram matrices and the maps (one (2J, D H) product per token)."""
    b, h, n, d = q.shape
    j = lam.shape[-1]
    shared = h > 1 and not lam.requires_grad and bool((lam == lam[:1]).all())
    lam_g = lam[:1] if shared else lam  # (G, J), G = 1 or H
    g = lam_g.shape[0]
    theta = times[:, None, :, None] * lam_g[None, :, None, :]  # (B, G, T, J): lam_k t
    cos, sin = theta.cos(), theta.sin()
    phi = torch.stack([cos, sin], -1).flatten(-2).mT  # (B, G, 2J, T): (cos_k, sin_k) pairs
    # prefix sums over tokens, along the last (contiguous) axis, where cumsum is fast
    gram = (phi[:, :, :, None] * phi[:, :, None]).cumsum(-1).permute(0, 1, 4, 2, 3)  # (B, G, T, 2J, 2J)
    ginv = torch.linalg.inv(gram + ridge * torch.eye(2 * j, dtype=phi.dtype, device=phi.device))
    qg = q.reshape(b, g, h // g, n, d).permute(0, 1, 2, 4, 3).reshape(b, g, 1, h // g * d, n)  # (B, G, 1, H/G D, T)
    moments = (phi[:, :, :, None] * qg).cumsum(-1).permute(0, 1, 4, 2, 3).contiguous()  # (B, G, T, 2J, H/G D): S_j
    coef = ginv @ moments  # (B, G, T, 2J, H/G D): (A_k, B_k) pairs, Eq. (48)
    # every other factor from these same coefficients: the closed form cancels F(0) (from (A, B)) against F(Delta)
    # (from zeta), and the drive terms of (A, B) against those of Qd, at magnitudes far above the result
    maps = [_drive_map(cos, sin, (times - times[:, :1])[:, None], lam_g)] if driven else []
    rest = torch.cat(maps + [_zeta_map(cos, sin)], -2) @ coef  # (B, G, T, (O - 1) 2J + 2J, H/G D)

    def per_head(z: Tensor, order: tuple[int, ...]) -> Tensor:  # (B, G, T, 2J, H/G D) -> (B, H, T, ...)
        z = z.view(b, g, n, j, 2, h // g, d).permute(0, 1, 5, 2, *order)  # (B, G, H/G, T, ...)
        return z.reshape(b, h, n, *z.shape[4:])

    zeta = per_head(rest[:, :, :, -2 * j :], (6, 3, 4))  # (B, H, T, D, J, 2)
    qd = per_head(rest[:, :, :, : 2 * j], (3, 6, 4)) if driven else None  # (B, H, T, J, D, 2)
    return per_head(coef, (3, 6, 4)), qd, zeta
