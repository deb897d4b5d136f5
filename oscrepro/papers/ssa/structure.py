"""Structural analyses of SSA at initialization (ssa paper Sec. IV.3, Figs. 4-5) and Theorem 2 (natural sparsity).

* ``sync_heads_at_init``: the 8 synchronization matrices S^(h) of one randomly initialized OSN block (Fig. 4),
  read through ``need_weights=True`` (the mechanism's own internals), with per-head statistics.
* ``order_parameter_samples`` / ``predicted_order_parameter``: the empirical order parameter r (Eq. 11) over
  random inputs (Fig. 5), and the closed form that explains its value. After the block's LayerNorm a random
  token x is ~N(0, I_D), so phase l is theta_l = w_l . x + b_l ~ N(b_l, |w_l|^2) and, for large N,
  |<e^{i theta_l}>| -> exp(-|w_l|^2 / 2). PyTorch's default nn.Linear init (Kaiming-uniform, a = sqrt(5)) has
  w ~ U(-1/sqrt(D), 1/sqrt(D)), |w_l|^2 ~ D * 1/(3D) = 1/3, hence r ~ exp(-1/6) = 0.8465: the paper's r ~ 0.847.
  The std = 0.02 init the paper names gives |w_l|^2 = 512 * 4e-4 = 0.2048 and r ~ exp(-0.1024) = 0.903 instead.
* ``thm2_*``: Theorem 2 (Eq. 17) vs Monte Carlo over uniform frequencies on [-Omega, Omega]. The exact
  probability that an i.i.d. pair locks with threshold delta = K r J is P(|w_i - w_j| <= delta)
  = delta/Omega - delta^2/(4 Omega^2) (Appendix A.2 derives this before its last line); the theorem's stated
  2 delta/Omega - (delta/Omega)^2 is the same formula for a support of length Omega, i.e. twice too large.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from oscrepro.attention.base import split_heads
from oscrepro.attention.softmax import SoftmaxAttention
from oscrepro.attention.ssa_reference import order_parameter, sync_matrix
from oscrepro.models.block import TransformerBlock
from oscrepro.papers.ssa.osn import OSNBlock


@torch.no_grad()
def sync_heads_at_init(d_model: int = 512, n_heads: int = 8, seq_len: int = 512, seed: int = 0,
                       init_std: float | None = None, input_std: float | None = None) -> dict[str, Tensor]:
    """S^(h) of one randomly initialized OSN block on one random input (Fig. 4), plus per-head statistics.

    input_std None: x ~ N(0, I) through the block's LayerNorm (the block as specified, Eq. 15);
    a float: SSA applied directly to x ~ N(0, input_std^2 I) (no LayerNorm), e.g. 0.02 = embedding scale.
    Returns ``sync`` (H, N, N), ``coupling`` J (H, N, N), ``order`` r (H,), and per-head (H,) statistics:
    ``diag_mean`` (paper: S_ii = 1), ``offdiag_nonzero`` (fraction of locked off-diagonal pairs),
    ``offdiag_mean_j`` (mean off-diagonal coupling), ``mean_delta`` (mean off-diagonal ||w_i - w_j||) and the
    softmax block's ``softmax_max_dev`` = max_ij |A_ij - 1/N| * N at the same init and input.
    """
    torch.manual_seed(seed)
    osn = OSNBlock(d_model, n_heads, init_std=init_std)
    tf = TransformerBlock(d_model, n_heads, 4 * d_model, attention=SoftmaxAttention)
    x = torch.randn(1, seq_len, d_model, generator=torch.Generator().manual_seed(seed + 1))  # (1, N, D)
    if input_std is None:
        h_osn, h_tf = osn.ln1(x), tf.ln1(x)
    else:
        h_osn = h_tf = x * input_std
    _, aux = osn.attn(h_osn, need_weights=True)
    _, aux_tf = tf.attn(h_tf, need_weights=True)
    s, j = aux["sync"][0], aux["coupling"][0]  # (H, N, N)
    off = ~torch.eye(seq_len, dtype=torch.bool)
    delta = torch.cdist(aux["freq"][0], aux["freq"][0])  # (H, N, N)
    return {
        "sync": s, "coupling": j, "order": aux["order"][0, :, 0],
        "diag_mean": s.diagonal(dim1=-2, dim2=-1).mean(-1),
        "offdiag_nonzero": (s[:, off] > 0).float().mean(-1),
        "offdiag_mean_j": j[:, off].mean(-1),
        "mean_delta": delta[:, off].mean(-1),
        "softmax_max_dev": (aux_tf["weights"][0] - 1.0 / seq_len).abs().amax((-2, -1)) * seq_len,
    }


@torch.no_grad()
def order_parameter_samples(n_samples: int = 100, seq_len: int = 256, d_model: int = 512, n_heads: int = 8,
                            seed: int = 0, init_std: float | None = None) -> Tensor:
    """r (Eq. 11) of every head for ``n_samples`` random inputs to one randomly initialized OSN block (Fig. 5).

    Inputs x ~ N(0, I) of shape (n_samples, N, D) pass the block's LayerNorm and W_theta; r is computed by
    the mechanism's own ``order_parameter`` (no N x N matrices needed). Returns (n_samples, H).
    """
    torch.manual_seed(seed)
    block = OSNBlock(d_model, n_heads, init_std=init_std)
    x = torch.randn(n_samples, seq_len, d_model, generator=torch.Generator().manual_seed(seed + 1))
    theta = split_heads(block.attn.w_theta(block.ln1(x)), n_heads)  # (n_samples, H, N, d), Eq. (5)
    return order_parameter(theta)[..., 0]  # (n_samples, H)


@torch.no_grad()
def predicted_order_parameter(d_model: int = 512, n_heads: int = 8, seed: int = 0,
                              init_std: float | None = None) -> Tensor:
    """Large-N prediction r_h = (1/d) sum_l exp(-|w_l|^2 / 2) for the same block as ``order_parameter_samples``.

    Uses the actual W_theta rows of head h (LayerNorm output ~ N(0, I); the bias only rotates the mean phase).
    """
    torch.manual_seed(seed)
    w = OSNBlock(d_model, n_heads, init_std=init_std).attn.w_theta.weight  # (D, D), rows = phase dimensions
    return torch.exp(-w.square().sum(-1) / 2).view(n_heads, -1).mean(-1)  # (H,)


def thm2_exact(delta_over_omega: float) -> float:
    """P(|w_i - w_j| <= delta) for w i.i.d. U[-Omega, Omega]: delta/Omega - (delta/Omega)^2 / 4 (App. A.2)."""
    x = min(delta_over_omega, 2.0)
    return x - x * x / 4


def thm2_stated(delta_over_omega: float) -> float:
    """Eq. (17) as stated (leading terms): 2 KrJ/Omega - (KrJ/Omega)^2."""
    return 2 * delta_over_omega - delta_over_omega**2


def effective_threshold(coupling_r: float, alpha: float) -> float:
    """delta* solving delta = K r exp(-alpha delta^2) (Eq. 8 with Gaussian coupling, Eq. 6), by bisection.

    With frequency-dependent J the lock condition Delta <= K r J(Delta) holds iff Delta <= delta*, so
    Theorem 2's formula applies with delta = delta* instead of K r J.
    """
    lo, hi = 0.0, coupling_r
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid <= coupling_r * math.exp(-alpha * mid * mid) else (lo, mid)
    return lo


@torch.no_grad()
def thm2_monte_carlo(delta_over_omega: float, n_tokens: int = 512, n_trials: int = 8, alpha: float = 0.0,
                     seed: int = 0) -> dict[str, float]:
    """Fraction of non-zero S entries for scalar frequencies w ~ U[-1, 1] (Omega = 1), through ``sync_matrix``.

    K r = delta_over_omega (r = 1), alpha = 0 gives the theorem's uniform coupling J = 1; alpha > 0 uses the
    mechanism's Gaussian coupling. Returns the mean and standard error over trials of the off-diagonal
    non-zero fraction, the N^2 fraction (diagonal included, as Eq. 19 counts), and the predictions.
    """
    gen = torch.Generator().manual_seed(seed)
    off = ~torch.eye(n_tokens, dtype=torch.bool)
    fr_off, fr_all = [], []
    for _ in range(n_trials):
        w = torch.rand(1, 1, n_tokens, 1, generator=gen, dtype=torch.float64) * 2 - 1  # (1, 1, N, 1)
        d2 = (w - w.transpose(-2, -1)).square()  # (1, 1, N, N) exact Delta^2
        s, _ = sync_matrix(d2, torch.ones(1, 1, 1, dtype=torch.float64), torch.tensor([alpha], dtype=torch.float64),
                           torch.tensor(delta_over_omega, dtype=torch.float64), eps=0.0)
        nz = s[0, 0] > 0
        fr_off.append(nz[off].double().mean().item())
        fr_all.append(nz.double().mean().item())
    delta = effective_threshold(delta_over_omega, alpha)
    t = torch.tensor(fr_off)
    return {
        "krj_over_omega": delta_over_omega, "alpha": alpha, "n_tokens": n_tokens, "n_trials": n_trials,
        "effective_delta": delta, "mc_offdiag": t.mean().item(),
        "mc_offdiag_se": (t.std() / math.sqrt(n_trials)).item() if n_trials > 1 else float("nan"),
        "mc_all_pairs": sum(fr_all) / n_trials, "exact": thm2_exact(delta),
        "exact_all_pairs": 1 / n_tokens + (1 - 1 / n_tokens) * thm2_exact(delta),
        "stated_eq17": thm2_stated(delta),
    }
