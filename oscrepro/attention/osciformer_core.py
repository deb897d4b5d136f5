"""Causal core of OsciFormer's attention (osciformer Eqs. 74, 78-79): logits from per-token factors, softmax over
the earlier keys, the weighted sum of per-token value factors; one ``torch.autograd.Function`` with a
hand-written backward.

What: for query rows j of one anchor segment and keys i <= j (Def. 2), the closed-form numerator of Eq. (78) is
an inner product of per-token factors, ``num_ji = <q_j, k_i>`` (``osciformer.py`` builds them), and

    alpha_ji = num_ji / Delta_ji                   (Eq. 74; Delta = t_j - t_i, closed-form pairs)
    alpha_ji = given                               (special pairs: ties and tiny lags, evaluated by the caller)
    w_ji = softmax_{i <= j}(alpha_ji * scale),  mix_j = sum_i w_ji v_i     (Eq. 79)

Why a Function: autograd would keep every (B, H, rows, keys) intermediate (numerator, logits, weights) for the
backward. Here query rows are processed in blocks that read only the keys i < end of the block (the causal
half), nothing of size (rows, keys) is saved, and the backward recomputes each block's weights from the saved
per-token factors (FlashAttention-style): with dw = dmix v^T, the softmax gradient is
w * (dw - rowsum(dw * w)) and rowsum(dw * w) = rowsum(dmix * mix), so the saved output replaces the weights.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor

ROW_BLOCK = 64  # query rows per block: (B, H, ROW_BLOCK, keys) intermediates, and the causal skip's granularity


def pair_classes(delta: Tensor, allowed: Tensor, rho: float, small_lag: float) -> tuple[Tensor, Tensor]:
    """Which allowed pairs leave the closed form: ties (Delta = 0, Eq. 78 second line) and tiny lags
    (Delta * rho < small_lag, where (F(0) - F(Delta)) / Delta loses digits). delta, allowed (..., C, K) -> two
    boolean masks of that shape, disjoint. One definition for the caller's pair list and the core's blocks."""
    tie = allowed & (delta == 0)
    return tie, allowed & ~tie & (delta * rho < small_lag)


class _Block:
    """Pair bookkeeping of one block of query rows [r0, r1) (relative to the segment) against keys [0, k1)."""

    def __init__(self, times: Tensor, row0: int, r0: int, r1: int, sp_index: Tensor, rho: float, small_lag: float):
        self.r0, self.r1, self.k1 = r0, r1, row0 + r1
        rows = torch.arange(row0 + r0, row0 + r1, device=times.device)
        delta = times[:, row0 + r0 : row0 + r1, None] - times[:, None, : self.k1]  # (B, C, K): t_j - t_i
        self.allowed = torch.arange(self.k1, device=times.device) <= rows[:, None]  # (C, K): i <= j (Def. 2)
        tie, small = pair_classes(delta, self.allowed, rho, small_lag)
        regular = self.allowed & ~(tie | small)  # (B, C, K) closed-form pairs
        self.inv_delta = torch.where(regular, delta, 1.0).reciprocal_().masked_fill_(~regular, 0.0)[:, None]
        sel = (sp_index[1] >= r0) & (sp_index[1] < r1)  # this block's special pairs
        self.sp_sel = sel.nonzero().squeeze(1)  # (P_blk,) positions in the caller's list
        self.sp_at = (sp_index[0, sel], sp_index[1, sel] - r0, sp_index[2, sel])  # (b, row in block, key)

    def alpha(self, q: Tensor, k: Tensor, sp_alpha: Tensor) -> Tensor:
        """alpha (B, H, C, K) of the block: num / Delta, the given special values; masked pairs hold 0."""
        alpha = (q[:, :, self.r0 : self.r1] @ k[:, :, : self.k1].mT).mul_(self.inv_delta)  # (B, H, C, K)
        b, j, i = self.sp_at
        alpha[b, :, j, i] = sp_alpha[self.sp_sel]  # (P_blk, H) ties / tiny lags (zeroed by inv_delta above)
        return alpha

    def weights(self, alpha: Tensor, scale: float) -> Tensor:
        """Softmax over the allowed keys of alpha * scale (Eq. 79), in place on alpha."""
        return alpha.mul_(scale).masked_fill_(~self.allowed, -math.inf).softmax(-1)


def _blocks(times: Tensor, row0: int, c: int, block: int, sp_index: Tensor, rho: float, small_lag: float
            ) -> Iterator[_Block]:
    """The row blocks of a segment of C rows, one at a time (built again in the backward: nothing pairwise is
    kept)."""
    for r0 in range(0, c, block):
        yield _Block(times, row0, r0, min(c, r0 + block), sp_index, rho, small_lag)


class CausalCore(torch.autograd.Function):
    """mix (B, H, C, Dv) = softmax_{i <= j}(alpha_ji * scale) v_i for query rows row0..row0+C-1 (module doc).

    Inputs: q (B, H, C, Dq) query factors of the rows, k (B, H, K, Dq) key factors and v (B, H, K, Dv) value
    factors of keys 0..K-1 (K = row0 + C), sp_alpha (P, H) the logits of the special pairs sp_index (3, P) =
    (batch, row - row0, key) (``pair_classes``), times (B, T), ``block`` rows per block; with ``need_weights``
    it also returns the weights and alpha (-inf where masked), (B, H, C, T), not differentiable."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, sp_alpha: Tensor, times: Tensor, row0: int, sp_index: Tensor,
                scale: float, rho: float, small_lag: float, block: int, need_weights: bool
                ) -> tuple[Tensor, Tensor, Tensor]:
        b, h, c, _ = q.shape
        n = times.shape[1]
        mix = q.new_empty(b, h, c, v.shape[-1])  # (B, H, C, Dv)
        weights = q.new_zeros(b, h, c, n) if need_weights else q.new_empty(0)
        logits = q.new_full((b, h, c, n), -math.inf) if need_weights else q.new_empty(0)
        for blk in _blocks(times, row0, c, block, sp_index, rho, small_lag):
            alpha = blk.alpha(q, k, sp_alpha)  # (B, H, Cb, Kb)
            if need_weights:
                logits[:, :, blk.r0 : blk.r1, : blk.k1] = alpha.masked_fill(~blk.allowed, -math.inf)
            w = blk.weights(alpha, scale)
            if need_weights:
                weights[:, :, blk.r0 : blk.r1, : blk.k1] = w
            mix[:, :, blk.r0 : blk.r1] = w @ v[:, :, : blk.k1]  # Eq. (79)
        ctx.save_for_backward(q, k, v, sp_alpha, mix, times, sp_index)
        ctx.args = (row0, c, block, rho, small_lag, scale)
        ctx.mark_non_differentiable(weights, logits)
        return mix, weights, logits

    @staticmethod
    def backward(ctx, d_mix: Tensor, *_: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, sp_alpha, mix, times, sp_index = ctx.saved_tensors
        row0, c, block, rho, small_lag, scale = ctx.args
        dq, dk, dv, dsp = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v), torch.zeros_like(sp_alpha)
        for blk in _blocks(times, row0, c, block, sp_index, rho, small_lag):
            r0, r1, k1 = blk.r0, blk.r1, blk.k1
            w = blk.weights(blk.alpha(q, k, sp_alpha), scale)  # recomputed (B, H, Cb, Kb)
            dm = d_mix[:, :, r0:r1]  # (B, H, Cb, Dv)
            dv[:, :, :k1] += w.mT @ dm
            row_dot = (dm * mix[:, :, r0:r1]).sum(-1, keepdim=True)  # rowsum(dw * w) = rowsum(dmix * mix)
            d_alpha = (dm @ v[:, :, :k1].mT).sub_(row_dot).mul_(w).mul_(scale)  # (B, H, Cb, Kb)
            b, j, i = blk.sp_at
            dsp[blk.sp_sel] = d_alpha[b, :, j, i]  # each special pair lies in exactly one block
            d_num = d_alpha.mul_(blk.inv_delta)  # closed-form pairs only
            dq[:, :, r0:r1] = d_num @ k[:, :, :k1]
            dk[:, :, :k1] += d_num.mT @ q[:, :, r0:r1]
        return dq, dk, dv, dsp, None, None, None, None, None, None, None, None
