"""OsciFormer attention (osciformer: Secs. 3, 5, 6; App. A, Eqs. 2, 11, 48-79; App. E, Tables 6-9).

What: ContiFormer's continuous-time attention with the key/value ODEs replaced by damped driven harmonic
oscillators, so that the time-averaged query-key logit has a closed form. Per head and channel c:

    k_i'' + 2 zeta omega k_i' + omega^2 k_i = F_i(t),  k_i(t_i) = K_i,  k_i'(t_i) = U K_i         (Eq. 2, Sec. 6)
    F_i(t_i + s) = sum_m P_im cos(varpi_m s) + Q_im sin(varpi_m s),  varpi = the query grid     (App. E drive)
    q_j(t) = sum_k A_jk cos(lam_k t) + B_jk sin(lam_k t)   ridge fit to Q_1..Q_j               (Eq. 48, A.4)
    alpha_i(t_j) = (1/Delta) int_{t_i}^{t_j} <q_j(tau), k_i(tau)> dtau,  Delta = t_j - t_i      (Eq. 78)
    w_ji = softmax_{i <= j}(alpha_i(t_j) / sqrt(d_h)),  y_j = W_O sum_i w_ji v_i(t_j)           (Eq. 79, Sec. 6)

Values follow the same oscillator law with their own omega, zeta, U and drive. Positivity: omega = exp(.),
zeta = softplus(.). Init (App. E): omega log-uniform on ``omega_range``, zeta ~ U(``zeta_range``), U = 0.

The closed form (re-derived; the paper's Eqs. 72-77 are per-regime and singular at zeta = 1). For the
homogeneous part x of a key and a query mode e^{i lam s}, integrating the ODE against e^{i lam s} gives

    int_0^Delta e^{i lam s} x(s) ds = (F(0) - F(Delta)) / p,  F(s) = e^{i lam s} (x'(s) + (2 gamma - i lam) x(s)),
    p = omega^2 - lam^2 - 2 i gamma lam,

so only the state (x, x') at t_i and at t_j enters.

Fast path (every pair term is a matrix product; nothing of size (B, H, T, T, d_h) is materialised):
* The transient is written in its exponential modes (``transient_modes``): x(s) = sum_m a_m e^{r_m s}, r_pm =
  -gamma +- i mu. Since e^{r (t_j - t_i)} = e^{r (t_j - tau)} e^{-r (t_i - tau)}, the F(Delta) term is
  Re(Q K^T) with per-token factors, and so is the value transient sum_i w_ji x_i(Delta_ji) (weights @ factors).
  tau is the first time of a block of query rows (``_chunks``); blocks are cut so that rate * (t - tau) <=
  ``MAX_GROWTH`` for the keys they use, so no factor overflows, and each factor has relative error ~eps |r| t.
  The 1/mu in a_m loses digits near critical damping, so channels with |1 - zeta^2| < 1e-2 (or mu < 1e-3) keep
  the per-pair ``oscillator_state`` (stable series at zeta = 1), gathered over those channels only.
* The F(0) term and the steady-state drive terms are Re <query features_j, key features_i> over (mode,
  channel), one real matrix product of interleaved (re, im) pairs; the secular k = m term is Delta times one more.
* Delta = 0 (ties, e.g. padding): alpha = <q_j(t_j), K_i> exactly (Eq. 78, second line), a matrix product.
* 0 < Delta * rho < ``small_lag`` (rho bounds every frequency and decay rate of q k): the (F(0) - F(Delta)) / Delta
  difference has absolute error ~eps |F| / Delta, so these pairs (few: adjacent ones) use an ``n_gauss``-point
  Gauss-Legendre average of the closed-form trajectories instead (error ~1e-16 there).
All of it is the same closed form as the reference up to rounding; tests compare values and gradients with
scipy ODE integration and quadrature in float64, on random and on XOR-like (k/32, tied) times.

Where the paper is ambiguous, we chose:
* Causality: the integral needs t_i <= t_j (Def. 2), so keys i > j are always masked and query j is fitted
  on tokens 1..j. The mechanism is inherently causal: ``causal=False`` gives the same output.
* Values: "the weighted value v_bar" is read as the value trajectory at the query time, v_i(t_j) (Sec. 6),
  not a time average.
* Drive (Sec. 6 vs App. E disagree): ``drive="matrix"`` (default) uses Sec. 6's A_h, B_h in R^{d_h x d_h}:
  P_im = A_h E_i, Q_im = B_h E_i for every mode m; ``"gains"`` uses App. E's element-wise gains
  P_im = g_m * E_i, Q_im = h_m * E_i; ``"none"`` switches it off. E_i = K_i (keys) or V_i (values); varpi_m =
  the query grid lam_m (M = J). Drive parameters start at 0 (like U), so at init every variant is undriven.
* The constant offset c_i of Eq. (75) is not defined anywhere and is left out (c_i = 0).
* Frequency grids of Table 9 are ``frequency_grid``'s kinds; "Geometric (sparse)" is read as octaves ending at
  f_max, "Fixed Harmonics" as n pi / L with L = ``harmonic_span``. ``learn_freqs`` makes the grid a parameter.
* Ridge lambda (App. E: "ridge regularization for the query fit", no value): ``ridge`` = 1e-2, absolute.
* Biases: b_Q, b_K, b_V but no output bias (Sec. 6 lists none). Zeta ranges starting at 0 (Table 8, [0, 0])
  are floored at 1e-4 by the softplus parametrisation.
* The kernel runs in ``kernel_dtype`` (float64 by default): the closed form divides by p, which is small for
  weakly damped channels near a grid frequency, and float32 loses the gradient there.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.base import AttentionBase, Aux, fp32_only, merge_heads, split_heads
from oscrepro.attention.oscillator_kernels import (
    frequency_grid,
    gauss_legendre,
    oscillator_state,
    ridge_query_fit,
    steady_state_amplitude,
    transient_modes,
)

DRIVES = ("matrix", "gains", "none")
MAX_GROWTH = 300.0  # bound on rate * (t - anchor) in the separable factors: e^300 ~ 1e130, far from overflow


def _re_matmul(a: Tensor, b: Tensor) -> Tensor:
    """Re(a @ b^T) for complex a (..., C, M), b (..., K, M) as one real matrix product over interleaved
    (re, im) pairs: Re(a b) = [a_re, a_im] . [b_re, -b_im]."""
    return torch.view_as_real(a).flatten(-2) @ torch.view_as_real(b.conj().resolve_conj()).flatten(-2).mT


class OsciFormerAttention(AttentionBase):
    """Continuous-time attention over damped driven oscillator keys/values, closed-form logits (Eqs. 2, 48, 74-79)."""

    continuous_time: ClassVar[bool] = True

    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0, n_modes: int = 8, freq_grid: str = "log",
                 freq_range: tuple[float, float] = (1e-2, 1e1), learn_freqs: bool = False,
                 harmonic_span: float = 10.0, omega_range: tuple[float, float] = (1e-2, 1e1),
                 zeta_range: tuple[float, float] = (0.05, 0.4), drive: str = "matrix", ridge: float = 1e-2,
                 bias: bool = True, chunk_size: int | None = None, kernel_dtype: str = "float64",
                 small_lag: float = 1.0, n_gauss: int = 6) -> None:
        super().__init__(d_model, n_heads, layer_idx)
        if drive not in DRIVES:
            raise ValueError(f"drive={drive!r}; valid: {', '.join(DRIVES)}")
        h, d, j = n_heads, self.d_head, n_modes
        self.n_modes, self.drive, self.ridge, self.chunk_size = n_modes, drive, ridge, chunk_size
        self.kernel_dtype, self.small_lag, self.n_gauss = getattr(torch, kernel_dtype), small_lag, n_gauss
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)  # W_Q, W_K, W_V with b_Q, b_K, b_V (Sec. 6)
        self.out = nn.Linear(d_model, d_model, bias=False)  # W_O
        log_freqs = frequency_grid(freq_grid, j, h, tuple(freq_range), harmonic_span).log().float()  # (H, J)
        if learn_freqs:
            self.log_freqs = nn.Parameter(log_freqs)
        else:
            self.register_buffer("log_freqs", log_freqs)
        lo, hi = (math.log(float(v)) for v in omega_range)
        z_lo, z_hi = (max(float(v), 1e-4) for v in zeta_range)
        for role in ("k", "v"):
            self.register_parameter(f"log_omega_{role}", nn.Parameter(lo + (hi - lo) * torch.rand(h, d)))
            zeta0 = z_lo + (z_hi - z_lo) * torch.rand(h, d)
            self.register_parameter(f"zeta_raw_{role}", nn.Parameter(torch.log(torch.expm1(zeta0))))  # softplus^-1
            self.register_parameter(f"velocity_{role}", nn.Parameter(torch.zeros(h, d, d)))  # U_h = 0 (App. E)
            shape = (h, d, d) if drive == "matrix" else (h, j, d)
            if drive != "none":  # A_h, B_h (Sec. 6) or g_m, h_m (App. E); zero init
                self.register_parameter(f"drive_cos_{role}", nn.Parameter(torch.zeros(shape)))
                self.register_parameter(f"drive_sin_{role}", nn.Parameter(torch.zeros(shape)))

    def omega_zeta(self, role: str) -> tuple[Tensor, Tensor]:
        """(omega, zeta) of the key ("k") or value ("v") oscillators, each (H, d_h), in the kernel dtype."""
        kd = self.kernel_dtype
        return getattr(self, f"log_omega_{role}").to(kd).exp(), F.softplus(getattr(self, f"zeta_raw_{role}").to(kd))

    def oscillator(self, role: str, e: Tensor, lam: Tensor) -> dict[str, Tensor]:
        """Per-token oscillator data for projections e (B, H, T, d_h): omega, zeta (1, H, 1, d_h); transient
        anchor state x0, v0 (B, H, T, d_h); steady-state amplitudes w (B, H, T, J, d_h) complex (or None)."""
        omega, zeta = self.omega_zeta(role)
        u = getattr(self, f"velocity_{role}").to(e.dtype)
        v_init = torch.einsum("hcd,bhtd->bhtc", u, e)  # x'(t_i) = U E_i (Sec. 6)
        out = {"omega": omega[None, :, None], "zeta": zeta[None, :, None], "x0": e, "v0": v_init, "w": None, "e": e}
        if self.drive == "none":
            return self._modes(out)
        a, b = (getattr(self, f"drive_{n}_{role}").to(e.dtype) for n in ("cos", "sin"))
        if self.drive == "matrix":
            p_amp = torch.einsum("hcd,bhtd->bhtc", a, e)[:, :, :, None]  # (B, H, T, 1, d_h), same for all m
            q_amp = torch.einsum("hcd,bhtd->bhtc", b, e)[:, :, :, None]
        else:
            p_amp, q_amp = a[None, :, None] * e[:, :, :, None], b[None, :, None] * e[:, :, :, None]  # (B,H,T,J,d_h)
        w = steady_state_amplitude(p_amp, q_amp, lam[None, :, None, :, None], omega[None, :, None, None],
                                   zeta[None, :, None, None])  # (B, H, T, J, d_h), Eq. (64)
        out["w"] = w
        out["x0"] = e - w.real.sum(3)  # transient anchor state: total minus steady state at s = 0
        out["v0"] = v_init - (w * 1j * lam[None, :, None, :, None]).real.sum(3)
        return self._modes(out)

    @staticmethod
    def _modes(osc: dict) -> dict[str, Tensor]:
        """Adds the transient's exponential modes: roots r (1, H, 1, 2 d_h), amplitudes a (B, H, T, 2 d_h), and
        the near-critical channel mask crit (1, H, 1, d_h) (``transient_modes``)."""
        osc["r"], osc["a"], osc["crit"] = transient_modes(osc["x0"], osc["v0"], osc["omega"], osc["zeta"])
        osc["r"] = osc["r"].expand(1, -1, 1, -1)
        return osc

    def forward(self, x: Tensor, *, causal: bool = False, pos: Tensor | None = None, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        b, n, _ = x.shape
        kd = self.kernel_dtype
        qkv = self.qkv(x)
        with fp32_only(x):
            tt = (torch.arange(n, device=x.device).expand(b, n) if times is None else times).to(kd)  # (B, T)
            q, k, v = (split_heads(z, self.n_heads).to(kd) for z in qkv.chunk(3, dim=-1))  # (B, H, T, d_h)
            lam = self.log_freqs.to(kd).exp()  # (H, J) collocation bank
            qa, qb = ridge_query_fit(tt, q, lam, self.ridge)  # (B, H, T, J, d_h), Eq. (48) on prefixes
            key, val = self.oscillator("k", k, lam), self.oscillator("v", v, lam)
            feats = self._features(tt, qa, qb, lam, key, val)
            parts = [self._rows(j0, j1, tt, qa, qb, lam, key, val, feats) for j0, j1 in self._chunks(tt, key, val)]
            y, weights, logits = (torch.cat(z, dim=2) for z in zip(*parts, strict=True))  # rows along dim 2
        aux: Aux = {}
        if need_weights:
            aux = {"weights": weights.to(x.dtype), "logits": logits.to(x.dtype), "query_cos": qa, "query_sin": qb,
                   "freqs": lam}
        return self.out(merge_heads(y).to(qkv.dtype)), aux

    def _chunks(self, tt: Tensor, key: dict, val: dict) -> list[tuple[int, int]]:
        """Query-row blocks [j0, j1): at most ``chunk_size`` rows, and short enough in time that the separable
        factors e^{-r (t_i - t_j0)} of the keys i < j1 stay below e^{MAX_GROWTH} (no overflow, see module doc)."""
        n = tt.shape[1]
        step = self.chunk_size or n
        rate = max(float(-z["r"].detach().real.amin()) for z in (key, val))  # fastest decay (or growth backwards) rate
        span_ok = (tt - tt[:, :1]).amax(0) * rate <= MAX_GROWTH if rate > 0 else None
        if span_ok is not None and bool(span_ok.all()) or rate <= 0:
            return [(j0, min(j0 + step, n)) for j0 in range(0, n, step)]
        out, j0, t_cpu = [], 0, tt.detach().cpu()
        while j0 < n:
            ok_ = ((t_cpu[:, j0:] - t_cpu[:, j0:j0 + 1]).amax(0) * rate <= MAX_GROWTH)[:step]
            j1 = j0 + max(1, int(ok_.int().cumprod(0).sum()))
            out.append((j0, j1))
            j0 = j1
        return out

    def _features(self, tt: Tensor, qa: Tensor, qb: Tensor, lam: Tensor, key: dict, val: dict) -> dict[str, Tensor]:
        """Per-token factors of the closed-form logit, so that every pair term is one matrix product.

        For the homogeneous key part int_0^Delta e^{i lam s} x(s) ds = (F(0) - F(Delta)) / p (module doc):
        pq, rq (B, H, T, d_h) are the query sides of -F(Delta), and the F(0) term joins the steady-state drive
        terms (Eqs. 58-61) in qfeat (B, H, T, F) x kfeat (B, H, T, F), complex, F = J d_h per term."""
        om, ga = key["omega"][:, :, :, None], (key["omega"] * key["zeta"])[:, :, :, None]  # (1, H, 1, 1, d_h)
        lam5 = lam[None, :, None, :, None]  # (1, H, 1, J, 1)
        inv_p = torch.complex(om.square() - lam5.square(), -2 * ga * lam5).reciprocal()  # 1 / p  (1, H, 1, J, d_h)
        z = torch.complex(qa, -qb)  # (B, H, T, J, d_h): q = Re sum_k Z_k e^{i lam_k t}
        e_t = torch.polar(torch.ones_like(tt[:, None, :, None] * lam[None, :, None]),
                          tt[:, None, :, None] * lam[None, :, None])[..., None]  # (B, H, T, J, 1): e^{i lam_k t}
        zj = z * e_t  # (B, H, T, J, d_h): Z_jk e^{i lam_k t_j}
        out = {"z": z, "e_t": e_t[..., 0], "q_now": zj.sum(3).real}  # q_now: q_j(t_j) (B, H, T, d_h)
        out["pq"] = (zj * inv_p).sum(3).real  # (B, H, T, d_h)
        out["rq"] = (zj * inv_p * (2 * ga - 1j * lam5)).sum(3).real
        ya = e_t * inv_p * (key["v0"][:, :, :, None] + (2 * ga - 1j * lam5) * key["x0"][:, :, :, None])  # F(0)
        qfeat, kfeat = [z], [ya]  # (B, H, T, J, d_h) each
        if key["w"] is not None:  # steady-state drive terms, factored per mode pair (k, m)
            w = key["w"]  # (B, H, T, J, d_h)
            eye = torch.eye(lam.shape[-1], dtype=torch.bool, device=lam.device)
            inv_pl = 1 / (1j * (lam[:, :, None] + lam[:, None, :]))  # (H, J_k, J_m): 1 / i(lam_k + lam_m)
            inv_mi = torch.where(eye, 0, 1 / (1j * torch.where(eye, 1.0, lam[:, :, None] - lam[:, None, :])))
            kfeat[0] = ya - 0.5 * e_t * (torch.einsum("hkm,bhimc->bhikc", inv_pl, w)
                                         + torch.einsum("hkm,bhimc->bhikc", inv_mi, w.conj()))
            qfeat += [e_t * torch.einsum("hkm,bhjkc->bhjmc", inv_pl, zj),  # (B, H, T, J_m, d_h)
                      e_t.conj() * torch.einsum("hkm,bhjkc->bhjmc", inv_mi, zj)]
            kfeat += [0.5 * w * e_t.conj(), 0.5 * w.conj() * e_t]
            out["qdelta"], out["kdelta"] = z.flatten(3), (e_t * w.conj()).flatten(3)  # (B, H, T, J d_h)
        out["qfeat"] = torch.cat([f.flatten(3) for f in qfeat], -1)  # (B, H, T, F)
        out["kfeat"] = torch.cat([f.flatten(3) for f in kfeat], -1)
        if val["w"] is not None:
            kv = (val["w"] * e_t.conj()).flatten(3)  # (B, H, T, J d_h): W_im e^{-i lam_m t_i}
            out["vfeat"] = torch.view_as_real(kv).flatten(-2)  # (B, H, T, J d_h 2): interleaved (re, im)
        return out

    def _rows(self, j0: int, j1: int, tt: Tensor, qa: Tensor, qb: Tensor, lam: Tensor, key: dict, val: dict,
              feats: dict) -> tuple[Tensor, Tensor, Tensor]:
        """Outputs (B, H, C, d_h), weights and logits (B, H, C, T) for query rows j0..j1-1 (C = j1 - j0)."""
        n = tt.shape[1]
        delta = tt[:, j0:j1, None] - tt[:, None, :]  # (B, C, T): t_j - t_i
        allowed = torch.ones(j1 - j0, n, dtype=torch.bool, device=tt.device).tril(j0)  # i <= j (Def. 2)
        er = feats["e_t"][:, :, j0:j1, :, None]  # (B, H, C, J, 1): e^{i lam_k t_j}
        # F(0) and steady-state drive terms: Re <query features_j, key features_i> over (mode, channel)
        num = _re_matmul(feats["qfeat"][:, :, j0:j1], feats["kfeat"])  # (B, H, C, T)
        if "kdelta" in feats:  # secular k = m drive term, linear in Delta (Eq. 61)
            num = num + 0.5 * delta[:, None] * _re_matmul(feats["qdelta"][:, :, j0:j1], feats["kdelta"])
        # -F(Delta) = -<pq, x'(Delta)> - <rq, x(Delta)> through the transient modes, e^{r Delta} = e^{r s_j} e^{-r s_i}
        pq, rq = feats["pq"][:, :, j0:j1], feats["rq"][:, :, j0:j1]  # (B, H, C, d_h)
        tau = tt[:, j0, None]  # (B, 1): anchor of this block
        s_q, s_k = (tt[:, j0:j1] - tau)[:, None, :, None], (tt[:, :j1] - tau)[:, None, :, None]  # (B, 1, C|K, 1)
        r = key["r"]  # (1, H, 1, 2 d_h)
        qf = (torch.cat([pq, pq], -1) * r + torch.cat([rq, rq], -1)) * torch.exp(r * s_q)  # (B, H, C, 2 d_h)
        kf = key["a"][:, :, :j1] * torch.exp(-r * s_k)  # (B, H, K, 2 d_h), K = j1 keys
        num = num - F.pad(_re_matmul(qf, kf), (0, n - j1))  # keys i >= j1 are masked (i > j)
        lag = delta.clamp_min(0)  # (B, C, T); masked pairs evaluated at 0
        if key["crit"].any():  # near-critical channels: per-pair states (stable series), few channels
            num = num - self._critical_pairs(lag, key, pq, rq)
        # ties (Delta = 0): alpha = <q_j(t_i), k_i(t_i)> = <q_j(t_j), K_i> (Eq. 78, second line), a matrix product
        tie = allowed & (delta == 0)  # (B, C, T)
        alpha_tie = feats["q_now"][:, :, j0:j1] @ key["e"].transpose(-1, -2)  # (B, H, C, T)
        # tiny lags: Gauss-Legendre average of the closed-form trajectories (1/Delta loses digits as Delta -> 0)
        om, ga = key["omega"], key["omega"] * key["zeta"]
        rho = (lam.max() + torch.maximum(lam.max(), torch.maximum(om.max(), 2 * ga.max()))).detach()
        small = allowed & ~tie & (delta * rho < self.small_lag)  # (B, C, T)
        alpha = num / torch.where(small | tie | ~allowed, 1.0, delta)[:, None]  # Eq. (74): (1/Delta) int
        if small.any():
            alpha = torch.where(small[:, None], self._small_lag_logits(small, j0, tt, qa, qb, lam, key), alpha)
        alpha = torch.where(tie[:, None], alpha_tie, alpha)
        logits = (alpha / math.sqrt(self.d_head)).masked_fill(~allowed, float("-inf"))
        weights = logits.softmax(dim=-1)  # (B, H, C, T), Eq. (79)
        # value transient at t_j: sum_i w_ji x_i(Delta_ji) = Re sum_m e^{r_m s_j} sum_i w_ji a_im e^{-r_m s_i}
        rv = val["r"]  # (1, H, 1, 2 d_h)
        vf = val["a"][:, :, :j1] * torch.exp(-rv * s_k)  # (B, H, K, 2 d_h)
        mix = weights[..., :j1] @ torch.view_as_real(vf).flatten(-2)  # (B, H, C, 2 d_h 2)
        y = (torch.view_as_complex(mix.unflatten(-1, (-1, 2))) * torch.exp(rv * s_q)).real  # (B, H, C, 2 d_h)
        y = sum(y.chunk(2, -1))  # (B, H, C, d_h): modes + and -
        if val["crit"].any():
            y = y + self._critical_values(lag, val, weights)
        if val["w"] is not None:  # steady state v_ss,i(t_j) = Re sum_m W_im e^{i lam_m (t_j - t_i)}
            kv = feats["vfeat"]  # (B, H, T, 2 J d_h): [Re, Im] of W_im e^{-i lam_m t_i}
            mix = (weights @ kv).unflatten(-1, (*val["w"].shape[-2:], 2))  # (B, H, C, J, d_h, 2)
            y = y + (er * torch.view_as_complex(mix)).real.sum(3)
        return y, weights, alpha.masked_fill(~allowed, float("-inf"))

    @staticmethod
    def _crit_channels(osc: dict) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Flat channel ids (h * d_h + c), head ids, and omega, zeta (1, 1, 1, N) of the ``crit`` channels."""
        d = osc["crit"].shape[-1]
        idx = osc["crit"].reshape(-1).nonzero().squeeze(1)  # (N,)
        om, ze = (osc[k].reshape(-1)[idx].view(1, 1, 1, -1) for k in ("omega", "zeta"))
        return idx, idx // d, om, ze

    @staticmethod
    def _flat(z: Tensor, idx: Tensor) -> Tensor:
        """(B, H, T, d_h) -> (B, T, N): the channels idx of the flattened (H d_h) axis."""
        return z.transpose(1, 2).flatten(2)[..., idx]

    def _critical_pairs(self, lag: Tensor, key: dict, pq: Tensor, rq: Tensor) -> Tensor:
        """<pq_j, x_i'(Delta)> + <rq_j, x_i(Delta)> (B, H, C, T) summed over the near-critical key channels only,
        with per-pair states from ``oscillator_state`` (its series branch is exact at zeta = 1)."""
        idx, heads, om, ze = self._crit_channels(key)
        xh, vh = oscillator_state(lag[..., None], self._flat(key["x0"], idx)[:, None],
                                  self._flat(key["v0"], idx)[:, None], om, ze)  # (B, C, T, N)
        part = self._flat(pq, idx)[:, :, None] * vh + self._flat(rq, idx)[:, :, None] * xh  # (B, C, T, N)
        b, c, t, _ = part.shape
        out = part.new_zeros(b, c, t, self.n_heads).index_add(3, heads, part)  # (B, C, T, H)
        return out.permute(0, 3, 1, 2)

    def _critical_values(self, lag: Tensor, val: dict, weights: Tensor) -> Tensor:
        """sum_i w_ji x_i(Delta_ji) (B, H, C, d_h) on the near-critical value channels (zero elsewhere)."""
        idx, heads, om, ze = self._crit_channels(val)
        xv, _ = oscillator_state(lag[..., None], self._flat(val["x0"], idx)[:, None],
                                 self._flat(val["v0"], idx)[:, None], om, ze)  # (B, C, T, N)
        part = torch.einsum("bnji,bjin->bjn", weights[:, heads], xv)  # (B, C, N)
        b, h, c, d = weights.shape[0], self.n_heads, weights.shape[2], val["x0"].shape[-1]
        out = part.new_zeros(b, c, h * d).index_add(2, idx, part)  # (B, C, H d_h)
        return out.view(b, c, h, d).transpose(1, 2)

    def _small_lag_logits(self, small: Tensor, j0: int, tt: Tensor, qa: Tensor, qb: Tensor, lam: Tensor,
                          key: dict) -> Tensor:
        """alpha (B, H, C, T) on the pairs marked ``small`` (zero elsewhere) by n_gauss-point Gauss-Legendre."""
        b, c, n = small.shape
        bi, jj, ii = small.nonzero(as_tuple=True)  # (P,) each
        out = torch.zeros(b, c, n, self.n_heads, dtype=tt.dtype, device=tt.device)
        if bi.numel() == 0:
            return out.permute(0, 3, 1, 2)
        nodes, wts = gauss_legendre(self.n_gauss, tt.dtype, tt.device)  # (G,)
        s = (tt[bi, j0 + jj] - tt[bi, ii])[:, None] * nodes  # (P, G) lags of the nodes
        tau = (tt[bi, ii][:, None] + s)[:, None, :, None] * lam[None, :, None]  # (P, H, G, J): lam_k tau
        qv = (torch.einsum("phgk,phkc->phgc", tau.cos(), qa[bi, :, j0 + jj])
              + torch.einsum("phgk,phkc->phgc", tau.sin(), qb[bi, :, j0 + jj]))  # (P, H, G, d_h): q_j(tau)
        kv, _ = oscillator_state(s[:, None, :, None], key["x0"][bi, :, ii][:, :, None],
                                 key["v0"][bi, :, ii][:, :, None], key["omega"], key["zeta"])  # (P, H, G, d_h)
        if key["w"] is not None:
            phase = s[:, None, :, None] * lam[None, :, None]  # (P, H, G, J)
            rot = torch.polar(torch.ones_like(phase), phase)
            kv = kv + torch.einsum("phgm,phmc->phgc", rot, key["w"][bi, :, ii]).real
        vals = ((qv * kv).sum(-1) * wts).sum(-1)  # (P, H)
        return out.index_put((bi, jj, ii), vals).permute(0, 3, 1, 2)
