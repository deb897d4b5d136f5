"""Frustrated Synchronization Network coupling kernel (Nunley 2026, fsn Eq. 2, §2.2-2.3, §3, App. A "Kernel").

Same phase-state interface as :mod:`oscrepro.attention.kuramoto` (x = phases (B, T, k), output = value-gated
tangent update (B, T, k)); same shared score map (Eq. 1). The coupling law replaces sin(theta_u - theta_t) by a
learned complex harmonic kernel with a one-step delay::

    a_t = sum_{n=1..N} Im[ conj(z_t)^n * ( sum_{u<t} A_tu (w0^(n) z_u^n + w1^(n) z_{u+1}^n) ) ]
          + A_tt * sum_n Im(w0^(n))                                                             (Eq. 2)

with per-coordinate complex w0^(n), w1^(n) in C^k per layer. The attended sum runs over strictly earlier
positions; the diagonal self term has the closed form A_tt Im(w0^(n)) because conj(z_t)^n z_t^n = 1 and is added
separately; position u feeds its successor z_{u+1} only if u + 1 <= t (causality). By Proposition 1 the w1 term
is Kuramoto-Sakaguchi coupling to u with the data-given frustration delta_u = theta_{u+1} - theta_u.

Special cases: N=1, w0=1, w1=0 is exactly Kuramoto attention (tested); ``static_phases=False`` is the paper's
"no phases" configuration (real w0, w1: Daido coupling plus real delay, no static frustration angles and hence no
diagonal self term); ``delay=False`` drops w1 (the delay ablation of §5).

Initialisation (App. A, "noise variant of the lean operating point"): first-harmonic real parts
w1 = sigmoid(1.5) ~ 0.82 (successor field) and w0 = 1 - sigmoid(1.5) ~ 0.18 (present field); all other real parts
0; every imaginary part ~ N(0, 0.05^2) (fsn §2.3). Choice: with ``delay=False`` the present first harmonic starts
at 1 (the base layer), since the successor share has nowhere to go.

Fast path (:mod:`oscrepro.attention.fsn_fused`): the N harmonics and the present + successor fields are folded
into one value tensor of 2Nk real columns before the single quadratic aggregation (fsn App. B), with a hand-written
backward and compiled elementwise stages. ``need_weights=True`` runs the same computation through plain autograd
(:func:`harmonics`, :func:`kernel_field`, :func:`~oscrepro.attention.kuramoto.attend`) and returns the weights;
:func:`fsn_reference` is the plain complex-number evaluation of Eq. 2 from its definition; the tests compare all
three, outputs and gradients.

Outside a causal model (``causal=False``) the attended sum runs over u != t and the last position has no
successor (its z_{T} is taken as 0): a choice, the paper only defines the causal case. Complex arithmetic needs
fp32/fp64, as in the paper (fp32): under bf16 autocast the mechanism runs in fp32 (``fp32_only``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from oscrepro.attention.base import Aux, at_least_fp32, fp32_only, refuse, whole
from oscrepro.attention.fsn_fused import fused_kernel, use_compiled
from oscrepro.attention.fsn_gates import gate_features
from oscrepro.attention.kuramoto import (
    KuramotoAttention,
    PhaseGates,
    attend,
    from_heads,
    per_coordinate,
    phasors,
    reference_weights,
    to_heads,
)


def harmonics(z: Tensor, n_harmonics: int) -> Tensor:
    """z^n for n = 1..N by repeated products (no extra trig): (B, T, k) -> (B, T, N, k) complex."""
    powers = [z]
    for _ in range(1, n_harmonics):
        powers.append(powers[-1] * z)
    return torch.stack(powers, dim=2)


def kernel_field(zn: Tensor, w: Tensor, delay: bool) -> Tensor:
    """Eq. 2's value field w0^(n) z_u^n + w1^(n) z_{u+1}^n, (B, T, N, k) complex; z_{T} is taken as 0."""
    v = zn * w[0]
    if delay:
        v = torch.cat([v[:, :-1] + zn[:, 1:] * w[1], v[:, -1:]], dim=1)
    return v


class FSNAttention(KuramotoAttention):
    """FSN kernel attention (Eq. 2). Parameters per layer: 4Nk (2Nk with ``static_phases=False``; half of
    that again with ``delay=False``). ``w_re[j, n-1]`` / ``w_im[j, n-1]`` hold Re/Im of w_j^(n), j = 0 present,
    j = 1 successor."""

    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0, *, n_harmonics: int = 3,
                 delay: bool = True, static_phases: bool = True, successor_logit_init: float = 1.5,
                 phase_noise_std: float = 0.05, chunk_size: int | None = 64, gates: PhaseGates | None = None,
                 rope_base: float = 10000.0, tau_init: float | None = None, gate_floor: float = 1e-6,
                 compiled: bool | None = None) -> None:
        refuse(FSNAttention.config_problems(d_model, n_heads, n_harmonics=n_harmonics))
        super().__init__(d_model, n_heads, layer_idx, gates=gates, rope_base=rope_base, tau_init=tau_init,
                         gate_floor=gate_floor, chunk_size=chunk_size)
        self.n_harmonics = n_harmonics
        self.delay = delay
        self.static_phases = static_phases
        self.compiled = compiled  # fused path: compile its elementwise stages (None: float32 at training sizes)
        n_fields = 2 if delay else 1
        w_re = torch.zeros(n_fields, n_harmonics, d_model)
        if delay:
            share = 1.0 / (1.0 + math.exp(-successor_logit_init))  # sigmoid(1.5) ~ 0.8176
            w_re[0, 0], w_re[1, 0] = 1.0 - share, share
        else:
            w_re[0, 0] = 1.0
        self.w_re = nn.Parameter(w_re)  # (fields, N, k)
        self.w_im = nn.Parameter(torch.randn(n_fields, n_harmonics, d_model) * phase_noise_std) \
            if static_phases else None

    @classmethod
    def config_problems(cls, d_model: int, n_heads: int, *, n_harmonics: int = 3, **hparams: Any) -> list[str]:
        """The shared head split, and at least the first harmonic (N >= 1: Eq. 2 sums n = 1..N)."""
        problems = super().config_problems(d_model, n_heads, **hparams)
        return problems + ([] if whole(n_harmonics, 1) else [f"n_harmonics={n_harmonics!r} must be an integer >= 1"])

    def complex_weights(self) -> Tensor:
        """The kernel as one complex tensor (fields, N, k): [w0, w1]."""
        return torch.complex(self.w_re, self.w_im if self.w_im is not None else torch.zeros_like(self.w_re))

    def coefficients(self) -> tuple[Tensor, Tensor | None]:
        """(w0, w1), each (N, k) complex (w1 is None without delay); for analysis of the trained kernel."""
        w = self.complex_weights()
        return w[0], (w[1] if self.delay else None)

    def forward(self, x: Tensor, *, causal: bool = False, pos: Tensor | None = None, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        with fp32_only(x):  # complex phasors: under trainer.precision=bf16-mixed the coupling still runs in fp32
            return self._forward(at_least_fp32(x), causal=causal, need_weights=need_weights)

    def _forward(self, x: Tensor, *, causal: bool, need_weights: bool) -> tuple[Tensor, Aux]:
        h, t = self.n_heads, x.shape[1]
        w = self.complex_weights()
        aux: Aux = {}
        if need_weights:  # plain autograd path (complex arithmetic), also returns the weights
            z = phasors(x)  # (B, T, k) complex
            g = self.phase_gates(z)
            q, k = to_heads(g.q, h, -2), to_heads(g.k, h, -2)  # (B, H, T, 2kh), q pre-scaled by 1/tau
            zn = harmonics(z, self.n_harmonics)
            v = to_heads(torch.view_as_real(kernel_field(zn, w, self.delay)), h, -2)  # (B, H, T, 2N kh)
            o, diag, wts = attend(q, k, v, causal=causal, strict=True, chunk_size=self.chunk_size, need_weights=True)
            o = torch.view_as_complex(from_heads(o, (self.n_harmonics, -1, 2), -2).contiguous())  # (B, T, N, k)
            a = (zn.conj() * o).imag.sum(dim=2)
            aux.update(weights=wts + torch.diag_embed(diag), gate_q=g.gq, gate_k=g.gk, gate_v=g.gv)  # full A
            gv = g.gv
        else:  # fused gates and kernel on real planes (Re z, Im z = cos x, sin x), compiled stages at training sizes
            compiled = use_compiled(x) if self.compiled is None else self.compiled
            zr, zi, qf, kf, gv = gate_features(x, self.phase_gates, compiled)
            q, k = to_heads(qf, h, -1), to_heads(kf, h, -1)  # planes (B, T, 2, k) -> (B, H, T, 2kh)
            a, diag = fused_kernel(zr, zi, q, k, w, causal, self.chunk_size or t, self.n_harmonics, compiled)
        if self.w_im is not None:  # diagonal self term A_tt * sum_n Im w0^(n)
            a = a + diag.movedim(1, -1).repeat_interleave(self.d_head, dim=-1) * self.w_im[0].sum(dim=0)
        if need_weights:
            aux["update"] = a
        return gv * a, aux


def fsn_reference(module: FSNAttention, theta: Tensor, causal: bool) -> Tensor:
    """Plain complex-number evaluation of Eq. 2 from its definition (loop over harmonics, explicit (t, u, c)
    broadcast, explicit strict mask, closed-form diagonal). Reference for the fast path; O(T^2 k) memory."""
    t, k = theta.shape[1], theta.shape[2]
    a_full = per_coordinate(reference_weights(theta, module.phase_gates, module.n_heads, causal), k)  # (B,T,T,k)
    pos = torch.arange(t, device=theta.device)
    strict = (pos[None, :] < pos[:, None]) if causal else (pos[None, :] != pos[:, None])  # (T, T) [t, u]
    a_strict = a_full * strict[None, :, :, None]
    a_strict = torch.complex(a_strict, torch.zeros_like(a_strict))
    a_diag = torch.diagonal(a_full, dim1=1, dim2=2).movedim(-1, 1)  # (B, T, k)
    w0, w1 = module.coefficients()
    upd = torch.zeros_like(theta)
    for n in range(1, module.n_harmonics + 1):
        zn = torch.polar(torch.ones_like(theta), n * theta)  # (B, T, k)
        fld = w0[n - 1] * zn
        if w1 is not None:
            zn1 = torch.cat([zn[:, 1:], torch.zeros_like(zn[:, :1])], dim=1)  # z_{u+1}, 0 past the end
            fld = fld + w1[n - 1] * zn1
        agg = torch.einsum("btuc,buc->btc", a_strict, fld)
        upd = upd + (zn.conj() * agg).imag + a_diag * w0[n - 1].imag
    _, _, gv = module.phase_gates.gates(phasors(theta))
    return gv * upd
