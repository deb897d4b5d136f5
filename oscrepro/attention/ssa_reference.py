"""Plain dense reference for Selective Synchronization Attention (ssa paper, Eqs. 4-13, Algorithm 1).

Every quantity is materialized as a full (B, H, N, N) tensor and differentiated by autograd, exactly as
the formulas read. This module is the ground truth for the chunked fast path in ``ssa.py`` (tests compare
outputs and gradients) and is the ``need_weights=True`` path, so analyses (Fig. 4, Thm. 2) read the
mechanism's own internals. It is O(N^2) in memory: use it for analysis and tests, not for training.

Formulas (per batch element b and head h; d = D/H):
    Delta_ij^2 = ||omega_i - omega_j||^2                                   (Eq. 7, squared)
    J_ij       = exp(-alpha_h * Delta_ij^2),  alpha_h = softplus(alpha_hat_h)         (Eq. 6)
    r          = (1/d) sum_l |(1/N) sum_j exp(i theta_j^(l))|               (Eq. 11)
    tau_ij     = K * r * J_ij,  K = softplus(K_hat)                         (Eq. 8 threshold)
    S_ij       = J_ij * sqrt(clamp(1 - Delta_ij^2 / (tau_ij + eps)^2, sync_eps))  if Delta_ij <= tau_ij + eps
               = 0                                                          otherwise  (Eqs. 10, 12)
    y_i        = sum_j S_ij v_j / (sum_j S_ij + eps)                        (Eq. 13)

Choices where the paper is silent or ambiguous (also stated in ``ssa.py``):
  * cos(arcsin(u)) is written sqrt(clamp(1 - u^2, sync_eps)) and u^2 = Delta^2/(tau+eps)^2, so neither the
    arcsin nor sqrt(Delta^2) is differentiated: gradients stay finite on the diagonal (Delta = 0) and at
    the locking boundary (u = 1), where the authors' code (asin, clamp to 1 - 1e-8 in float32) gives inf/NaN.
  * The locking test is u^2 <= 1, i.e. Delta <= K r J + eps, as in the authors' code (Eq. 8 up to eps):
    unlike Delta^2 <= (K r J)^2 it never squares a tiny threshold (float32 denormals are ~5x slower on CPU).
  * Causal variant: S_ij = 0 for j > i AND the order parameter of query row i is the prefix order
    parameter over tokens j <= i, so nothing computed for row i depends on a future token.
"""

from __future__ import annotations

import torch
from torch import Tensor

Aux = dict[str, Tensor]


def order_parameter(theta: Tensor, causal: bool = False) -> Tensor:
    """Empirical Kuramoto order parameter r of Eq. (11), averaged over the d phase dimensions.

    theta: (B, H, N, d) phases. Returns (B, H, 1) (one r per head, broadcast over query rows) or, when
    ``causal``, (B, H, N) with row i the prefix order parameter of tokens 1..i (no future leakage).
    |z| is computed as sqrt(max(|z|^2, 1e-12)) so its gradient is finite even for a perfectly incoherent set.
    """
    c, s = theta.cos(), theta.sin()  # (B, H, N, d)
    if causal:
        count = torch.arange(1, theta.shape[-2] + 1, device=theta.device, dtype=theta.dtype)[:, None]
        c_mean, s_mean = c.cumsum(-2) / count, s.cumsum(-2) / count  # (B, H, N, d) prefix means
    else:
        c_mean, s_mean = c.mean(-2, keepdim=True), s.mean(-2, keepdim=True)  # (B, H, 1, d)
    modulus = (c_mean.square() + s_mean.square()).clamp_min(1e-12).sqrt()  # |<e^{i theta}>| per dimension
    return modulus.mean(-1)  # (B, H, N) or (B, H, 1)


def pairwise_sq_dist(omega: Tensor) -> Tensor:
    """Exact ||omega_i - omega_j||^2 (Eq. 7 squared) without the matmul expansion: (B, H, N, d) -> (B, H, N, N)."""
    return torch.cdist(omega, omega, compute_mode="donot_use_mm_for_euclid_dist").square()


def keep_top_k(s: Tensor, top_k: int | None) -> Tensor:
    """Algorithm 1 lines 21-23: keep the k largest entries of each row, zero the rest (no-op if k >= N)."""
    if top_k is None or top_k >= s.shape[-1]:
        return s
    vals, idx = s.topk(top_k, dim=-1)  # (B, H, N, k)
    return torch.zeros_like(s).scatter(-1, idx, vals)


def sync_matrix(
    d2: Tensor,
    r: Tensor,
    alpha: Tensor,
    coupling: Tensor,
    *,
    causal: bool = False,
    top_k: int | None = None,
    eps: float = 1e-8,
    sync_eps: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """Closed-form steady-state synchronization matrix S (Eqs. 6, 8, 10, 12) and coupling J.

    d2: (B, H, N, N) squared frequency mismatch; r: broadcastable to (B, H, N) (per query row);
    alpha: (H,) positive bandwidths; coupling: scalar K > 0. Returns S (after causal mask and top-k,
    before row normalization) and J, both (B, H, N, N).
    """
    j = torch.exp(-alpha.view(1, -1, 1, 1) * d2)  # Eq. (6)
    tau = coupling * r.unsqueeze(-1) * j  # Eq. (8): K r J_ij, r broadcast over keys
    u2 = d2 / (tau + eps).square()  # (Delta / (K r J + eps))^2, Eq. (12)
    s = j * (1.0 - u2).clamp_min(sync_eps).sqrt()  # Eq. (10): J cos(arcsin u)
    locked = u2 <= 1.0  # phase-locking condition Delta <= K r J + eps (Eq. 8; eps as in the authors' code)
    if causal:
        n = d2.shape[-1]
        locked = locked & torch.ones(n, n, dtype=torch.bool, device=d2.device).tril()
    s = torch.where(locked, s, torch.zeros_like(s))
    return keep_top_k(s, top_k), j


def ssa_reference(
    omega: Tensor,
    theta: Tensor,
    v: Tensor,
    alpha: Tensor,
    coupling: Tensor,
    *,
    causal: bool = False,
    top_k: int | None = None,
    eps: float = 1e-8,
    sync_eps: float = 1e-6,
) -> tuple[Tensor, Aux]:
    """Dense SSA per head (Algorithm 1 lines 7-26, before W_O).

    omega, theta, v: (B, H, N, d). alpha: (H,) = softplus(alpha_hat); coupling: K = softplus(K_hat).
    Returns y (B, H, N, d) and aux with ``weights`` (normalized S), ``sync`` (S), ``coupling`` (J),
    ``order`` (r, (B, H, 1) or causal (B, H, N)) and ``freq`` (omega).
    """
    r = order_parameter(theta, causal)  # (B, H, 1) or (B, H, N)
    d2 = pairwise_sq_dist(omega)  # (B, H, N, N)
    s, j = sync_matrix(d2, r, alpha, coupling, causal=causal, top_k=top_k, eps=eps, sync_eps=sync_eps)
    weights = s / (s.sum(-1, keepdim=True) + eps)  # Eq. (13) row normalization
    y = weights @ v  # (B, H, N, d)
    return y, {"weights": weights, "sync": s, "coupling": j, "order": r, "freq": omega}
