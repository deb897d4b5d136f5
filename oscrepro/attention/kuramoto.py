"""Kuramoto attention (the FSN paper's base layer, Nunley 2026, fsn §2.1-2.2 and App. A).

Token states are phases ``theta`` on the torus T^k, not vectors. The module keeps the attention contract
``forward(x, *, causal, need_weights) -> (y, aux)`` with a different meaning of the tensors:

* ``x`` (B, T, k) are raw phases (never wrapped: the lift on R^k accumulates across layers, fsn §2.4);
* ``y`` (B, T, k) is the *value-gated tangent update* ``g_v(theta_t) * a_t`` at ``theta_t``; the caller
  (:class:`oscrepro.papers.fsn.torus_lm.TorusLM`) applies the norm-matched tanh bound and adds it to ``theta``.

Score map (fsn Eq. 1)::

    s_tu = (1/tau) sum_c g^q_c(t) g^k_c(u) cos(theta_tc - theta_uc + omega_c (t - u)),  A_t. = softmax(s_t.)

Because cos(a - b) = cos a cos b + sin a sin b, Eq. 1 is a dot product between
``Q_t = g^q(t) * (cos, sin)(theta_t + omega t) / tau`` and ``K_u = g^k(u) * (cos, sin)(theta_u + omega u)``
(2k features, (cos, sin) interleaved per coordinate = ``view_as_real(z)``), so Eq. 1 is ordinary softmax
attention. Coupling of the base layer (fsn §2.2)::

    a_t = sum_{u<=t} A_tu sin(theta_u - theta_t) = Im[ conj(z_t) (A z)_t ],   z = exp(i theta).

Kuramoto fast path: ``scaled_dot_product_attention`` on values (Re z, Im z) (the diagonal term is sin 0 = 0).
The FSN kernel needs the diagonal weight A_tt separately and the diagonal excluded from the value sum: that is
:func:`strict_forward` / :func:`strict_backward` (chunked, hand-written backward), whose autograd reference is
:func:`attend`. :func:`reference_weights` evaluates Eq. 1 term by term for the tests.

Gates (App. A "Gate parameterization"): q, k and value gates are one set of linear maps on (cos theta, sin theta)
shared by all layers (:class:`PhaseGates`), zero weights / unit biases at init; q and k pass through softplus and
are divided by their coordinate mean (floor 1e-6); the value gate is signed (identity activation).

Choices where the paper is silent (documented here and in the report):
* tau is one learned scalar shared across layers, like the gates (stored as log tau, init sqrt(k)); this is
  consistent with the exact Table 3 counts (``tests/unit/models/test_fsn_params.py``; a per-layer tau would add 3).
* omega_c = base^(-c/k), c = 0..k-1 (the RoPE spectrum of a 2k-dim rotary embedding), fixed, base 10000.
* ``n_heads > 1`` splits the k coordinates into contiguous groups, each with its own softmax (the paper uses 1).
* When a backbone shares one :class:`PhaseGates` across layers it passes it as ``gates=``; standalone use
  (any contract backbone) builds a private one.
"""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.base import PHASE, VECTOR, AttentionBase, Aux, at_least_fp32, fp32_only


class GateOutputs(NamedTuple):
    q: Tensor  # (B, T, k, 2) gated rotary query features, pre-scaled: g^q (cos, sin)(theta + omega t) / tau
    k: Tensor  # (B, T, k, 2) gated rotary key features
    gq: Tensor  # (B, T, k) nonnegative query gate, coordinate mean 1
    gk: Tensor  # (B, T, k) nonnegative key gate, coordinate mean 1
    gv: Tensor  # (B, T, k) signed value gate
    scale: Tensor  # () 1 / tau


def phasors(theta: Tensor) -> Tensor:
    """z = exp(i theta): (B, T, k) real -> (B, T, k) complex; ``view_as_real(z)`` = (cos, sin) per coordinate.
    (``complex(cos, sin)`` rather than ``polar``: same values, about half the CPU time forward + backward.)"""
    return torch.complex(torch.cos(theta), torch.sin(theta))


class PhaseGates(nn.Module):
    """Shared QK gates, value gate, temperature tau and RoPE rates omega (fsn Eq. 1 and App. A).

    One ``Linear(2k, 3k)`` holds the three gate maps (q | k | v), which is exactly three ``Linear(2k, k)``
    (identical parameter count, one GEMM instead of three). Its input features are (cos theta_c, sin theta_c)
    interleaved per coordinate, i.e. ``view_as_real(z)``: a fixed permutation of (cos theta, sin theta).
    """

    def __init__(self, k: int, rope_base: float = 10000.0, tau_init: float | None = None,
                 gate_floor: float = 1e-6) -> None:
        super().__init__()
        self.k = k
        self.gate_floor = gate_floor
        self.proj = nn.Linear(2 * k, 3 * k)
        nn.init.zeros_(self.proj.weight)
        nn.init.ones_(self.proj.bias)
        self.log_tau = nn.Parameter(torch.tensor(math.log(tau_init if tau_init is not None else math.sqrt(k))))
        omega = rope_base ** (-torch.arange(k, dtype=torch.float32) / k)
        self.register_buffer("omega", omega, persistent=False)  # (k,)

    def gates(self, z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """z (B, T, k) complex -> g^q, g^k (nonnegative, coordinate mean 1) and signed g^v, each (B, T, k)."""
        raw = self.proj(torch.view_as_real(z).flatten(-2))  # (B, T, 3k)
        gqk, gv = raw[..., : 2 * self.k], raw[..., 2 * self.k:]
        gqk = F.softplus(gqk).unflatten(-1, (2, self.k))  # (B, T, 2, k)
        gqk = gqk / gqk.mean(dim=-1, keepdim=True).clamp_min(self.gate_floor)
        return gqk[..., 0, :], gqk[..., 1, :], gv

    def drift(self, t: int, device: torch.device | None = None) -> Tensor:
        """exp(i omega_c t), (T, k) complex: RoPE as phase drift."""
        pos = torch.arange(t, device=device, dtype=self.omega.dtype)
        return phasors(pos[:, None] * self.omega)

    def forward(self, z: Tensor) -> GateOutputs:
        """Gated rotary query (pre-scaled by 1/tau) and key features of Eq. 1, (B, T, k, 2) each."""
        rot = z * self.drift(z.shape[1], z.device)  # (B, T, k): exp(i (theta + omega t))
        gq, gk, gv = self.gates(z)
        scale = torch.exp(-self.log_tau)
        return GateOutputs(torch.view_as_real(rot * (gq * scale)), torch.view_as_real(rot * gk), gq, gk, gv, scale)


def to_heads(x: Tensor, n_heads: int, dim: int) -> Tensor:
    """(B, T, ..., k, ...) -> (B, H, T, F): the coordinate axis ``dim`` (negative) is split into H contiguous
    groups, everything else of a head is flattened into F."""
    b, t = x.shape[:2]
    x = x.unflatten(dim, (n_heads, -1)).movedim(dim - 1, 1)  # (B, H, T, ..., kh, ...)
    return x.reshape(b, n_heads, t, -1)


def from_heads(x: Tensor, inner: tuple[int, ...], dim: int) -> Tensor:
    """Inverse of :func:`to_heads`: (B, H, T, F) -> (B, T, ..., H * kh, ...), ``inner`` = per-head shape."""
    b, h, t, _ = x.shape
    return x.reshape(b, h, t, *inner).movedim(1, dim - 1).flatten(dim - 1, dim)


def attend(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, strict: bool, chunk_size: int | None = None,
           need_weights: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """Plain autograd softmax attention with the diagonal split out (the weights path and the reference of
    :func:`strict_forward` / :func:`strict_backward`).

    q (pre-scaled), k: (B, H, T, E); v: (B, H, T, F). Returns ``out`` (B, H, T, F), ``diag`` = A_tt (B, H, T) and the
    weights (B, H, T, T) if asked. With ``strict`` the diagonal weight is removed from the value sum (the sum runs
    over u < t causally, u != t otherwise) while the softmax normaliser still includes it, so a caller can add
    the diagonal term in closed form and values that must not be read at u = t (the delay z_{t+1}) get an
    exact zero weight and an exact zero gradient. Queries are processed in chunks of ``chunk_size`` so that
    causal chunks only touch keys u < chunk end (about half the T^2 work; a python loop over T/chunk, not T).
    """
    t_len = q.shape[2]
    step = chunk_size or t_len
    pos = torch.arange(t_len, device=q.device)
    outs, diags, weights = [], [], []
    for i0 in range(0, t_len, step):
        i1 = min(t_len, i0 + step)
        kend = i1 if causal else t_len
        s = q[:, :, i0:i1] @ k[:, :, :kend].transpose(-1, -2)  # (B, H, Tq, Tk)
        if causal:
            s = s.masked_fill(pos[None, :kend] > pos[i0:i1, None], float("-inf"))
        a = s.softmax(dim=-1)
        diags.append(torch.diagonal(a, offset=i0, dim1=-2, dim2=-1))  # (B, H, Tq)
        if strict:
            a = a.masked_fill(pos[None, :kend] == pos[i0:i1, None], 0.0)
        outs.append(a @ v[:, :, :kend])  # (B, H, Tq, F)
        if need_weights:
            weights.append(F.pad(a, (0, t_len - kend)))
    w = torch.cat(weights, dim=2) if need_weights else None
    return torch.cat(outs, dim=2), torch.cat(diags, dim=2), w


def strict_forward(q: Tensor, k: Tensor, v: Tensor, causal: bool, chunk: int) -> tuple[Tensor, Tensor, list[Tensor]]:
    """No-autograd strict aggregation (the fused fast path behind :func:`attend` with ``strict=True``).

    q (pre-scaled by 1/tau), k: (BH, T, E); v: (BH, T, F). Returns ``out`` = sum_{u<t} A_tu v_u (u != t when not
    causal) (BH, T, F), ``diag`` = A_tt (BH, T) and the per-chunk strict weights (BH, Tq, Tk) for the backward.
    """
    t = q.shape[1]
    out, diag, probs = v.new_empty(v.shape), q.new_empty(q.shape[:2]), []
    for i0 in range(0, t, chunk):
        i1 = min(t, i0 + chunk)
        kend = i1 if causal else t
        s = torch.bmm(q[:, i0:i1], k[:, :kend].transpose(1, 2))  # (BH, Tq, Tk)
        if causal:
            future = torch.ones(i1 - i0, i1 - i0, dtype=torch.bool, device=q.device).triu(1)
            s[:, :, i0:].masked_fill_(future, float("-inf"))
        a = torch.softmax(s, dim=-1)
        dg = a.diagonal(offset=i0, dim1=1, dim2=2)
        diag[:, i0:i1] = dg
        dg.zero_()  # strict: the diagonal is added in closed form by the caller
        torch.bmm(a, v[:, :kend], out=out[:, i0:i1])  # strided out=: no temporary + copy
        probs.append(a)
    return out, diag, probs


def strict_backward(q: Tensor, k: Tensor, v: Tensor, probs: list[Tensor], diag: Tensor, dout: Tensor, ddiag: Tensor,
                    causal: bool, chunk: int) -> tuple[Tensor, Tensor, Tensor]:
    """Hand-written backward of :func:`strict_forward`; with P the full softmax (strict weights + diagonal):
    dv = A_strict^T dout; dP = dout v^T off the diagonal, ddiag on it; dS = P * (dP - rowsum(P * dP));
    dq = dS k, dk = dS^T q. dq is written per query chunk; dv and dk per key block j, as one GEMM over the query
    chunks that see it (causal: chunks i >= j), their weight columns concatenated: no accumulation into strided
    slices (which torch runs as one small GEMM per batch entry)."""
    t = q.shape[1]
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    starts = list(range(0, t, chunk))
    dss = []
    for a, i0 in zip(probs, starts, strict=True):
        i1 = min(t, i0 + chunk)
        kend = i1 if causal else t
        da = torch.bmm(dout[:, i0:i1], v[:, :kend].transpose(1, 2))  # (BH, Tq, Tk): dP off the diagonal
        dd, pd = ddiag[:, i0:i1], diag[:, i0:i1]
        rowsum = (a * da).sum(dim=-1) + pd * dd  # sum_u P_tu dP_tu, (BH, Tq)
        ds = a * (da - rowsum[..., None])
        ds.diagonal(offset=i0, dim1=1, dim2=2).copy_(pd * (dd - rowsum))
        torch.bmm(ds, k[:, :kend], out=dq[:, i0:i1])
        dss.append(ds)
    for j, j0 in enumerate(starts):
        j1 = min(t, j0 + chunk)
        first = j if causal else 0  # query chunks whose keys reach block j
        rows = slice(starts[first], t)
        a_col = torch.cat([a[:, :, j0:j1] for a in probs[first:]], dim=1)  # (BH, rows, Tk_j)
        ds_col = torch.cat([ds[:, :, j0:j1] for ds in dss[first:]], dim=1)
        torch.bmm(a_col.transpose(1, 2), dout[:, rows], out=dv[:, j0:j1])
        torch.bmm(ds_col.transpose(1, 2), q[:, rows], out=dk[:, j0:j1])
    return dq, dk, dv


def reference_weights(theta: Tensor, gates: PhaseGates, n_heads: int, causal: bool) -> Tensor:
    """Plain Eq. 1 by broadcasting over (t, u, c): (B, T, k) -> A (B, H, T, T). Reference for tests."""
    b, t, k = theta.shape
    gq, gk, _ = gates.gates(phasors(theta))  # (B, T, k)
    pos = torch.arange(t, dtype=theta.dtype, device=theta.device)
    drift = (pos[:, None, None] - pos[None, :, None]) * gates.omega  # (T, T, k): omega_c (t - u)
    cosines = torch.cos(theta[:, :, None, :] - theta[:, None, :, :] + drift)  # (B, T, T, k)
    terms = gq[:, :, None, :] * gk[:, None, :, :] * cosines  # (B, T, T, k)
    s = terms.unflatten(-1, (n_heads, k // n_heads)).sum(-1).movedim(-1, 1) * torch.exp(-gates.log_tau)
    if causal:
        s = s.masked_fill(~torch.ones(t, t, dtype=torch.bool, device=theta.device).tril(), float("-inf"))
    return s.softmax(dim=-1)  # (B, H, T, T)


def per_coordinate(a: Tensor, k: int) -> Tensor:
    """(B, H, T, T) head weights -> (B, T, T, k): the weights each coordinate c sees (its head's)."""
    h = a.shape[1]
    return a.movedim(1, -1).repeat_interleave(k // h, dim=-1)


class KuramotoAttention(AttentionBase):
    """Base Kuramoto attention layer: Eq. 1 scores, coupling a_t = sum_u A_tu sin(theta_u - theta_t).

    ``d_model`` is the number of phases k. ``chunk_size`` only applies to the weights path; the fast path is
    ``scaled_dot_product_attention`` (the diagonal contributes sin 0 = 0, so no diagonal split is needed).
    """

    # a coupling law of TorusLM (built with its shared gates=) and, with private gates, a vector-contract mechanism
    contracts: ClassVar[frozenset[str]] = frozenset({PHASE, VECTOR})

    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0, *, gates: PhaseGates | None = None,
                 rope_base: float = 10000.0, tau_init: float | None = None, gate_floor: float = 1e-6,
                 chunk_size: int | None = None) -> None:
        super().__init__(d_model, n_heads, layer_idx)
        self.chunk_size = chunk_size
        if gates is None:
            self.own_gates = PhaseGates(d_model, rope_base, tau_init, gate_floor)
            self._shared: tuple[PhaseGates, ...] = ()
        else:  # shared across layers: held outside the module tree so each parameter is counted once
            self.own_gates = None
            self._shared = (gates,)

    @property
    def phase_gates(self) -> PhaseGates:
        return self.own_gates if self.own_gates is not None else self._shared[0]

    def forward(self, x: Tensor, *, causal: bool = False, pos: Tensor | None = None, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        with fp32_only(x):  # complex phasors: under trainer.precision=bf16-mixed the coupling still runs in fp32
            return self._forward(at_least_fp32(x), causal=causal, need_weights=need_weights)

    def _forward(self, x: Tensor, *, causal: bool, need_weights: bool) -> tuple[Tensor, Aux]:
        z = phasors(x)  # (B, T, k) complex
        g = self.phase_gates(z)
        h, kh = self.n_heads, self.d_head
        q, k = to_heads(g.q, h, -2), to_heads(g.k, h, -2)  # (B, H, T, 2kh)
        v = to_heads(torch.view_as_real(z), h, -2)  # (B, H, T, 2kh): (Re z, Im z) per coordinate
        aux: Aux = {}
        if need_weights:
            o, _, w = attend(q, k, v, causal=causal, strict=False, chunk_size=self.chunk_size, need_weights=True)
            aux.update(weights=w, gate_q=g.gq, gate_k=g.gk, gate_v=g.gv)
        else:
            # 1/tau (a learned tensor) is already folded into q: SDPA's ``scale`` only takes a python float
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=1.0)  # (B, H, T, 2kh)
        o = from_heads(o, (kh, 2), -2)  # (B, T, k, 2): A z
        zr = torch.view_as_real(z)
        a = zr[..., 0] * o[..., 1] - zr[..., 1] * o[..., 0]  # Im[conj(z_t) (A z)_t], (B, T, k)
        if need_weights:
            aux["update"] = a
        return g.gv * a, aux


def kuramoto_reference(module: KuramotoAttention, theta: Tensor, causal: bool) -> Tensor:
    """Plain reference: g_v * sum_u A_tu sin(theta_u - theta_t) with A from :func:`reference_weights`."""
    gates = module.phase_gates
    a = per_coordinate(reference_weights(theta, gates, module.n_heads, causal), theta.shape[-1])  # (B,T,T,k)
    upd = (a * torch.sin(theta[:, None, :, :] - theta[:, :, None, :])).sum(dim=2)  # (B, T, k)
    _, _, gv = gates.gates(phasors(theta))
    return gv * upd
