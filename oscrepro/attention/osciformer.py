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
* Query fit: coef_j = G_j^{-1} sum_{l <= j} phi_l Q_l^T (``ridge_query_coef``) as (G_j^{-1} phi_l) @ Q, one matrix
  product per batch row; G_j (times and grid only) is shared by heads with the same fixed grid.
* The transient is written in its exponential modes (``transient_modes``): x(s) = sum_m a_m e^{r_m s}, r_pm =
  -gamma +- i mu. Since e^{r (t_j - t_i)} = e^{r (t_j - tau)} e^{-r (t_i - tau)}, the F(Delta) term is
  Re(Q K^T) with per-token factors, and so is the value transient sum_i w_ji x_i(Delta_ji) (weights @ factors).
  tau is the first time of a block of query rows (``_chunks``); blocks are cut so that rate * (t - tau) <=
  ``MAX_GROWTH`` for the keys they use, so no factor overflows, and each factor has relative error ~eps |r| t.
  The 1/mu in a_m loses digits near critical damping, so channels with |1 - zeta^2| < 1e-2 (or mu < 1e-3) keep
  the per-pair ``oscillator_state`` (stable series at zeta = 1), gathered over those channels only.
* The steady state is rank one in (token, mode) for both drives: W_im = u_i G_m (u = P - iQ and G = 1/conj(p)
  for ``matrix``; u = E and G = (g - ih)/conj(p) for ``gains``), so x_ss(0), x_ss'(0) are u_i . (sum_m G_m, ...)
  and no (B, H, T, J, d_h) amplitude is built. Of the drive terms of int <q_j, x_ss,i>, the two oscillating
  ones (lam_k + lam_m and lam_k - lam_m) pair with the same key factor X_im = u_i G_m e^{-i lam_m t_i} (one
  enters conjugated: Re(a conj b) = Re(conj(a) b)), so their query factors add into one, Qd_j, whose mode
  mixing (1/(lam_k +- lam_m)) is one real (2J, 2J) matrix; the secular k = m term (Delta/2) Re <conj Z_j, X_i>
  is split with Delta = s_j - s_i (s = t - t_first of the batch row) into Qd_j and the key factor K_i of the
  F(0) term. The constant (s = 0) drive parts reduce to per-head sums S_k = sum_m G_m / (lam_k +- lam_m) times
  u_i, so K_i = e^{i lam t_i} sum_f C_f feature_f(i) over six real per-token features (v0, x0, Re u, Im u,
  s Re u, s Im u; one small matrix product). All logit terms are then one real matrix product of
  [conj Z_j, conj Qd_j] against [K_i, X_i] (inner size 2 J d_h complex, was 4 J d_h), and the value steady
  state is weights @ (u_i e^{-i lam t_i}) times e^{i lam t_j} G. Each step is an algebraic identity of the
  same closed form (Eqs. 58-64), so only rounding changes.
* Delta = 0 (ties, e.g. padding): alpha = <q_j(t_j), K_i> exactly (Eq. 78, second line), a matrix product.
* 0 < Delta * rho < ``small_lag`` (rho bounds every frequency and decay rate of q k): the (F(0) - F(Delta)) / Delta
  difference has absolute error ~eps |F| / Delta, where |F| includes near-resonant amplitudes |G| ~ 1/(2 zeta
  omega lam) that cancel between steady state and transient, so these pairs use an ``n_gauss``-point
  Gauss-Legendre average of the closed-form trajectories instead. Measured against it (bench init, omega
  down to 1e-2), the closed-form logit error is ~3e-10 / Delta: <= 3e-9 for Delta * rho >= 0.5 (the default,
  so gaps of 1/32 at rho = 20 use the closed form), growing to 1e-2 at Delta = 1e-8. That is below the float32
  rounding of the layer's output; ``test_small_lag_threshold_error_bound`` checks it against the reference.
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
  weakly damped channels near a grid frequency, and float32 loses the gradient there. For the same reason the
  fast path stays in float64: at init |G| reaches ~1e5 (omega ~ lam ~ 1e-2, zeta = 0.05) and cancels between
  steady state and transient, so float32's eps ~6e-8 would leave errors of order one percent in the logits.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.base import AttentionBase, Aux, fp32_only, merge_heads, one_of, refuse, split_heads, whole
from oscrepro.attention.oscillator_kernels import (
    FREQ_GRIDS,
    frequency_grid,
    gauss_legendre,
    oscillator_state,
    ridge_query_coef,
    steady_state_amplitude,
    transient_modes,
)

DRIVES = ("matrix", "gains", "none")
MAX_GROWTH = 300.0  # bound on rate * (t - anchor) in the separable factors: e^300 ~ 1e130, far from overflow


def _re_matmul(a: Tensor, b: Tensor) -> Tensor:
    """Re(a @ b^T) for complex a (..., C, M), b (..., K, M) as one real matrix product over interleaved
    (re, im) pairs: Re(a b) = [a_re, a_im] . [b_re, -b_im]."""
    return torch.view_as_real(a).flatten(-2) @ torch.view_as_real(b.conj().resolve_conj()).flatten(-2).mT


def _cexp(r: Tensor, s: Tensor) -> Tensor:
    """e^{r s} for complex r and real s (broadcasting), as polar(e^{Re r s}, Im r s): real exp/cos/sin."""
    return torch.polar(torch.exp(r.real * s), r.imag * s)


class OsciFormerAttention(AttentionBase):
    """Continuous-time attention over damped driven oscillator keys/values, closed-form logits (Eqs. 2, 48, 74-79)."""

    continuous_time: ClassVar[bool] = True

    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0, n_modes: int = 8, freq_grid: str = "log",
                 freq_range: tuple[float, float] = (1e-2, 1e1), learn_freqs: bool = False,
                 harmonic_span: float = 10.0, omega_range: tuple[float, float] = (1e-2, 1e1),
                 zeta_range: tuple[float, float] = (0.05, 0.4), drive: str = "matrix", ridge: float = 1e-2,
                 bias: bool = True, chunk_size: int | None = None, kernel_dtype: str = "float64",
                 small_lag: float = 0.5, n_gauss: int = 6) -> None:
        refuse(OsciFormerAttention.config_problems(d_model, n_heads, n_modes=n_modes, freq_grid=freq_grid, drive=drive,
                                                   kernel_dtype=kernel_dtype))
        super().__init__(d_model, n_heads, layer_idx)
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

    @classmethod
    def config_problems(cls, d_model: int, n_heads: int, *, n_modes: int = 8, freq_grid: str = "log",
                        drive: str = "matrix", kernel_dtype: str = "float64", **hparams: Any) -> list[str]:
        """The shared head split; J >= 1 query modes; a known collocation grid and drive; a floating kernel dtype."""
        problems = (super().config_problems(d_model, n_heads, **hparams) + one_of("freq_grid", freq_grid, FREQ_GRIDS)
                    + one_of("drive", drive, DRIVES))
        if not whole(n_modes, 1):
            problems.append(f"n_modes={n_modes!r} must be an integer >= 1 (J query modes)")
        dtype = getattr(torch, str(kernel_dtype), None)
        if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            problems.append(f"kernel_dtype={kernel_dtype!r} must name a torch floating dtype (float64, float32)")
        return problems

    def omega_zeta(self, role: str) -> tuple[Tensor, Tensor]:
        """(omega, zeta) of the key ("k") or value ("v") oscillators, each (H, d_h), in the kernel dtype."""
        kd = self.kernel_dtype
        return getattr(self, f"log_omega_{role}").to(kd).exp(), F.softplus(getattr(self, f"zeta_raw_{role}").to(kd))

    def oscillator(self, role: str, e: Tensor, lam: Tensor) -> dict[str, Tensor]:
        """Per-token oscillator data for projections e (B, H, T, d_h): omega, zeta (1, H, 1, d_h); transient anchor
        state x0, v0 (B, H, T, d_h); the steady state W_im = u_i G_m (Eq. 64), rank one in (token, mode): drive
        u (B, H, T, d_h) and response G (H, J, d_h), complex (None when undriven); the transient's modes."""
        omega, zeta = self.omega_zeta(role)  # (H, d_h)
        u_mat = getattr(self, f"velocity_{role}").to(e.dtype)
        v_init = torch.einsum("hcd,bhtd->bhtc", u_mat, e)  # x'(t_i) = U E_i (Sec. 6)
        out = {"omega": omega[None, :, None], "zeta": zeta[None, :, None], "x0": e, "v0": v_init, "e": e,
               "u": None, "g": None}
        if self.drive == "none":
            return self._modes(out)
        a, b = (getattr(self, f"drive_{n}_{role}").to(e.dtype) for n in ("cos", "sin"))
        lam3, om3, ze3 = lam[:, :, None], omega[:, None], zeta[:, None]  # (H, J, 1), (H, 1, d_h)
        if self.drive == "matrix":  # P_im = A_h E_i, Q_im = B_h E_i for every m: u = P - iQ, G = 1 / (conj p)
            u = torch.complex(torch.einsum("hcd,bhtd->bhtc", a, e), -torch.einsum("hcd,bhtd->bhtc", b, e))
            g = steady_state_amplitude(torch.ones_like(om3), torch.zeros_like(om3), lam3, om3, ze3)  # (H, J, d_h)
        else:  # P_im = g_m E_i, Q_im = h_m E_i: u = E_i, G = (g - i h) / (conj p)
            u = torch.complex(e, torch.zeros_like(e))
            g = steady_state_amplitude(a, b, lam3, om3, ze3)  # (H, J, d_h)
        out["x0"] = e - (u * g.sum(1)[:, None]).real  # transient anchor state: minus x_ss(0) = Re sum_m W_m
        out["v0"] = v_init - (u * (1j * lam3 * g).sum(1)[:, None]).real  # and x_ss'(0) = Re sum_m i lam_m W_m
        out["u"], out["g"] = u, g
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
            coef = ridge_query_coef(tt, q, lam, self.ridge)  # (B, H, T, d_h, J, 2): (A, B), Eq. (48) on prefixes
            key, val = self.oscillator("k", k, lam), self.oscillator("v", v, lam)
            feats = self._features(tt, coef, lam, key, val)
            parts = [self._rows(j0, j1, tt, lam, key, val, feats) for j0, j1 in self._chunks(tt, key, val)]
            y, weights, logits = parts[0] if len(parts) == 1 else (torch.cat(z, 2) for z in zip(*parts, strict=True))
        aux: Aux = {}
        if need_weights:
            aux = {"weights": weights.to(x.dtype), "logits": logits.to(x.dtype),
                   "query_cos": coef[..., 0].transpose(-1, -2), "query_sin": coef[..., 1].transpose(-1, -2),
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

    def _features(self, tt: Tensor, coef: Tensor, lam: Tensor, key: dict, val: dict) -> dict[str, Tensor]:
        """Per-token factors of the closed-form logit, so that every pair term is a matrix product.

        With conj Z_j = A_j + i B_j (so q_j(tau) = Re sum_k Z_jk e^{i lam_k tau}), xi_j = conj(Z_j e^{i lam t_j}):
        q_now = q_j(t_j), pq, rq (B, H, T, d_h) are the query sides of the tie product and of -F(Delta); qfeat,
        kfeat are lists of real (B, H, T, 2 J d_h) factors, [conj Z_j] x [K_i] plus, when driven,
        [conj Qd_j] x [X_i] (module doc), interleaved (re, im) so that Re <a, b> is one real matrix product."""
        om, ga = key["omega"][0, :, 0, :, None], (key["omega"] * key["zeta"])[0, :, 0, :, None]  # (H, d_h, 1)
        lam_c = lam[:, None, :]  # (H, 1, J)
        inv_p = torch.complex(om.square() - lam_c.square(), -2 * ga * lam_c).reciprocal()  # 1 / p  (H, d_h, J)
        beta = torch.complex(2 * ga.expand_as(inv_p.real), -lam_c.expand_as(inv_p.real)) * inv_p  # (2 gamma - i lam)/p
        theta = tt[:, None, :, None] * lam[None, :, None]  # (B, H, T, J): lam_k t
        rot = torch.polar(torch.ones_like(theta), theta)[:, :, :, None]  # (B, H, T, 1, J): e^{i lam_k t}
        zc = torch.view_as_complex(coef)  # (B, H, T, d_h, J): A + i B = conj Z
        xi = torch.view_as_real(zc * rot.conj())  # (B, H, T, d_h, J, 2): conj(Z_jk e^{i lam_k t_j}), (Re, Im)
        # q_j(t_j) = Re sum_k xi; query sides of -F(Delta): Re sum_k xi conj(c) = sum_k (Re xi Re c + Im xi Im c)
        c_pq, c_rq = (torch.view_as_real(c)[None, :, None] for c in (inv_p, beta))  # (1, H, 1, d_h, J, 2)
        out = {"q_now": xi.sum(-2)[..., 0], "zc": zc, "pq": (xi * c_pq).sum((-2, -1)), "rq": (xi * c_rq).sum((-2, -1))}
        # key K_i = e^{i lam t_i} (v0 / p + x0 (2 gamma - i lam) / p + drive terms): sum_f coefficient_f * feature_f
        feat, cols = [key["v0"], key["x0"]], [[inv_p, beta]]
        qfeat = [coef.flatten(3)]  # conj Z_j as (B, H, T, d_h J 2), interleaved (re, im)
        if key["u"] is not None:
            g = key["g"].transpose(1, 2)  # (H, d_h, J)
            j = lam.shape[-1]
            eye = torch.eye(j, dtype=torch.bool, device=lam.device)
            m_pl = 1 / (lam[:, None, :] + lam[:, :, None])  # (H, J_m, J_k): 1 / (lam_k + lam_m), symmetric
            m_mi = torch.where(eye, 0, 1 / torch.where(eye, 1.0, lam[:, None, :] - lam[:, :, None]))  # 1/(lam_k-lam_m)
            s1 = 0.5j * (g @ m_pl.to(g.dtype))  # (H, d_h, J_k): -1/2 sum_m G_m / (i (lam_k + lam_m))
            s2 = 0.5j * (g.conj() @ m_mi.to(g.dtype))  # -1/2 sum_{m != k} conj G_m / (i (lam_k - lam_m))
            u, s = key["u"], (tt - tt[:, :1])[:, None, :, None]  # s: secular split Delta = s_j - s_i
            feat += [u.real, u.imag, s * u.real, s * u.imag]
            zero = torch.zeros_like(g)
            cols = [[inv_p, beta, s1 + s2, 1j * (s1 - s2), -0.5 * g.conj(), 0.5j * g.conj()],  # K_i
                    [zero, zero, g, 1j * g, zero, zero]]  # X_i = u_i G e^{-i lam t_i}
            # conj Qd_j = (i/2) e^{-i lam t_j} (M+ xi - M- conj xi) + (s_j / 2) conj(conj Z_j): Re = (M+ - M-) Re xi,
            # Im = (M+ + M-) Im xi over the mode axis (M+ = 1/(lam_k+lam_m), M- = 1/(lam_k-lam_m)): one real
            # (2J, 2J) matrix on the interleaved (mode, re/im) axis
            m_z = torch.zeros(lam.shape[0], j, 2, j, 2, dtype=lam.dtype, device=lam.device)  # (H, J_m, 2, J_k, 2)
            m_z[:, :, 0, :, 0], m_z[:, :, 1, :, 1] = m_pl - m_mi, m_pl + m_mi
            b_, h_, n_, d_ = u.shape
            mix = xi.reshape(b_, h_, n_ * d_, 2 * j) @ m_z.flatten(3).flatten(1, 2).mT  # (B, H, T d_h, 2J)
            mix = torch.view_as_complex(mix.view(b_, h_, n_, d_, j, 2))  # (B, H, T, d_h, J)
            cqd = mix * (0.5j * rot.conj()) + 0.5 * s[..., None] * zc.conj()  # (B, H, T, d_h, J)
            qfeat.append(torch.view_as_real(cqd).flatten(3))  # (B, H, T, d_h J 2)
        ck = torch.view_as_real(torch.stack([torch.stack(c, 2) for c in cols], 3))  # (H, d_h, F, O, J, 2)
        kb = torch.einsum("bhtcf,hcfoy->bhtocy", torch.stack(feat, -1), ck.flatten(4)).contiguous()  # (.., O, d_h, 2J)
        kb = torch.view_as_complex(kb.view(*kb.shape[:5], -1, 2))  # (B, H, T, O, d_h, J)
        kc = kb * (rot[:, :, :, None] if len(cols) == 1 else torch.stack([rot, rot.conj()], 3))  # e^{+-i lam t_i}
        kc = torch.view_as_real(kc)  # (B, H, T, O, d_h, J, 2)
        out["qfeat"], out["kfeat"] = qfeat, [k.flatten(3) for k in kc.unbind(3)]  # (B, H, T, F) each
        if val["u"] is not None:  # value steady state: Re sum_m (e^{i lam_m t_j} G_m) sum_i w_ji u_i e^{-i lam_m t_i}
            out["vfeat"] = torch.view_as_real(val["u"][..., None] * rot.conj()).flatten(3)  # (B, H, T, 2 J d_h)
            gain = rot.conj().resolve_conj() * val["g"].transpose(1, 2).conj().resolve_conj()[None, :, None]
            out["vgain"] = torch.view_as_real(gain).flatten(-2)  # (B, H, T, d_h, 2J): Re(a b) = <(Re, -Im) a, b>
        return out

    def _rows(self, j0: int, j1: int, tt: Tensor, lam: Tensor, key: dict, val: dict, feats: dict
              ) -> tuple[Tensor, Tensor, Tensor]:
        """Outputs (B, H, C, d_h), weights and logits (B, H, C, T) for query rows j0..j1-1 (C = j1 - j0)."""
        n = tt.shape[1]
        delta = tt[:, j0:j1, None] - tt[:, None, :]  # (B, C, T): t_j - t_i
        allowed = torch.ones(j1 - j0, n, dtype=torch.bool, device=tt.device).tril(j0)  # i <= j (Def. 2)
        # F(0) and steady-state drive terms (secular one included): Re <query features_j, key features_i>
        num = sum(qf[:, :, j0:j1] @ kf.mT for qf, kf in zip(feats["qfeat"], feats["kfeat"], strict=True))  # (B,H,C,T)
        # -F(Delta) = -<pq, x'(Delta)> - <rq, x(Delta)> through the transient modes, e^{r Delta} = e^{r s_j} e^{-r s_i}
        pq, rq = feats["pq"][:, :, j0:j1], feats["rq"][:, :, j0:j1]  # (B, H, C, d_h)
        tau = tt[:, j0, None]  # (B, 1): anchor of this block
        s_q, s_k = (tt[:, j0:j1] - tau)[:, None, :, None], (tt[:, :j1] - tau)[:, None, :, None]  # (B, 1, C|K, 1)
        r = key["r"]  # (1, H, 1, 2 d_h)
        qf = (torch.cat([pq, pq], -1) * r + torch.cat([rq, rq], -1)) * _cexp(r, s_q)  # (B, H, C, 2 d_h)
        kf = key["a"][:, :, :j1] * _cexp(-r, s_k)  # (B, H, K, 2 d_h), K = j1 keys
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
            alpha = torch.where(small[:, None], self._small_lag_logits(small, j0, tt, lam, key, feats), alpha)
        alpha = torch.where(tie[:, None], alpha_tie, alpha)
        logits = (alpha / math.sqrt(self.d_head)).masked_fill(~allowed, float("-inf"))
        weights = logits.softmax(dim=-1)  # (B, H, C, T), Eq. (79)
        # value transient at t_j: sum_i w_ji x_i(Delta_ji) = Re sum_m e^{r_m s_j} sum_i w_ji a_im e^{-r_m s_i}
        rv = val["r"]  # (1, H, 1, 2 d_h)
        vf = val["a"][:, :, :j1] * _cexp(-rv, s_k)  # (B, H, K, 2 d_h)
        mix = weights[..., :j1] @ torch.view_as_real(vf).flatten(-2)  # (B, H, C, 2 d_h 2)
        y = (torch.view_as_complex(mix.unflatten(-1, (-1, 2))) * _cexp(rv, s_q)).real  # (B, H, C, 2 d_h)
        y = sum(y.chunk(2, -1))  # (B, H, C, d_h): modes + and -
        if val["crit"].any():
            y = y + self._critical_values(lag, val, weights)
        if "vfeat" in feats:  # steady state v_ss,i(t_j) = Re sum_m G_m e^{i lam_m t_j} u_i e^{-i lam_m t_i}
            mix = (weights @ feats["vfeat"]).view(feats["vgain"][:, :, j0:j1].shape)  # (B, H, C, d_h, 2J)
            y = y + (feats["vgain"][:, :, j0:j1] * mix).sum(-1)
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

    def _small_lag_logits(self, small: Tensor, j0: int, tt: Tensor, lam: Tensor, key: dict, feats: dict) -> Tensor:
        """alpha (B, H, C, T) on the pairs marked ``small`` (zero elsewhere) by n_gauss-point Gauss-Legendre."""
        b, c, n = small.shape
        bi, jj, ii = small.nonzero(as_tuple=True)  # (P,) each
        out = torch.zeros(b, c, n, self.n_heads, dtype=tt.dtype, device=tt.device)
        if bi.numel() == 0:
            return out.permute(0, 3, 1, 2)
        nodes, wts = gauss_legendre(self.n_gauss, tt.dtype, tt.device)  # (G,)
        s = (tt[bi, j0 + jj] - tt[bi, ii])[:, None] * nodes  # (P, G) lags of the nodes
        tau = (tt[bi, ii][:, None] + s)[:, None, :, None] * lam[None, :, None]  # (P, H, G, J): lam_k tau
        rot = torch.polar(torch.ones_like(tau), -tau)  # e^{-i lam_k tau}
        qv = torch.einsum("phgk,phck->phgc", rot, feats["zc"][bi, :, j0 + jj]).real  # (P, H, G, d_h): q_j(tau)
        kv, _ = oscillator_state(s[:, None, :, None], key["x0"][bi, :, ii][:, :, None],
                                 key["v0"][bi, :, ii][:, :, None], key["omega"], key["zeta"])  # (P, H, G, d_h)
        if key["u"] is not None:  # + Re sum_m u_i G_m e^{i lam_m s}
            phase = s[:, None, :, None] * lam[None, :, None]  # (P, H, G, J)
            ss = torch.einsum("phgm,hmc->phgc", torch.polar(torch.ones_like(phase), phase), key["g"])
            kv = kv + (ss * key["u"][bi, :, ii][:, :, None]).real
        vals = ((qv * kv).sum(-1) * wts).sum(-1)  # (P, H)
        return out.index_put((bi, jj, ii), vals).permute(0, 3, 1, 2)
