"""OsciFormer's pairs outside the closed form (osciformer Eq. 78): ties and tiny lags, found among all causal pairs
and given their logits pair by pair, for ``osciformer_core.causal_core`` to use instead of num / Delta.

* Delta = 0 (ties, e.g. padding): alpha = <q_j(t_j), K_i> exactly (Eq. 78, second line).
* 0 < Delta * rho < ``small_lag``: the closed form's (F(0) - F(Delta)) / Delta loses digits (``osciformer.py``),
  so alpha is the ``n_gauss``-point Gauss-Legendre average of <q_j(tau), k_i(tau)> over [t_i, t_j], with the
  query from its ridge coefficients and the key from its closed-form trajectory (``oscillator_state`` plus the
  steady state). Such pairs sit next to the diagonal, so they are few.
"""

from __future__ import annotations

import torch
from torch import Tensor

from oscrepro.attention.osciformer_core import pair_classes
from oscrepro.attention.oscillator_kernels import gauss_legendre, oscillator_state


def special_pairs(
    tt: Tensor,
    rho: float,
    small_lag: float,
    n_gauss: int,
    q_now: Tensor,
    e: Tensor,
    coef: Tensor,
    x0: Tensor,
    v0: Tensor,
    lam: Tensor,
    key: dict,
) -> tuple[Tensor, Tensor]:
    """The pairs that leave the closed form (``pair_classes``) as (3, P) indices (batch, query, key), ties first,
    and their logits (P, H). tt (B, T); q_now (B, H, T, d_h) = q_j(t_j); e, x0, v0 (B, H, T, d_h) the key
    projections and transient anchor states; coef (B, H, T, J, d_h, 2) the query's (A, B); key the constants of
    ``osciformer_response.oscillator_constants``."""
    b, n = tt.shape
    ties, smalls = [], []
    rows = max(1, 2**20 // (b * n))  # (B, rows, T) masks at a time
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        delta = tt[:, r0:r1, None] - tt[:, None, :r1]  # (B, C, K)
        allowed = torch.arange(r1, device=tt.device) <= torch.arange(r0, r1, device=tt.device)[:, None]
        for out, mask in zip((ties, smalls), pair_classes(delta, allowed, rho, small_lag), strict=True):
            bi, jj, ii = mask.nonzero(as_tuple=True)
            out.append(torch.stack([bi, jj + r0, ii]))
    tie, small = torch.cat(ties, 1), torch.cat(smalls, 1)  # (3, P_tie), (3, P_small)
    alpha = [(q_now[tie[0], :, tie[1]] * e[tie[0], :, tie[2]]).sum(-1)]  # (P_tie, H): <q_j(t_j), K_i>
    if small.shape[1]:
        alpha.append(small_lag_logits(small, tt, lam, key, coef, x0, v0, e, n_gauss))  # (P_small, H)
    return torch.cat([tie, small], 1), torch.cat(alpha)


def small_lag_logits(
    pairs: Tensor, tt: Tensor, lam: Tensor, key: dict, coef: Tensor, x0: Tensor, v0: Tensor, e: Tensor, n_gauss: int
) -> Tensor:
    """alpha (P, H) of the pairs (3, P) by ``n_gauss``-point Gauss-Legendre over the closed-form trajectories."""
    bi, jj, ii = pairs
    nodes, wts = gauss_legendre(n_gauss, tt.dtype, tt.device)  # (G,)
    s = (tt[bi, jj] - tt[bi, ii])[:, None] * nodes  # (P, G) lags of the nodes
    theta = (tt[bi, ii][:, None] + s)[:, None, :, None] * lam[None, :, None]  # (P, H, G, J): lam_k tau
    ab = coef[bi, :, jj]  # (P, H, J, d_h, 2)
    qv = torch.einsum("phgk,phkc->phgc", theta.cos(), ab[..., 0])
    qv = qv + torch.einsum("phgk,phkc->phgc", theta.sin(), ab[..., 1])  # (P, H, G, d_h): q_j(tau)
    om, ze = key["omega"][:, None], key["zeta"][:, None]  # (H, 1, d_h)
    kv, _ = oscillator_state(s[:, None, :, None], x0[bi, :, ii][:, :, None], v0[bi, :, ii][:, :, None], om, ze)
    if key["w_u"] is not None:  # + Re sum_m u_i G_m e^{i lam_m s}
        u = torch.einsum("hcd,phd->phc", key["w_u"], e[bi, :, ii].to(key["w_u"].dtype))  # (P, H, d_h)
        phase = s[:, None, :, None] * lam[None, :, None]  # (P, H, G, J)
        ss = torch.einsum("phgm,hmc->phgc", torch.polar(torch.ones_like(phase), phase), key["g"])
        kv = kv + (ss * u[:, :, None]).real
    return ((qv * kv).sum(-1) * wts).sum(-1)  # (P, H)
