"""Selective Synchronization Attention (SSA; Hays, ssa paper Eqs. 4-14, Algorithm 1).

Each token is an oscillator with natural frequencies omega = W_omega x (Eq. 4) and phases theta = W_theta x
(Eq. 5). Pairs couple by J_ij = exp(-softplus(alpha_hat_h) ||omega_i - omega_j||^2) (Eq. 6); a pair is
phase-locked iff ||omega_i - omega_j|| <= K r J_ij (Eq. 8) with r the empirical order parameter (Eq. 11)
and K = softplus(K_hat); the locked pair's steady-state coherence S_ij = J_ij sqrt(1 - u^2) is the
attention weight (Eq. 10), row-normalized (Eq. 13), per head, then W_O (Eq. 14).

Fast path (``need_weights=False``): a custom autograd function over tiles of (heads x queries x keys).
Per tile, Delta^2 comes from one matmul (||w_i||^2 + ||w_j||^2 - 2 w_i.w_j), S from one fused elementwise
kernel, and S V is accumulated; Eq. (13) normalizes by a plain row sum, so tiles need no online rescaling.
Backward recomputes S per tile (flash-attention style) and applies the analytic gradient, so no
(B, H, N, N) tensor is ever stored: memory is O(B H N d) plus one ~4 MB tile. The elementwise kernels are
pure torch; once B H N^2 >= ``compile_min_elems`` they are ``torch.compile``d (static shapes, full-size
tiles only), which fuses ~30 pointwise ops into one loop; smaller problems and tests run them eagerly.
Two CPU details matter for speed: masks are 0/1 floats multiplied in (``where`` compiles ~2x slower), and
J = exp(-min(alpha Delta^2, 80)) never goes subnormal (float32 subnormals cost ~5x). The floor only
changes J where J < 1.8e-35; such pairs are unlocked (u^2 >> 1) and contribute exactly 0 either way.
``need_weights=True`` uses the dense reference (``ssa_reference``) and returns its internals.

Choices where the paper is ambiguous (all also in the module docstring of ``ssa_reference``):
  * sqrt(clamp(1 - u^2, sync_eps)) replaces cos(arcsin(clamp(u))) so gradients stay finite at u = 1;
    locking is u <= 1 with u = Delta / (K r J + eps), as in the authors' code (Eq. 8 up to eps).
  * Causal variant: causal mask AND prefix order parameter r_i over tokens j <= i.
  * Parameters follow the authors' osn_model.py: raw K_hat = k_init, alpha_hat_h = alpha_init
    (so K = alpha_h = softplus(1) = 1.313 at init), W_omega, W_theta, W_V, W_O are nn.Linear with bias and
    PyTorch's default init. That is 4 (D^2 + D) + H + 1 parameters (Sec. IV.2: 9 more than softmax MHA).
  * No dropout on the synchronization weights (the authors use 0.1): dropout lives in the host block.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.base import AttentionBase, Aux, merge_heads, refuse, split_heads, whole
from oscrepro.attention.compiled import CompiledPair, run_with_fallback
from oscrepro.attention.ssa_reference import order_parameter, ssa_reference

_EXP_FLOOR = 80.0  # J = exp(-min(alpha Delta^2, 80)) >= 1.8e-35 stays a normal float32 (module docstring)


def sync_forward_kernel(gram: Tensor, q_row: Tensor, q_col: Tensor, r: Tensor, alpha: Tensor, coupling: Tensor,
                        allowed: Tensor | None, eps: float, sync_eps: float) -> tuple[Tensor, Tensor]:
    """S for one row block (Eqs. 6, 8, 10, 12) before top-k, and its row sums.

    gram: (G, I, M) omega_i . omega_j (G = B*H); q_row (G, I), q_col (G, M): ||omega||^2; r: (G, I);
    alpha: (G,); allowed: (I, M) 0/1 causal mask or None. Returns S (G, I, M) and sum_j S_ij (G, I).
    Masks are 0/1 floats multiplied in (not ``where``): the compiled CPU kernel is ~2x faster that way.
    """
    d2 = (q_row[..., None] + q_col[..., None, :] - 2.0 * gram).clamp_min(0.0)  # Delta^2 (can round < 0)
    j = torch.exp(-(alpha[:, None, None] * d2).clamp_max(_EXP_FLOOR))  # Eq. (6)
    ia = 1.0 / ((coupling * r)[..., None] * j + eps)  # 1 / (K r J + eps), Eq. (12)
    u2 = d2 * ia * ia  # u^2
    s = j * torch.sqrt((1.0 - u2).clamp_min(sync_eps)) * (u2 <= 1.0).to(j.dtype)  # Eqs. (8), (10)
    if allowed is not None:
        s = s * allowed  # causal mask (I, M)
    return s, s.sum(-1)  # (G, I, M), (G, I)


def sync_backward_kernel(gram: Tensor, q_row: Tensor, q_col: Tensor, r: Tensor, alpha: Tensor, coupling: Tensor,
                         allowed: Tensor | None, keep: Tensor | None, dp: Tensor, delta: Tensor, z: Tensor,
                         eps: float, sync_eps: float) -> tuple[Tensor, ...]:
    """Analytic gradient of one row block. dp = dO V^T (G, I, M); delta = <dO_i, O_i>, z = row sums (G, I).

    Returns E = dL/dDelta^2 (G, I, M), S (for dV), the row and column sums of E, (G, I) and (G, M), and
    per-row partial sums of dL/dr, dL/dalpha, dL/dK (each (G, I)). With a = K r J + eps, u^2 = Delta^2/a^2,
    s = sqrt(clamp(1 - u^2)), S = m J s and c = dL/dS = m (dp - delta)/z:
    dL/da = c J u^2/(a s) [live], dL/dJ = c s + K r dL/da, E = -c J/(2 s a^2) [live] - alpha J dL/dJ.
    Masks are 0/1 floats; every masked product starts from the masked factor, so 0 * large stays 0.
    """
    kr, al = (coupling * r)[..., None], alpha[:, None, None]  # (G, I, 1), (G, 1, 1)
    d2_raw = q_row[..., None] + q_col[..., None, :] - 2.0 * gram
    d2 = d2_raw.clamp_min(0.0)
    j = torch.exp(-(al * d2).clamp_max(_EXP_FLOOR))
    ia = 1.0 / (kr * j + eps)
    u2 = d2 * ia * ia
    g = 1.0 - u2
    live = (g >= sync_eps).to(j.dtype)  # the clamp passes gradient only here
    s = torch.sqrt(g.clamp_min(sync_eps))
    m = (u2 <= 1.0).to(j.dtype)  # phase-locked
    if allowed is not None:
        m = m * allowed
    if keep is not None:
        m = m * keep  # top-k survivors
    c = m * (dp - delta[..., None]) * (1.0 / z)[..., None]  # dL/dS_ij through Eq. (13)
    lj = live * c * j / s  # c J / s on the live set
    ga = lj * u2 * ia  # dL/da
    gj = c * s + ga * kr  # dL/dJ (direct + via the threshold)
    e = (d2_raw >= 0.0).to(j.dtype) * (-0.5 * lj * ia * ia - gj * al * j)  # clamp_min(0) of the expansion
    gaj = (ga * j).sum(-1)
    return e, m * j * s, e.sum(-1), e.sum(-2), coupling * gaj, (-gj * d2 * j).sum(-1), r * gaj


_KERNELS = CompiledPair("SSA", sync_forward_kernel, sync_backward_kernel)  # full-size tiles compiled


def _compile_scope(compiled: bool) -> contextlib.AbstractContextManager:
    """Allow one static compile per tile shape and variant (mask, top-k) across every N of a process:
    dynamo's default of 8 per function is hit by a sweep over N (it then silently runs eagerly)."""
    return torch._dynamo.config.patch(recompile_limit=64) if compiled else contextlib.nullcontext()


def _topk_keep(p: Tensor, top_k: int | None) -> Tensor | None:
    """0/1 float mask of the top-k entries per row (None when top-k is off or k >= row length)."""
    if top_k is None or top_k >= p.shape[-1]:
        return None
    idx = p.topk(top_k, dim=-1).indices  # (G, I, k)
    return torch.zeros_like(p).scatter_(-1, idx, 1.0)


def _tile_shape(g: int, n: int, top_k: int | None, block: int, tile_elems: int) -> tuple[int, int, int]:
    """(G_t, I, M) of a full tile: I = M = block (M = N for top-k), G_t heads with G_t I M ~ tile_elems."""
    rows = min(n, block)
    width = n if top_k is not None else rows
    return max(1, min(g, tile_elems // (rows * width))), rows, width


def _tiles(g: int, n: int, causal: bool, top_k: int | None, block: int,
           tile_elems: int) -> Iterator[tuple[slice, slice, list[tuple[slice, bool, bool]]]]:
    """Yield (head slice, query slice, [(key slice, needs causal mask, full-size tile), ...]) per row block.

    Tiles are (G_t, I, M) with I = M = ``block`` (full key rows when top-k needs them), G_t heads such that
    G_t I M ~ ``tile_elems``; causal runs skip tiles above the diagonal. Full-size tiles share one shape, so
    the statically compiled kernels are built once per (mask, top-k) variant. Query-side sums accumulate in
    a contiguous per-row-block buffer (fused ``baddbmm_``), which halves the threaded ops per tile.
    """
    heads, rows, width = _tile_shape(g, n, top_k, block, tile_elems)
    for g0 in range(0, g, heads):
        for i0 in range(0, n, rows):
            i1 = min(i0 + rows, n)
            keys = []
            for j0 in range(0, i1 if causal else n, width):
                j1 = min(j0 + width, n)
                full = g0 + heads <= g and i1 - i0 == rows and j1 - j0 == width
                keys.append((slice(j0, j1), causal and j1 - 1 > i0, full))
            yield slice(g0, min(g0 + heads, g)), slice(i0, i1), keys


def _tile_inputs(gram: Tensor, q: Tensor, r2: Tensor, a1: Tensor, coupling: Tensor, hs: slice, qs: slice,
                 ks: slice, masked: bool) -> tuple[Tensor | None, ...]:
    """Kernel inputs of one tile; small slices are copied contiguous so compiled kernels see no strides."""
    allowed = None
    if masked:  # (I, M) 1 where key j <= query i
        keys = torch.arange(ks.start, ks.stop, device=gram.device)
        allowed = (keys[None, :] <= torch.arange(qs.start, qs.stop, device=gram.device)[:, None]).to(gram.dtype)
    return (gram, q[hs, qs].contiguous(), q[hs, ks].contiguous(), r2[hs, qs].contiguous(), a1[hs].contiguous(),
            coupling, allowed)


def _bmm_into(buf: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """a @ b written into the front of a reused flat buffer: faster on CPU than a fresh result tensor, while
    ``bmm(out=)`` on a strided slice is ~30x slower, so the buffer view is always contiguous."""
    res = buf[: a.shape[0] * a.shape[1] * b.shape[2]].view(a.shape[0], a.shape[1], b.shape[2])
    return torch.bmm(a, b, out=res)


class _TiledSSA(torch.autograd.Function):
    """y = normalize(S) V tile by tile, S recomputed in backward (flash-attention style; memory O(B H N d)).

    Heads are folded into the batch, (B, H, N, .) -> (G = B*H, N, .). Because Eq. (13) normalizes by a
    plain sum (no softmax max), numerators and row sums simply accumulate over key tiles.
    """

    @staticmethod
    def forward(ctx, omega: Tensor, v: Tensor, r: Tensor, alpha: Tensor, coupling: Tensor, causal: bool,
                top_k: int | None, eps: float, sync_eps: float, block: int, tile_elems: int,
                compiled: bool) -> Tensor:
        b, h, n, _ = omega.shape
        work = torch.promote_types(omega.dtype, torch.float32)  # half inputs: eps, 1/a, u^2 need float32 range
        w, v3, r2 = (t.detach().reshape(b * h, n, -1).to(work) for t in (omega, v, r))  # (G, N, .) contiguous
        r2, alpha, coupling = r2[..., 0], alpha.detach().to(work), coupling.detach().to(work)
        q, a1 = w.square().sum(-1), alpha.repeat(b)  # (G, N) ||omega_i||^2, (G,) alpha per folded row
        out, z = torch.empty_like(v3), v3.new_empty(b * h, n)
        buf = w.new_empty(math.prod(_tile_shape(b * h, n, top_k, block, tile_elems)))  # reused per tile
        with _compile_scope(compiled):
            for hs, qs, keys in _tiles(b * h, n, causal, top_k, block, tile_elems):
                num = torch.zeros_like(v3[hs, qs])  # (G_t, I, d_v) sum_j S_ij v_j of this row block
                zsum = 0.0
                for ks, masked, full in keys:
                    fwd, _ = _KERNELS.get(compiled and full)  # edge tiles run eagerly: no recompile per odd shape
                    gram = _bmm_into(buf, w[hs, qs], w[hs, ks].transpose(1, 2))  # (G_t, I, M) omega_i . omega_j
                    p, zc = fwd(*_tile_inputs(gram, q, r2, a1, coupling, hs, qs, ks, masked), eps, sync_eps)
                    keep = _topk_keep(p, top_k)  # top-k tiles span whole key rows
                    if keep is not None:
                        p = p * keep
                        zc = p.sum(-1)
                    num.baddbmm_(p, v3[hs, ks])
                    zsum = zsum + zc
                z[hs, qs] = zsum + eps  # Eq. (13) denominator
                out[hs, qs] = num.div_(z[hs, qs, None])  # (G_t, I, d_v)
        ctx.save_for_backward(w, v3, r2, alpha, coupling, out, z)
        ctx.cfg = (b, causal, top_k, eps, sync_eps, block, tile_elems, compiled)
        ctx.dtypes = tuple(t.dtype for t in (omega, v, r, alpha, coupling))
        return out.view(b, h, n, -1).to(v.dtype)

    @staticmethod
    def backward(ctx, d_out: Tensor):
        w, v3, r2, alpha, coupling, out, z = ctx.saved_tensors
        b, causal, top_k, eps, sync_eps, block, tile_elems, compiled = ctx.cfg
        g, n, d = w.shape
        q, a1 = w.square().sum(-1), alpha.repeat(b)
        do3 = d_out.reshape(g, n, -1).to(w.dtype)  # (G, N, d_v)
        delta = (do3 * out).sum(-1)  # (G, N) <dO_i, O_i>
        do_z = do3 / z[..., None]  # dO_i / Z_i
        g_w, dv, e_sum = torch.zeros_like(w), torch.zeros_like(v3), w.new_zeros(g, n)
        g_r, g_alpha, g_k = (w.new_zeros(g, n) for _ in range(3))  # per-row partial sums
        buf_g, buf_p = (w.new_empty(math.prod(_tile_shape(g, n, top_k, block, tile_elems))) for _ in range(2))
        with _compile_scope(compiled):
            for hs, qs, keys in _tiles(g, n, causal, top_k, block, tile_elems):
                gw_rows = torch.zeros_like(w[hs, qs])  # query-side dL/dw of this row block (G_t, I, d)
                row_sums = w.new_zeros(4, *gw_rows.shape[:2])  # sum_j E_ij, dL/dr, dL/dalpha, dL/dK partials
                kw = (delta[hs, qs].contiguous(), z[hs, qs].contiguous(), eps, sync_eps)
                for ks, masked, full in keys:
                    fwd, bwd = _KERNELS.get(compiled and full)
                    gram = _bmm_into(buf_g, w[hs, qs], w[hs, ks].transpose(1, 2))  # (G_t, I, M)
                    kin = _tile_inputs(gram, q, r2, a1, coupling, hs, qs, ks, masked)
                    keep = _topk_keep(fwd(*kin, eps, sync_eps)[0], top_k) if top_k is not None else None
                    dp = _bmm_into(buf_p, do3[hs, qs], v3[hs, ks].transpose(1, 2))  # (G_t, I, M) dO V^T
                    e, p, e_row, e_col, gr, ga, gk = bwd(*kin, keep, dp, *kw)
                    dv[hs, ks] += torch.bmm(p.transpose(1, 2), do_z[hs, qs])  # dV += W^T dO
                    # Delta^2 = q_i + q_j - 2 w_i.w_j: dL/dw_i = 2 (sum_j E_ij) w_i - 2 E w, keys likewise with E^T
                    gw_rows.baddbmm_(e, w[hs, ks], alpha=-2.0)
                    g_w[hs, ks] -= 2.0 * torch.bmm(e.transpose(1, 2), w[hs, qs])
                    e_sum[hs, ks] += e_col
                    row_sums += torch.stack((e_row, gr, ga, gk))
                g_w[hs, qs] += gw_rows
                e_sum[hs, qs] += row_sums[0]
                g_r[hs, qs], g_alpha[hs, qs], g_k[hs, qs] = row_sums[1], row_sums[2], row_sums[3]
        g_w.addcmul_(e_sum[..., None], w, value=2.0)
        h = g // b
        grads = (g_w.view(b, h, n, d), dv.view(b, h, n, -1), g_r.view(b, h, n), g_alpha.view(b, h, n).sum((0, 2)),
                 g_k.sum().reshape(coupling.shape))
        return (*(gr.to(dt) for gr, dt in zip(grads, ctx.dtypes, strict=True)), None, None, None, None, None, None,
                None)


def ssa_fast(omega: Tensor, v: Tensor, r: Tensor, alpha: Tensor, coupling: Tensor, *, causal: bool = False,
             top_k: int | None = None, eps: float = 1e-8, sync_eps: float = 1e-6, block: int = 256,
             tile_elems: int = 1 << 20, compiled: bool = False) -> Tensor:
    """Tiled SSA per head, the maths of ``ssa_reference`` (Eqs. 6-13) without any stored N x N tensor.

    omega, v: (B, H, N, d); r: (B, H, N) order parameter per query row (``order_parameter``, expanded);
    alpha: (H,) positive; coupling: scalar K > 0. Returns (B, H, N, d).
    """
    if top_k is not None and top_k >= omega.shape[-2]:
        top_k = None  # Algorithm 1: top-k only when k < N
    return _TiledSSA.apply(omega, v, r, alpha, coupling, causal, top_k, eps, sync_eps, block, tile_elems, compiled)


class SelectiveSynchronizationAttention(AttentionBase):
    """Multi-frequency synchronization heads (Eq. 14): SSA per head, concatenated, then W_O."""

    def __init__(self, d_model: int, n_heads: int, top_k: int | None = None, layer_idx: int = 0,
                 k_init: float = 1.0, alpha_init: float = 1.0, eps: float = 1e-8, sync_eps: float = 1e-6,
                 block: int = 256, tile_elems: int = 1 << 20, compile_min_elems: int | None = 1 << 24,
                 init_std: float | None = None) -> None:
        """top_k: Algorithm 1 sparsity k (None = dense). k_init/alpha_init: raw K_hat, alpha_hat (pre-softplus).
        block, tile_elems: fast-path tile of ``block`` queries x ``block`` keys x enough heads for ~tile_elems
        entries (values do not depend on them; speed only). compile_min_elems: compile the
        elementwise kernels when B*H*N^2 reaches it (None: never). init_std: None keeps PyTorch's default
        Linear init (the authors' block benchmark, r ~ 0.847 at init); a float uses N(0, init_std^2) weights and
        zero biases (the authors' full-model init, std 0.02)."""
        refuse(SelectiveSynchronizationAttention.config_problems(d_model, n_heads, top_k=top_k, block=block,
                                                                 tile_elems=tile_elems))
        super().__init__(d_model, n_heads, layer_idx)
        self.top_k, self.eps, self.sync_eps = top_k, eps, sync_eps
        self.block, self.tile_elems, self.compile_min_elems = block, tile_elems, compile_min_elems
        self.k_hat = nn.Parameter(torch.tensor(float(k_init)))  # K = softplus(K_hat)
        self.alpha_hat = nn.Parameter(torch.full((n_heads,), float(alpha_init)))  # alpha_h = softplus(.)
        self.w_omega = nn.Linear(d_model, d_model)  # Eq. (4), all heads stacked
        self.w_theta = nn.Linear(d_model, d_model)  # Eq. (5)
        self.w_v = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)  # W_O, Eq. (14)
        if init_std is not None:
            for lin in (self.w_omega, self.w_theta, self.w_v, self.out):
                nn.init.normal_(lin.weight, std=init_std)
                nn.init.zeros_(lin.bias)

    @classmethod
    def config_problems(cls, d_model: int, n_heads: int, *, top_k: int | None = None, block: int = 256,
                        tile_elems: int = 1 << 20, **hparams: Any) -> list[str]:
        """The shared head split; a sparsity k >= 1 (Algorithm 1 keeps the k strongest keys; k = 0 would keep
        none) or null for dense; tiles of at least one query and one entry."""
        problems = super().config_problems(d_model, n_heads, **hparams)
        if top_k is not None and not whole(top_k, 1):
            problems.append(f"top_k={top_k!r} must be an integer >= 1 or null (dense)")
        problems += [f"{name}={value!r} must be an integer >= 1" for name, value in (("block", block),
                     ("tile_elems", tile_elems)) if not whole(value, 1)]
        return problems

    def forward(self, x: Tensor, *, causal: bool = False, pos: Tensor | None = None, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        b, n, _ = x.shape
        omega = split_heads(self.w_omega(x), self.n_heads)  # (B, H, N, d)
        theta = split_heads(self.w_theta(x), self.n_heads)  # (B, H, N, d)
        v = split_heads(self.w_v(x), self.n_heads)  # (B, H, N, d)
        alpha, coupling = F.softplus(self.alpha_hat), F.softplus(self.k_hat)
        aux: Aux = {}
        if need_weights:
            y, aux = ssa_reference(omega, theta, v, alpha, coupling, causal=causal, top_k=self.top_k,
                                   eps=self.eps, sync_eps=self.sync_eps)
        else:
            r = order_parameter(theta, causal).expand(b, self.n_heads, n)  # (B, H, N) per query row
            kw = dict(causal=causal, top_k=self.top_k, eps=self.eps, sync_eps=self.sync_eps, block=self.block,
                      tile_elems=self.tile_elems)
            big = self.compile_min_elems is not None and b * self.n_heads * n * n >= self.compile_min_elems
            y = run_with_fallback(lambda c: ssa_fast(omega, v, r, alpha, coupling, compiled=c, **kw), big, _KERNELS)
        return self.out(merge_heads(y)), aux
