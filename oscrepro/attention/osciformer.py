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

The closed form (re-derived; the paper's Eqs. 72-77 are per-regime and singular at zeta = 1). A key is its
steady state x_ss,i(s) = Re sum_m u_i G_m e^{i lam_m s} (Eq. 64, rank one in token and mode) plus a homogeneous
transient from the anchor state (x0, v0) = (K_i, U K_i) minus the steady state's. For the transient x and a query
mode e^{i lam s}, integrating the ODE against e^{i lam s} gives

    int_0^Delta e^{i lam s} x(s) ds = (F(0) - F(Delta)) / p,  F(s) = e^{i lam s} (x'(s) + (2 gamma - i lam) x(s)),
    p = omega^2 - lam^2 - 2 i gamma lam,

so only the state at t_i and at t_j enters. Every pair term is an inner product of per-token factors:

* F(0) and the constant drive parts: Re <z_j, K_i> with z_j = A_j - i B_j, K_i = e^{i lam t_i} kappa_i
  (``osciformer_response``); the oscillating and secular drive parts: Re <conj Qd_j, conj X_i>
  (``osciformer_query``). Inner size 2 J d_h complex = 4 J d_h real (driven), 2 J d_h (undriven).
* -F(Delta) = -(pq_j x_i'(Delta) + rq_j x_i(Delta)) through the transient written as two real numbers per
  channel anchored at the first time tau of an anchor segment: the key's state (Y_i, Y_i') at tau (carried back
  from t_i by ``oscillator_state``; in the first segment, whose keys are its rows, as P(t_i - tau)^{-1} (x0, v0))
  and the 2 x 2 propagator P from tau to t_j,
  [x; x'](t_j) = [[c + gamma s, s], [-omega^2 s, c - gamma s]] [Y; Y'] with (c, s) = e^{-gamma a} (C, S)(a),
  C = cos(mu a), S = sin(mu a) / mu, a = t_j - tau (``damped_basis``). C and S are entire in mu^2, so critical
  damping needs no fallback. In a strongly overdamped channel (mu = i sigma, sigma L > 1 for the longest
  segment L) the product e^{-gamma a} C(a) e^{gamma b} C(b) cancels to e^{-(gamma - sigma)(a - b)} with
  relative error eps e^{2 sigma b}, so those channels use their eigenmodes instead: Y_pm = a_pm e^{(gamma -+
  sigma) (t_i - tau)}, propagator [[e^{r+ a}, e^{r- a}], [r+ e^{r+ a}, r- e^{r- a}]], r_pm = -gamma +- sigma
  (amplitudes a_pm ~ 1/sigma, bounded there). Segments are cut so that (gamma + sigma) (t - tau) <=
  ``MAX_GROWTH`` for the keys they use (no overflow).
* Values: sum_i w_ji v_i(t_j) = propagator(t_j) (sum_i w_ji (Y_i, Y_i')) + Re sum_m G_m e^{i lam_m t_j}
  sum_i w_ji u_i e^{-i lam_m t_i}: per-token value factors mixed by the weights.
* The query fit is done by prefix sums (O(T J^2 d_h), ``osciformer_query``); the pair part is
  ``osciformer_core.causal_core``: query rows in blocks that read only earlier keys, with a hand-written
  backward that keeps no (B, H, T, T) autograd intermediates. The batch runs in blocks whose largest tensors
  stay below ``BATCH_BYTES`` (fresh large allocations are slow on CPU).
* Delta = 0 (ties, e.g. padding): alpha = <q_j(t_j), K_i> exactly (Eq. 78, second line; ``osciformer_pairs``).
* 0 < Delta * rho < ``small_lag`` (rho bounds every frequency and decay rate of q k): the (F(0) - F(Delta)) / Delta
  difference has absolute error ~eps |F| / Delta, where |F| includes near-resonant amplitudes |G| ~ 1/(2 zeta
  omega lam) that cancel between steady state and transient, so these pairs use an ``n_gauss``-point
  Gauss-Legendre average of the closed-form trajectories instead. Measured against it (bench init, omega
  down to 1e-2), the closed-form logit error is ~3e-10 / Delta: <= 3e-9 for Delta * rho >= 0.5 (the default,
  so gaps of 1/32 at rho = 20 use the closed form), growing to 1e-2 at Delta = 1e-8. That is below the float32
  rounding of the layer's output; ``test_small_lag_threshold_error_bound`` checks it against the reference.
Each step is an algebraic identity of the same closed form (Eqs. 58-64), so only rounding changes; tests compare
values and gradients with scipy ODE integration and quadrature in float64, on random and on XOR-like (k/32,
tied) times, and with the pre-rebuild kernel (``oscrepro.papers.osciformer.legacy_kernel``).

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
  weakly damped channels near a grid frequency. At init |G| reaches ~1e5 (omega ~ lam ~ 1e-2, zeta = 0.05)
  and cancels between steady state and transient, so float32's eps ~6e-8 leaves errors of order one percent:
  on the bench layer (B 4, T 256, |y| <= 3.3) float32 moves the output by up to 0.04.
* ``chunk_size`` caps the query rows per block of the causal core (``ROW_BLOCK`` when null); it changes only
  memory and speed.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.base import AttentionBase, Aux, fp32_only, merge_heads, one_of, refuse, split_heads, whole
from oscrepro.attention.osciformer_core import ROW_BLOCK, causal_core
from oscrepro.attention.osciformer_pairs import special_pairs
from oscrepro.attention.osciformer_query import query_factors
from oscrepro.attention.osciformer_response import key_projection, oscillator_constants, value_projection
from oscrepro.attention.oscillator_kernels import (
    FREQ_GRIDS,
    frequency_grid,
    oscillator_state,
)

DRIVES = ("matrix", "gains", "none")
MAX_GROWTH = 300.0  # bound on rate * (t - anchor) in the anchored factors: e^300 ~ 1e130, far from overflow
EIGEN_SPAN = 1.0  # overdamped channels with sigma * (longest segment) above this use eigenmodes (module doc)
BATCH_BYTES = 24 * 2**20  # batch rows per block: the largest per-token tensor stays below this


def _tokens(z: Tensor, j0: int, j1: int) -> Tensor:
    """Tokens j0..j1-1 of z (B, H, T, ...); z itself when that is all of them (slicing's backward fills zeros)."""
    return z if (j0, j1) == (0, z.shape[2]) else z[:, :, j0:j1]


class OsciFormerAttention(AttentionBase):
    """Continuous-time attention over damped driven oscillator keys/values, closed-form logits (Eqs. 2, 48, 74-79)."""

    continuous_time: ClassVar[bool] = True

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        layer_idx: int = 0,
        n_modes: int = 8,
        freq_grid: str = "log",
        freq_range: tuple[float, float] = (1e-2, 1e1),
        learn_freqs: bool = False,
        harmonic_span: float = 10.0,
        omega_range: tuple[float, float] = (1e-2, 1e1),
        zeta_range: tuple[float, float] = (0.05, 0.4),
        drive: str = "matrix",
        ridge: float = 1e-2,
        bias: bool = True,
        chunk_size: int | None = None,
        kernel_dtype: str = "float64",
        small_lag: float = 0.5,
        n_gauss: int = 6,
    ) -> None:
        refuse(
            OsciFormerAttention.config_problems(
                d_model, n_heads, n_modes=n_modes, freq_grid=freq_grid, drive=drive, kernel_dtype=kernel_dtype
            )
        )
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
    def config_problems(
        cls,
        d_model: int,
        n_heads: int,
        *,
        n_modes: int = 8,
        freq_grid: str = "log",
        drive: str = "matrix",
        kernel_dtype: str = "float64",
        **hparams: Any,
    ) -> list[str]:
        """The shared head split; J >= 1 query modes; a known collocation grid and drive; a floating kernel dtype."""
        problems = (
            super().config_problems(d_model, n_heads, **hparams)
            + one_of("freq_grid", freq_grid, FREQ_GRIDS)
            + one_of("drive", drive, DRIVES)
        )
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

    def constants(self, role: str, lam: Tensor) -> dict[str, Any]:
        """Per-head constants of the key ("k") or value ("v") oscillators (``oscillator_constants``) and their
        projection maps (``key_projection``, ``value_projection``)."""
        omega, zeta = self.omega_zeta(role)  # (H, d_h)
        kd = self.kernel_dtype
        drive = [getattr(self, f"drive_{n}_{role}", None) for n in ("cos", "sin")]
        c = oscillator_constants(
            omega,
            zeta,
            getattr(self, f"velocity_{role}").to(kd),
            self.drive,
            *(None if p is None else p.to(kd) for p in drive),
            lam,
        )
        if role == "k":
            c["proj"], c["qcoef"] = key_projection(c, lam)
        else:
            c["proj"] = value_projection(c)
        return c

    def forward(
        self,
        x: Tensor,
        *,
        causal: bool = False,
        pos: Tensor | None = None,
        times: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Aux]:
        b, n, _ = x.shape
        kd = self.kernel_dtype
        qkv = self.qkv(x)
        with fp32_only(x):
            tt = (torch.arange(n, device=x.device).expand(b, n) if times is None else times).to(kd)  # (B, T)
            q, k, v = (split_heads(z, self.n_heads).to(kd) for z in qkv.chunk(3, dim=-1))  # (B, H, T, d_h)
            lam = self.log_freqs.to(kd).exp()  # (H, J) collocation bank
            key, val = self.constants("k", lam), self.constants("v", lam)
            segments = self._segments(tt, key, val)
            span = max(float((tt[:, j1 - 1] - tt[:, j0]).amax()) for j0, j1 in segments)
            trans = self._transient_constants(key, val, span)
            om, ga = key["omega"].detach(), key["gamma"].detach()
            rho = float(lam.detach().max() + torch.maximum(lam.detach().max(), torch.maximum(om.max(), 2 * ga.max())))
            step = self._batch_step(b, n, lam.shape[-1])
            parts = [
                self._batch_block(
                    tt[i : i + step],
                    q[i : i + step],
                    k[i : i + step],
                    v[i : i + step],
                    lam,
                    key,
                    val,
                    trans,
                    segments,
                    rho,
                    need_weights,
                )
                for i in range(0, b, step)
            ]
            y, weights, logits, coef = (torch.cat(z) for z in zip(*parts, strict=True))
        aux: Aux = {}
        if need_weights:
            aux = {
                "weights": weights.to(x.dtype),
                "logits": logits.to(x.dtype),
                "query_cos": coef[..., 0],
                "query_sin": coef[..., 1],
                "freqs": lam,
            }
        return self.out(merge_heads(y).to(qkv.dtype)), aux

    def _batch_step(self, b: int, n: int, j: int) -> int:
        """Batch rows per block: the largest per-token tensor, the query maps' output (B, T, (6J + 2) d_h H)
        in the kernel dtype, stays below ``BATCH_BYTES``; blocks of equal size."""
        row = n * (6 * j + 2) * self.d_model * torch.finfo(self.kernel_dtype).bits // 8
        blocks = math.ceil(b / max(1, BATCH_BYTES // row))
        return math.ceil(b / blocks)

    def _segments(self, tt: Tensor, key: dict, val: dict) -> list[tuple[int, int]]:
        """Anchor segments [j0, j1) of query rows: short enough in time that the anchored key factors of the keys
        i < j1, growing like e^{rate (t_i - t_j0)} (rate = max gamma + sigma), stay below e^{MAX_GROWTH}."""
        n = tt.shape[1]
        rate = max(float((c["gamma"].detach() + c["mu2"].detach().neg().clamp_min(0).sqrt()).max()) for c in (key, val))
        if rate <= 0 or bool(((tt - tt[:, :1]).amax(0) * rate <= MAX_GROWTH).all()):
            return [(0, n)]
        out, j0, t_cpu = [], 0, tt.detach().cpu()
        while j0 < n:
            ok_ = (t_cpu[:, j0:] - t_cpu[:, j0 : j0 + 1]).amax(0) * rate <= MAX_GROWTH
            j1 = j0 + max(1, int(ok_.int().cumprod(0).sum()))
            out.append((j0, j1))
            j0 = j1
        return out

    @staticmethod
    def _transient_constants(key: dict, val: dict, span: float) -> dict[str, Tensor]:
        """omega, zeta, gamma, sigma and the eigenmode mask ``eig`` of the key channels then the value channels,
        each (1, H, 1, 2 d_h): the transients of both are evaluated together. ``eig``: strongly overdamped,
        sigma * span > ``EIGEN_SPAN`` (module doc); sigma is gamma elsewhere, so that the eigenmode branch, computed
        for every channel and discarded there, stays finite (its gradient would be 0 * inf otherwise)."""
        out = {name: torch.cat([key[name], val[name]], -1) for name in ("omega", "zeta", "gamma", "mu2")}
        eig = (out["mu2"] < 0) & (out["mu2"].detach().neg().clamp_min(0).sqrt() * span > EIGEN_SPAN)  # (H, 2d_h)
        out["sigma"] = torch.where(eig, -out.pop("mu2"), out["gamma"].square()).sqrt()  # gamma: finite unused branch
        out = {name: z[None, :, None] for name, z in out.items()}  # (1, H, 1, 2 d_h)
        out["eig"] = eig[None, :, None] if bool(eig.any()) else None
        return out

    @staticmethod
    def _transient(
        c: dict, x0: Tensor, v0: Tensor, lag_k: Tensor, lag_q: Tensor
    ) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor, Tensor, Tensor]]:
        """Anchored transient of key and value channels (module doc), one ``oscillator_state`` call. ``lag_k is
        lag_q`` marks the first segment (keys = rows), where only the rows are evaluated.

        x0, v0 (B, H, K, 2 d_h) at t_i; lag_k (B, K) = t_i - tau; lag_q (B, C) = t_j - tau >= 0 ->
        the two key factors (B, H, K, 2 d_h) (the state (Y, Y') at tau, or the eigenmode amplitudes there) and
        the propagator (P11, P12, P21, P22) (B, H, C, 2 d_h): [x; x'](t_j) = P [factor 1; factor 2]."""
        kk, cc = lag_k.shape[1], lag_q.shape[1]
        first = lag_k is lag_q  # first segment: the keys are the rows, so P(-a) = P(a)^{-1} gives their state
        x_unit, v_unit = (torch.full_like(x0[:, :, :1], z).expand(-1, -1, cc, -1) for z in (0.0, 1.0))  # (0, 1)
        if first:  # the response to the state (0, 1) is the propagator's second column (s, c - gamma s)
            p12, p22 = oscillator_state(lag_q[:, None, :, None], x_unit, v_unit, c["omega"], c["zeta"])
        else:  # and the keys' own states, carried back from t_i to tau, in the same call
            lag = torch.cat([-lag_k, lag_q], 1)[:, None, :, None]  # (B, 1, K + C, 1)
            x, xd = oscillator_state(
                lag, torch.cat([x0, x_unit], 2), torch.cat([v0, v_unit], 2), c["omega"], c["zeta"]
            )  # (B, H, K + C, 2 d_h)
            (y, p12), (yd, p22) = x.split([kk, cc], 2), xd.split([kk, cc], 2)
        prop = (p22 + 2 * c["gamma"] * p12, p12, -c["omega"].square() * p12, p22)  # first column (c + gamma s, ...)
        if first:  # P(a)^{-1} = e^{2 gamma a} [[P22, -P12], [-P21, P11]] (det P = e^{-2 gamma a}, the Wronskian)
            grow = torch.exp(2 * c["gamma"] * lag_q[:, None, :, None])  # <= e^{2 MAX_GROWTH}
            y, yd = grow * (p22 * x0 - p12 * v0), grow * (prop[0] * v0 - prop[2] * x0)
        if c["eig"] is None:
            return y, yd, prop
        ga, sig, eig = c["gamma"], c["sigma"], c["eig"]
        b, a = lag_k[:, None, :, None], lag_q[:, None, :, None]
        half, amp = 0.5 * x0, 0.5 * (v0 + ga * x0) / sig  # a_pm = x0 / 2 +- (v0 + gamma x0) / (2 sigma)
        y = torch.where(eig, (half + amp) * torch.exp((ga - sig) * b), y)  # a_pm e^{-r_pm (t_i - tau)}
        yd = torch.where(eig, (half - amp) * torch.exp((ga + sig) * b), yd)
        e_p, e_m = torch.exp((sig - ga) * a), torch.exp(-(sig + ga) * a)  # e^{r_pm a}
        modes = (e_p, e_m, (sig - ga) * e_p, -(sig + ga) * e_m)
        return y, yd, tuple(torch.where(eig, e, p) for e, p in zip(modes, prop, strict=True))

    def _batch_block(
        self,
        tt: Tensor,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        lam: Tensor,
        key: dict,
        val: dict,
        trans: dict,
        segments: list[tuple[int, int]],
        rho: float,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One block of batch rows: (y (B, H, T, d_h), and when ``need_weights`` the weights and logits (B, H, T, T)
        and the query coefficients (B, H, T, J, d_h, 2) = (A, B); empty otherwise)."""
        b, h, n, d = q.shape
        driven = key["w_u"] is not None
        coef, qd, zeta = query_factors(tt, q, lam, self.ridge, driven)  # (B, H, T, J, d_h, 2) x 2, (B, H, T, d_h, J, 2)
        zeta = zeta.flatten(-2)  # (B, H, T, d_h, 2J)
        pq, rq, q_now = torch.einsum("bhtcy,hcyo->bhtco", zeta, key["qcoef"]).unbind(-1)  # (B, H, T, d_h) each
        theta = tt[:, None, :, None] * lam[:, None]  # (B, H, T, J): lam_k t
        rot = torch.polar(torch.ones_like(theta), theta)[:, :, :, :, None]  # e^{i lam_k t}  (B, H, T, J, 1)
        # key factors: K_i = kappa_i e^{i lam t_i} and conj X_i = conj(G u_i) e^{i lam t_i}, (B, H, T, J d_h 2)
        # each, and the anchor state x0, v0
        n_o = 2 if driven else 1
        k_out = (k @ key["proj"]).split([coef.shape[-3] * d * 2] * n_o + [d, d], -1)  # (B, H, T, J d_h 2 | d_h)
        k_parts = list(k_out[:n_o])  # kappa_i without its secular term, conj(G u_i)
        if driven:  # kappa's secular term -(s_i / 2) conj(G u_i)
            k_parts[0] = torch.addcmul(k_parts[0], (tt - tt[:, :1])[:, None, :, None], k_parts[1], value=-0.5)
        k_parts = [torch.view_as_real(torch.view_as_complex(z.view(coef.shape)) * rot).flatten(3) for z in k_parts]
        q_parts = [z.flatten(3) for z in ((coef, qd) if driven else (coef,))]  # (B, H, T, J d_h 2) each
        v_out = (v @ val["proj"]).split([d, d, v_out_ss := val["proj"].shape[-1] - 2 * d], -1)  # x0, v0, G u
        x0 = torch.cat([k_out[-2], v_out[0]], -1)  # (B, H, T, 2 d_h): key channels, then value channels
        v0 = torch.cat([k_out[-1], v_out[1]], -1)
        v_parts = []
        if driven:  # value steady state: Re sum_m e^{i lam_m t_j} sum_i w_ji (G_m u_i e^{-i lam_m t_i})
            gu = torch.view_as_complex(v_out[2].view(b, h, n, d, v_out_ss // (2 * d), 2))  # (B, H, T, d_h, J)
            v_parts.append(torch.view_as_real(gu * rot.mT.conj()).flatten(3))  # (B, H, T, d_h J 2)
            phase = torch.view_as_real(rot[..., 0]) * rot.real.new_tensor([1.0, -1.0])  # Re(a b) = <a, (b_r, -b_i)>
            phase = phase.flatten(-2)[..., None]  # (B, H, T, 2J, 1)
        sp_index, sp_alpha = special_pairs(
            tt, rho, self.small_lag, self.n_gauss, q_now, k, coef, k_out[-2], k_out[-1], lam, key
        )  # ties and tiny lags: (3, P), (P, H)
        scale, block = 1 / math.sqrt(d), min(self.chunk_size or ROW_BLOCK, ROW_BLOCK)
        ys, ws, ls = [], [], []
        for j0, j1 in segments:
            tau = tt[:, j0 : j0 + 1]  # (B, 1) anchor
            lag_q = tt[:, j0:j1] - tau  # (B, C)
            lag_k = lag_q if j0 == 0 else tt[:, :j1] - tau  # (B, K)
            kf1, kf2, prop = self._transient(trans, _tokens(x0, 0, j1), _tokens(v0, 0, j1), lag_k, lag_q)
            (kf1, vf1), (kf2, vf2) = kf1.split(d, -1), kf2.split(d, -1)  # key channels, value channels
            (p11, g11), (p12, g12), (p21, _), (p22, _) = (p.split(d, -1) for p in prop)
            f1 = _tokens(rq, j0, j1) * p11 + _tokens(pq, j0, j1) * p21  # -F(Delta) = -(pq x' + rq x) (module doc)
            f2 = _tokens(rq, j0, j1) * p12 + _tokens(pq, j0, j1) * p22
            sel = (sp_index[1] >= j0) & (sp_index[1] < j1)
            idx = sp_index[:, sel] - torch.tensor([[0], [j0], [0]], device=sp_index.device)
            q_seg = [_tokens(z, j0, j1) for z in q_parts] + [-torch.cat([f1, f2], -1)]  # (B, H, C, .)
            k_seg = [_tokens(z, 0, j1) for z in k_parts] + [torch.cat([kf1, kf2], -1)]  # (B, H, K, .)
            v_seg = [torch.cat([vf1, vf2], -1)] + [_tokens(z, 0, j1) for z in v_parts]
            mix, w, lg = causal_core(
                q_seg, k_seg, v_seg, sp_alpha[sel], tt, j0, idx, scale, rho, self.small_lag, block, need_weights
            )  # (B, H, C, 2 d_h), (B, H, C, d_h J 2)
            mix_1, mix_2 = mix[0].split(d, -1)
            y = g11 * mix_1 + g12 * mix_2  # value transient at t_j
            if driven:
                y = y + (mix[1].view(b, h, j1 - j0, d, -1) @ _tokens(phase, j0, j1)).squeeze(-1)
            ys, ws, ls = ys + [y], ws + [w], ls + [lg]
        return torch.cat(ys, 2), torch.cat(ws, 2), torch.cat(ls, 2), coef if need_weights else coef.new_empty(0)
