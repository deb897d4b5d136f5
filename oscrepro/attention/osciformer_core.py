"""Causal core of OsciFormer's attention (osciformer Eqs. 74, 78-79): logits from per-token factors, softmax over
the earlier keys, the weighted sum of per-token value factors; one ``torch.autograd.Function`` with a
hand-written backward.

What: for query rows j of one anchor segment and keys i <= j (Def. 2), the closed-form numerator of Eq. (78) is
an inner product of per-token factors, ``num_ji = <q_j, k_i>`` (``osciformer.py`` builds them), and

    alpha_ji = num_ji / Delta_ji                   (Eq. 74; Delta = t_j - t_i, closed-form pairs)
    alpha_ji = given                               (special pairs: ties and tiny lags, evaluated by the caller)
    w_ji = softmax_{i <= j}(alpha_ji * scale),  mix_j = sum_i w_ji v_i     (Eq. 79)

Why a Function: autograd would keep every (B, H, rows, keys) intermediate (numerator, Delta, logits, weights)
for the backward. Here query rows are processed in blocks that read only the keys i < end of the block (the
causal half), and the backward is written by hand (FlashAttention-style): with dw = dmix v^T, the softmax
gradient is w * (dw - rowsum(dw * w)) and rowsum(dw * w) = rowsum(dmix * mix), so the saved output stands in
for the weights' row sums. The weights themselves are kept only when a call's causal half is small
(``KEEP_BYTES``: it saves the backward one numerator product per block); otherwise each block's weights are
recomputed from the saved per-token factors, so memory stays O(T) per call.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor

ROW_BLOCK = 64  # query rows per block: (B, H, ROW_BLOCK, keys) intermediates, and the causal skip's granularity
KEEP_BYTES = 32 * 2**20  # a call whose weights take at most this keeps them for the backward instead of recomputing


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

    def alpha(self, q: list[Tensor], k: list[Tensor], sp_alpha: Tensor, heads: int) -> Tensor:
        """alpha (B, H, C, K) of the block from the factor parts q (B H, rows, Dq_p), k (B H, keys, Dq_p):
        num = sum_p q_p k_p^T over Delta, and the given special values (P, H); masked pairs hold 0."""
        num = torch.bmm(q[0][:, self.r0 : self.r1], k[0][:, : self.k1].mT)  # (B H, C, K)
        for q_p, k_p in zip(q[1:], k[1:], strict=True):
            num.baddbmm_(q_p[:, self.r0 : self.r1], k_p[:, : self.k1].mT)
        alpha = num.view(-1, heads, *num.shape[1:]).mul_(self.inv_delta)  # (B, H, C, K)
        b, j, i = self.sp_at
        alpha[b, :, j, i] = sp_alpha[self.sp_sel]  # (P_blk, H) ties / tiny lags (zeroed by inv_delta above)
        return alpha

    def weights(self, alpha: Tensor, scale: float) -> Tensor:
        """Softmax over the allowed keys of alpha * scale (Eq. 79), (B, H, C, K) -> (B H, C, K); alpha is
        overwritten."""
        w = alpha.mul_(scale).masked_fill_(~self.allowed, -math.inf).softmax(-1)
        return w.flatten(0, 1)


def _blocks(
    times: Tensor, row0: int, c: int, block: int, sp_index: Tensor, rho: float, small_lag: float, reverse: bool = False
) -> Iterator[_Block]:
    """The row blocks of a segment of C rows, one at a time (built again in the backward: nothing pairwise is
    kept); ``reverse`` starts with the last block, the one that reads every key."""
    starts = range(0, c, block)
    for r0 in reversed(starts) if reverse else starts:
        yield _Block(times, row0, r0, min(c, r0 + block), sp_index, rho, small_lag)


class CausalCore(torch.autograd.Function):
    """``causal_core`` as a Function: the factors come last (n_qk query parts, n_qk key parts, value parts)."""

    @staticmethod
    def forward(
        ctx,
        sp_alpha: Tensor,
        times: Tensor,
        sp_index: Tensor,
        row0: int,
        scale: float,
        rho: float,
        small_lag: float,
        block: int,
        need_weights: bool,
        n_qk: int,
        *factors: Tensor,
    ) -> tuple[Tensor, ...]:
        b, h, c, _ = factors[0].shape
        n = times.shape[1]
        flat = [z.reshape(b * h, z.shape[2], z.shape[3]) for z in factors]  # (B H, rows | keys, D_p)
        q, k, v = flat[:n_qk], flat[n_qk : 2 * n_qk], flat[2 * n_qk :]
        mix = [v_p.new_empty(b * h, c, v_p.shape[-1]) for v_p in v]  # (B H, C, Dv_p)
        weights = sp_alpha.new_zeros(b, h, c, n) if need_weights else sp_alpha.new_empty(0)
        logits = sp_alpha.new_full((b, h, c, n), -math.inf) if need_weights else sp_alpha.new_empty(0)
        n_pairs = sum(min(block, c - r0) * (row0 + min(c, r0 + block)) for r0 in range(0, c, block))
        ctx.kept = [] if b * h * n_pairs * sp_alpha.element_size() <= KEEP_BYTES else None
        for blk in _blocks(times, row0, c, block, sp_index, rho, small_lag):
            r0, r1, k1 = blk.r0, blk.r1, blk.k1
            alpha = blk.alpha(q, k, sp_alpha, h)  # (B, H, Cb, Kb)
            if need_weights:
                logits[:, :, r0:r1, :k1] = alpha.masked_fill(~blk.allowed, -math.inf)
            w = blk.weights(alpha, scale)  # (B H, Cb, Kb)
            if need_weights:
                weights[:, :, r0:r1, :k1] = w.view(b, h, r1 - r0, k1)
            for v_p, mix_p in zip(v, mix, strict=True):
                torch.bmm(w, v_p[:, :k1], out=mix_p[:, r0:r1])  # Eq. (79)
            if ctx.kept is not None:
                ctx.kept.append(w)
        ctx.save_for_backward(sp_alpha, times, sp_index, *flat, *mix)
        ctx.args = (row0, c, block, rho, small_lag, scale, h, n_qk, len(v))
        ctx.mark_non_differentiable(weights, logits)
        return (*(m.view(b, h, c, -1) for m in mix), weights, logits)

    @staticmethod
    def backward(ctx, *grads: Tensor) -> tuple[Tensor | None, ...]:
        row0, c, block, rho, small_lag, scale, h, n_qk, n_v = ctx.args
        sp_alpha, times, sp_index, *flat = ctx.saved_tensors
        q, k, v, mix = flat[:n_qk], flat[n_qk : 2 * n_qk], flat[2 * n_qk : 2 * n_qk + n_v], flat[2 * n_qk + n_v :]
        d_mix = [d.reshape(m.shape) for d, m in zip(grads[:n_v], mix, strict=True)]  # (B H, C, Dv_p)
        dq, dk, dv = ([torch.empty_like(z) for z in parts] for parts in (q, k, v))
        dsp = torch.zeros_like(sp_alpha)
        beta = 0.0  # the first block (the last rows) covers every key: it initialises dk, dv
        for n_blk, blk in enumerate(_blocks(times, row0, c, block, sp_index, rho, small_lag, reverse=True)):
            r0, r1, k1 = blk.r0, blk.r1, blk.k1
            if ctx.kept is None:
                w = blk.weights(blk.alpha(q, k, sp_alpha, h), scale)  # recomputed (B H, Cb, Kb)
            else:
                w = ctx.kept[-1 - n_blk]  # read only: a second backward (retain_graph) finds it unchanged
            dm = [d[:, r0:r1] for d in d_mix]  # (B H, Cb, Dv_p)
            d_alpha = torch.bmm(dm[0], v[0][:, :k1].mT)  # dw = dmix v^T (B H, Cb, Kb)
            for dm_p, v_p in zip(dm[1:], v[1:], strict=True):
                d_alpha.baddbmm_(dm_p, v_p[:, :k1].mT)
            row_dot = sum((d_p * m[:, r0:r1]).sum(-1, keepdim=True) for d_p, m in zip(dm, mix, strict=True))
            d_alpha = d_alpha.sub_(row_dot).mul_(w).mul_(scale)  # rowsum(dw * w) = rowsum(dmix * mix)
            for dv_p, dm_p in zip(dv, dm, strict=True):
                dv_p[:, :k1].baddbmm_(w.mT, dm_p, beta=beta)
            d_alpha = d_alpha.view(-1, h, r1 - r0, k1)  # (B, H, Cb, Kb)
            b, j, i = blk.sp_at
            dsp[blk.sp_sel] = d_alpha[b, :, j, i]  # each special pair lies in exactly one block
            d_num = d_alpha.mul_(blk.inv_delta).flatten(0, 1)  # closed-form pairs only
            for q_p, k_p, dq_p, dk_p in zip(q, k, dq, dk, strict=True):
                torch.bmm(d_num, k_p[:, :k1], out=dq_p[:, r0:r1])
                dk_p[:, :k1].baddbmm_(d_num.mT, q_p[:, r0:r1], beta=beta)
            beta = 1.0
        d_factors = [g.view(g.shape[0] // h, h, *g.shape[1:]) for g in (*dq, *dk, *dv)]
        return (dsp, None, None, None, None, None, None, None, None, None, *d_factors)


def causal_core(
    q: list[Tensor],
    k: list[Tensor],
    v: list[Tensor],
    sp_alpha: Tensor,
    times: Tensor,
    row0: int,
    sp_index: Tensor,
    scale: float,
    rho: float,
    small_lag: float,
    block: int,
    need_weights: bool,
) -> tuple[list[Tensor], Tensor, Tensor]:
    """mix = softmax_{i <= j}(alpha_ji * scale) v_i for query rows row0..row0+C-1 (module doc), on factors given in
    parts (concatenating them would copy): num_ji = sum_p <q_p,j, k_p,i>, v = [v_1, v_2, ...].

    q parts (B, H, C, .) are the query factors of the rows, k parts (B, H, K, .) the key factors and v parts
    (B, H, K, .) the value factors of keys 0..K-1 (K = row0 + C); sp_alpha (P, H) the logits of the special pairs
    sp_index (3, P) = (batch, row - row0, key) (``pair_classes``); times (B, T); ``block`` rows per block.
    Returns the mix parts (B, H, C, .) and, with ``need_weights``, the weights and alpha (-inf where masked),
    (B, H, C, T), not differentiable (empty otherwise)."""
    out = CausalCore.apply(
        sp_alpha, times, sp_index, row0, scale, rho, small_lag, block, need_weights, len(q), *q, *k, *v
    )
    return list(out[:-2]), out[-2], out[-1]
