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

Fast path (:class:`FusedKernel`): the N harmonics and the present + successor fields are folded into one value
tensor of 2Nk real columns before the single quadratic aggregation (fsn App. B), aggregated in query chunks (causal
chunks skip keys in the future), with one hand-written backward for harmonics -> field -> strict softmax
aggregation -> projection (measured ~20 % faster per training step than autograd through the same ops).
``need_weights=True`` runs the same computation through plain autograd (:func:`harmonics`, :func:`kernel_field`,
:func:`~oscrepro.attention.kuramoto.attend`) and returns the weights; :func:`fsn_reference` is the plain
complex-number evaluation of Eq. 2 from its definition; the tests compare all three, outputs and gradients.

Outside a causal model (``causal=False``) the attended sum runs over u != t and the last position has no
successor (its z_{T} is taken as 0): a choice, the paper only defines the causal case. Complex arithmetic needs
fp32/fp64, as in the paper (fp32): under bf16 autocast the mechanism runs in fp32 (``fp32_only``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from oscrepro.attention.base import Aux, at_least_fp32, fp32_only
from oscrepro.attention.kuramoto import (
    KuramotoAttention,
    PhaseGates,
    attend,
    from_heads,
    per_coordinate,
    phasors,
    reference_weights,
    strict_backward,
    strict_forward,
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


def _harmonics_into(z: Tensor, n_harmonics: int) -> Tensor:
    """No-autograd :func:`harmonics` writing the powers straight into one buffer (no stack copy)."""
    zn = z.new_empty(*z.shape[:2], n_harmonics, z.shape[2])
    zn[:, :, 0] = z
    for n in range(1, n_harmonics):
        torch.mul(zn[:, :, n - 1], z, out=zn[:, :, n])
    return zn


class FusedKernel(torch.autograd.Function):
    """harmonics -> field -> strict aggregation -> projection, a = sum_n Im[conj(z^n) (A_strict V^n)], with a
    hand-written backward. Inputs: z (B, T, k) complex, q (pre-scaled by 1/tau) and k (B, H, T, 2kh), w (fields,
    N, k) complex. Returns a (B, T, k) (without the diagonal term) and diag = A_tt (B, H, T)."""

    @staticmethod
    def forward(ctx, z: Tensor, q: Tensor, k: Tensor, w: Tensor, causal: bool, chunk: int,
                n_harmonics: int) -> tuple[Tensor, Tensor]:
        b, h, t, e = q.shape
        delay = w.shape[0] == 2
        zn = _harmonics_into(z, n_harmonics)  # (B, T, N, k)
        field = zn * w[0]  # in-place variant of kernel_field (no autograd here)
        if delay:
            field[:, :-1].addcmul_(zn[:, 1:], w[1])
        v = to_heads(torch.view_as_real(field), h, -2).reshape(b * h, t, -1)  # (BH, T, 2N kh)
        q3, k3 = q.reshape(b * h, t, e), k.reshape(b * h, t, e)
        out, diag, probs = strict_forward(q3, k3, v, causal, chunk)
        o = from_heads(out.view(b, h, t, -1), (n_harmonics, -1, 2), -2)  # (B, T, N, k, 2)
        zr = torch.view_as_real(zn)
        a = (zr[..., 0] * o[..., 1] - zr[..., 1] * o[..., 0]).sum(dim=2)  # sum_n Im[conj(z^n) o^n], (B, T, k)
        ctx.causal, ctx.chunk, ctx.delay = causal, chunk, delay
        ctx.save_for_backward(zn, o, q3, k3, v, w, diag, *probs)
        return a, diag.view(b, h, t)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, da: Tensor, ddiag: Tensor) -> tuple[Tensor | None, ...]:
        zn, o, q3, k3, v, w, diag, *probs = ctx.saved_tensors
        b, t, n_h = zn.shape[:3]
        h = q3.shape[0] // b
        oc = torch.view_as_complex(o.contiguous())  # (B, T, N, k)
        da_i = torch.complex(torch.zeros_like(da), da)[:, :, None]  # i * da, (B, T, 1, k)
        dout = to_heads(torch.view_as_real(zn * da_i), h, -2).reshape(b * h, t, -1)  # d o = i z^n da
        dq, dk, dv = strict_backward(q3, k3, v, probs, diag, dout, ddiag.reshape(b * h, t), ctx.causal, ctx.chunk)
        dvc = torch.view_as_complex(from_heads(dv.view(b, h, t, -1), (n_h, -1, 2), -2).contiguous())  # (B,T,N,k)
        dzn = (dvc * w[0].conj()).addcmul_(oc, da_i, value=-1)  # field (present) + projection (-i o da)
        znc = zn.conj().resolve_conj()
        dw = [(dvc * znc).sum(dim=(0, 1))]
        if ctx.delay:
            dzn[:, 1:].addcmul_(dvc[:, :-1], w[1].conj())
            dw.append((dvc[:, :-1] * znc[:, 1:]).sum(dim=(0, 1)))
        dz = dzn[:, :, n_h - 1] * n_h  # Horner: dz = sum_n n conj(z)^(n-1) dz^n
        for n in range(n_h - 1, 0, -1):
            dz = torch.addcmul(dzn[:, :, n - 1] * n, znc[:, :, 0], dz)
        return dz, dq.view(b, h, t, -1), dk.view(b, h, t, -1), torch.stack(dw), None, None, None


class FSNAttention(KuramotoAttention):
    """FSN kernel attention (Eq. 2). Parameters per layer: 4Nk (2Nk with ``static_phases=False``; half of
    that again with ``delay=False``). ``w_re[j, n-1]`` / ``w_im[j, n-1]`` hold Re/Im of w_j^(n), j = 0 present,
    j = 1 successor."""

    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0, *, n_harmonics: int = 3,
                 delay: bool = True, static_phases: bool = True, successor_logit_init: float = 1.5,
                 phase_noise_std: float = 0.05, chunk_size: int | None = 64, gates: PhaseGates | None = None,
                 rope_base: float = 10000.0, tau_init: float | None = None, gate_floor: float = 1e-6) -> None:
        super().__init__(d_model, n_heads, layer_idx, gates=gates, rope_base=rope_base, tau_init=tau_init,
                         gate_floor=gate_floor, chunk_size=chunk_size)
        self.n_harmonics = n_harmonics
        self.delay = delay
        self.static_phases = static_phases
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
        z = phasors(x)  # (B, T, k) complex
        g = self.phase_gates(z)
        h, t = self.n_heads, x.shape[1]
        q, k = to_heads(g.q, h, -2), to_heads(g.k, h, -2)  # (B, H, T, 2kh), q pre-scaled by 1/tau
        w = self.complex_weights()
        aux: Aux = {}
        if need_weights:  # plain autograd path, also returns the weights
            zn = harmonics(z, self.n_harmonics)
            v = to_heads(torch.view_as_real(kernel_field(zn, w, self.delay)), h, -2)  # (B, H, T, 2N kh)
            o, diag, wts = attend(q, k, v, causal=causal, strict=True, chunk_size=self.chunk_size, need_weights=True)
            o = torch.view_as_complex(from_heads(o, (self.n_harmonics, -1, 2), -2).contiguous())  # (B, T, N, k)
            a = (zn.conj() * o).imag.sum(dim=2)
            aux.update(weights=wts + torch.diag_embed(diag), gate_q=g.gq, gate_k=g.gk, gate_v=g.gv)  # full A
        else:
            a, diag = FusedKernel.apply(z, q, k, w, causal, self.chunk_size or t, self.n_harmonics)
        if self.w_im is not None:  # diagonal self term A_tt * sum_n Im w0^(n)
            a = a + diag.movedim(1, -1).repeat_interleave(self.d_head, dim=-1) * self.w_im[0].sum(dim=0)
        if need_weights:
            aux["update"] = a
        return g.gv * a, aux


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
