"""osciformer App. E.2: the single-query oscillator-attention classifier of the resonance experiment (Figs. 3-4).

What (App. E.2, "Model"): an observation (x_l, t_l), x_l in R^2, is embedded as h_l = E x_l (d = 32). Per hidden
coordinate c, token l owns a key and a value damped driven oscillator, anchored at t_l and evaluated on [t_l, T]:

    k_lc'' + 2 gamma_c k_lc' + omega_c^2 k_lc = F_lc(t),  F_lc(t) = sum_m P_lmc cos(varpi_m t) + Q_lmc sin(varpi_m t)
    q(t) = sum_j A_j cos(lam_j t) + B_j sin(lam_j t)                       (the single learned query, J = 8)
    alpha_l(T) = 1/(T - t_l) int_{t_l}^T <q(tau), k_l(tau)> dtau             (App. E.2; Eq. 78 at t_j = T)
    w_l = softmax_l(alpha_l / sqrt(d)),  v_bar = sum_l w_l v_l(T),  logits = MLP(v_bar)  (hidden 64, ReLU, 41 out)

Values follow the same law with their own (omega, gamma), anchor projection and drive.

Closed form. Writing the full driven key as x(s), s = tau - t_l, with the drive in local time
f(s) = Re sum_m c_m e^{i varpi_m s}, c_m = (P_m - i Q_m) e^{i varpi_m t_l}, the integration by parts of
``osciformer.py`` (there for the homogeneous part only) keeps a drive term:

    p(lam) int_0^Delta e^{i lam s} x(s) ds
        = F(0) - F(Delta) + (1/2) sum_m [c_m E(lam + varpi_m) + conj(c_m) E(lam - varpi_m)]
    F(s) = e^{i lam s} (x'(s) + (2 gamma - i lam) x(s)),  p(lam) = omega^2 - lam^2 - 2 i gamma lam,
    E(nu) = int_0^Delta e^{i nu s} ds = Delta e^{i nu Delta / 2} sinc(nu Delta / 2)   (exact at nu = 0: secular term)

and with q(t_l + s) = Re sum_j xi_j e^{i lam_j s}, xi_j = (A_j - i B_j) e^{i lam_j t_l}, the logit is
alpha_l = (1/Delta) Re sum_{j, c} xi_jc I_jc (q and x are real). The states x(0), x'(0), x(Delta), x'(Delta) come
from ``oscillator_kernels.driven_state`` (steady state, Eq. 64, plus the homogeneous solution of App. A.1 in its
regime-free form), so only closed-form quantities enter; ``resonance_logits_reference`` is the quadrature reference.

Where App. E.2 is silent, we chose:
* Query frequencies lam_j: J = 8 entries of the data's grid Omega at evenly spaced indices round(linspace(0, M-1, J))
  (for M = 41: indices 0, 6, 11, 17, 23, 29, 34, 40, i.e. 0.5 ... 4.5 Hz); fixed, only A_j, B_j are learned,
  initialised N(0, 1 / (2J)) per entry (q(t) of unit variance per coordinate).
* Drive: the drive frequencies varpi_m are the query's (M = J, as ``osciformer.py``); the amplitudes P_l, Q_l in
  R^{J x d} are a bias-free linear map of h_l (one (d, 2 J d) matrix per role, PyTorch's default init), and the
  sinusoids run in absolute time t ("cos/sin terms evaluated at t_l" read as the drive phase at the anchor being
  varpi t_l), like the query.
* Anchor state: k_l(t_l) = W_K h_l + b_K, k_l'(t_l) = 0 (Sec. 6's key projection; its velocity map U at its
  init 0, not learned); likewise values with W_V. E has no bias ("linear map E").
* omega > 0 as exp(log omega), init log-uniform on [1e-2, 1e1] (the appendix's "log-uniformly from [1e-2, 1e1] on
  the rescaled interval [0, 1]" read as omega = 10^(-2 + 3u), u ~ U[0, 1]; time stays in the data's units,
  T = 5). gamma >= 0 as softplus(raw), the equation's gamma itself (not a ratio), init U[0.05, 0.4].
* T = ``t_query`` = 5 (the data's horizon, App. E.2), the same for every example; masked (padded) tokens get no
  weight; a token at t_l = T (Delta = 0) gets the limit <q(T), k_l(T)> (App. E.2's data never has one).
* The oscillator part runs in float64 (``kernel_dtype``), as ``osciformer.py``: near resonance |p| is small and
  the steady state and transient cancel; E and the MLP stay in the input dtype.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.oscillator_kernels import driven_state, gauss_legendre, query_eval


def query_grid(n_modes: int, n_freqs: int = 41, f_min: float = 0.5, df: float = 0.1) -> Tensor:
    """(J,) float64: the data grid omega_m = 2 pi (f_min + df m) at evenly spaced indices (module docstring)."""
    idx = np.round(np.linspace(0, n_freqs - 1, n_modes)).astype(int)
    return torch.tensor(2 * math.pi * (f_min + df * idx), dtype=torch.float64)


def local_drive(p_amp: Tensor, q_amp: Tensor, varpi: Tensor, t_anchor: Tensor) -> Tensor:
    """Complex local-time amplitudes c = (P - iQ) e^{i varpi t_l} of the absolute-time drive
    P cos(varpi t) + Q sin(varpi t) = Re c e^{i varpi (t - t_l)}. p_amp, q_amp (B, L, M, d), varpi (M,),
    t_anchor (B, L) -> (B, L, M, d)."""
    rot = torch.polar(torch.ones_like(t_anchor[..., None]), t_anchor[..., None] * varpi)[..., None]  # (B, L, M, 1)
    return torch.complex(p_amp, -q_amp) * rot


def steady_amplitudes(c: Tensor, varpi: Tensor, omega: Tensor, gamma: Tensor) -> Tensor:
    """W = c / (omega^2 - varpi^2 + 2 i gamma varpi) (Eq. 64 in complex form): c (B, L, M, d) -> (B, L, d, M)."""
    denom = torch.complex(omega.square() - varpi[:, None].square(), 2 * gamma * varpi[:, None])  # (M, d)
    return (c * denom.reciprocal()).transpose(-1, -2)  # reciprocal of the small (M, d) factor, then a product


def oscillator_at(s: Tensor, x0: Tensor, c: Tensor, varpi: Tensor, omega: Tensor, gamma: Tensor
                  ) -> tuple[Tensor, Tensor]:
    """(x(s), x'(s)) of the driven oscillator with x(0) = x0, x'(0) = 0 and local drive c: s (B, L, S) lags,
    x0 (B, L, d), c (B, L, M, d) -> each (B, L, S, d) (``driven_state``; zeta = gamma / omega)."""
    w = steady_amplitudes(c, varpi, omega, gamma)[:, :, None]  # (B, L, 1, d, M)
    x0 = x0[:, :, None]  # (B, L, 1, d)
    return driven_state(s[..., None], x0, torch.zeros_like(x0), w, varpi, omega, gamma / omega)


def interval_exp(nu: Tensor, delta: Tensor) -> Tensor:
    """E(nu) = int_0^Delta e^{i nu s} ds = Delta e^{i nu Delta/2} sinc(nu Delta/2), exact and smooth at nu = 0."""
    half = nu * delta / 2
    mag = delta * torch.sinc(half / math.pi)  # may be negative: built from cos/sin, not torch.polar
    return torch.complex(mag * half.cos(), mag * half.sin())


def averaged_logits(delta: Tensor, x0: Tensor, c: Tensor, varpi: Tensor, omega: Tensor, gamma: Tensor,
                    za: Tensor, zb: Tensor, lam: Tensor, t_anchor: Tensor) -> Tensor:
    """Per-channel closed-form logits alpha_lc = (1/Delta) int_{t_l}^{t_l + Delta} q_c k_lc (module docstring).

    delta, t_anchor (B, L); x0 (B, L, d) anchor states; c (B, L, M, d) local drive; omega, gamma (d,); query
    za, zb (J, d) on lam (J,) -> (B, L, d). Delta = 0 gives the limit q_c(t_l) x0_lc."""
    x_end, v_end = (z[:, :, 0] for z in oscillator_at(delta[..., None], x0, c, varpi, omega, gamma))  # (B, L, d)
    lam_c = lam[:, None]  # (J, 1)
    p = torch.complex(omega.square() - lam_c.square(), -2 * gamma * lam_c)  # (J, d)
    b = torch.complex((2 * gamma).expand_as(p.real), (-lam_c).expand_as(p.real))  # (J, d): 2 gamma - i lam
    rot_end = torch.polar(torch.ones_like(delta[..., None]), delta[..., None] * lam)[..., None]  # (B, L, J, 1)
    f0 = b * x0[:, :, None]  # (B, L, J, d): x'(0) = 0
    f_end = rot_end * (v_end[:, :, None] + b * x_end[:, :, None])  # (B, L, J, d)
    e_plus = interval_exp(lam[:, None] + varpi, delta[..., None, None])  # (B, L, J, M)
    e_minus = interval_exp(lam[:, None] - varpi, delta[..., None, None])
    drive = 0.5 * (torch.einsum("bljm,blmd->bljd", e_plus, c) + torch.einsum("bljm,blmd->bljd", e_minus, c.conj()))
    integral = (f0 - f_end + drive) * p.reciprocal()  # (B, L, J, d): int_0^Delta e^{i lam_j s} x_c(s) ds
    rot_anchor = torch.polar(torch.ones_like(t_anchor[..., None]), t_anchor[..., None] * lam)  # (B, L, J)
    xi = torch.complex(za, -zb) * rot_anchor[..., None]  # (B, L, J, d): (A - iB) e^{i lam t_l}
    num = (xi * integral).real.sum(2)  # (B, L, d)
    tie = delta <= 0
    q_now = query_eval(za, zb, lam, t_anchor)  # (B, L, d): q(t_l)
    return torch.where(tie[..., None], q_now * x0, num / torch.where(tie, 1.0, delta)[..., None])


class OsciFormerResonanceClassifier(nn.Module):
    """App. E.2's model: h = E x, one head of oscillator keys/values, a single learned sinusoidal query at T,
    closed-form averaged logits, v_bar(T), then a two-layer MLP to the class logits."""

    def __init__(self, n_features: int, n_classes: int, d_model: int = 32, n_modes: int = 8, d_hidden: int = 64,
                 t_query: float = 5.0, n_freqs: int = 41, f_min: float = 0.5, df: float = 0.1,
                 omega_range: tuple[float, float] = (1e-2, 1e1), gamma_range: tuple[float, float] = (0.05, 0.4),
                 kernel_dtype: str = "float64") -> None:
        super().__init__()
        d, j = d_model, n_modes
        self.d_model, self.n_modes, self.t_query = d, j, float(t_query)
        self.kernel_dtype = getattr(torch, kernel_dtype)
        self.embed = nn.Linear(n_features, d, bias=False)  # E
        self.anchor = nn.Linear(d, 2 * d)  # W_K, W_V (+ b_K, b_V): states at t_l
        self.drive = nn.Linear(d, 2 * 2 * j * d, bias=False)  # (P, Q) for keys and values, linear in h_l
        self.register_buffer("freqs", query_grid(j, n_freqs, f_min, df).float())  # (J,) lam = varpi
        self.query_cos = nn.Parameter(torch.randn(j, d) / math.sqrt(2 * j))  # A_j (J, d)
        self.query_sin = nn.Parameter(torch.randn(j, d) / math.sqrt(2 * j))  # B_j
        lo, hi = (math.log(float(v)) for v in omega_range)
        self.log_omega = nn.Parameter(lo + (hi - lo) * torch.rand(2, d))  # (2, d): [key, value]
        g0 = float(gamma_range[0]) + (float(gamma_range[1]) - float(gamma_range[0])) * torch.rand(2, d)
        self.gamma_raw = nn.Parameter(torch.log(torch.expm1(g0)))  # softplus^-1
        self.mlp = nn.Sequential(nn.Linear(d, d_hidden), nn.ReLU(), nn.Linear(d_hidden, n_classes))

    def oscillator_params(self) -> dict[str, Tensor]:
        """Learned (omega, gamma) of the key and value oscillators, each (d,), in the kernel dtype."""
        omega = self.log_omega.to(self.kernel_dtype).exp()
        gamma = F.softplus(self.gamma_raw.to(self.kernel_dtype))
        return {"omega_k": omega[0], "gamma_k": gamma[0], "omega_v": omega[1], "gamma_v": gamma[1]}

    def oscillators(self, x: Tensor, times: Tensor) -> dict[str, Tensor]:
        """Per-token oscillator data in the kernel dtype: anchor states (B, L, d) and local drives (B, L, J, d)
        of keys and values, Delta = T - t_l (B, L), and the parameters."""
        kd, b, n = self.kernel_dtype, x.shape[0], x.shape[1]
        h = self.embed(x)  # (B, L, d)
        k0, v0 = self.anchor(h).to(kd).chunk(2, -1)  # (B, L, d) each
        pq = self.drive(h).to(kd).view(b, n, 2, 2, self.n_modes, self.d_model)  # (B, L, role, P|Q, J, d)
        tt = times.to(kd)
        lam = self.freqs.to(kd)
        if bool((tt > self.t_query).any()):
            raise ValueError(f"observation times after the query time T = {self.t_query}")
        out = {"k0": k0, "v0": v0, "delta": self.t_query - tt, "times": tt, "lam": lam, **self.oscillator_params()}
        out["ck"], out["cv"] = (local_drive(pq[:, :, r, 0], pq[:, :, r, 1], lam, tt) for r in range(2))
        return out

    def channel_logits(self, x: Tensor, times: Tensor) -> Tensor:
        """Per-channel logits alpha_lc (B, L, d), float64; alpha_l = sum_c alpha_lc (Fig. 4c reads one channel)."""
        o = self.oscillators(x, times)
        za, zb = self.query_cos.to(o["lam"].dtype), self.query_sin.to(o["lam"].dtype)
        return averaged_logits(o["delta"], o["k0"], o["ck"], o["lam"], o["omega_k"], o["gamma_k"], za, zb,
                               o["lam"], o["times"])

    def attend(self, x: Tensor, times: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """(v_bar (B, d), weights w_l (B, L), logits alpha_l (B, L)) of one batch, the kernel dtype."""
        o = self.oscillators(x, times)
        za, zb = self.query_cos.to(o["lam"].dtype), self.query_sin.to(o["lam"].dtype)
        alpha = averaged_logits(o["delta"], o["k0"], o["ck"], o["lam"], o["omega_k"], o["gamma_k"], za, zb,
                                o["lam"], o["times"]).sum(-1)  # (B, L)
        scores = alpha / math.sqrt(self.d_model)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(-1)  # (B, L)
        v_end, _ = oscillator_at(o["delta"][..., None], o["v0"], o["cv"], o["lam"], o["omega_v"], o["gamma_v"])
        v_bar = (weights[..., None] * v_end[:, :, 0]).sum(1)  # (B, d): sum_l w_l v_l(T)
        return v_bar, weights, alpha

    def forward(self, x: Tensor, need_weights: bool = False, *, times: Tensor | None = None,
                mask: Tensor | None = None) -> tuple[Tensor, list[dict[str, Tensor]]]:
        """x (B, L, F) at ``times`` (B, L; default 0..L-1), ``mask`` (B, L) -> (class logits (B, C), [aux]);
        aux holds ``weights`` / ``logits`` (B, 1, 1, L) (one head, one query) when ``need_weights``."""
        if times is None:
            times = torch.arange(x.shape[1], device=x.device, dtype=x.dtype).expand(x.shape[0], -1)
        v_bar, weights, alpha = self.attend(x, times, mask)
        aux = {"weights": weights[:, None, None].to(x.dtype), "logits": alpha[:, None, None].to(x.dtype)} \
            if need_weights else {}
        return self.mlp(v_bar.to(x.dtype)), [aux]  # (B, C)


def resonance_logits_reference(model: OsciFormerResonanceClassifier, x: Tensor, times: Tensor,
                               n_panels: int = 16, n_nodes: int = 16) -> Tensor:
    """alpha_l (B, L) by composite Gauss-Legendre quadrature of <q(tau), k_l(tau)> over [t_l, T] (float64),
    the trajectories from ``driven_state`` at every node: the reference for ``averaged_logits``. Slow: tests."""
    o = model.oscillators(x, times)
    nodes, wts = gauss_legendre(n_nodes)
    edges = torch.linspace(0, 1, n_panels + 1, dtype=torch.float64)
    frac = (edges[:-1, None] + (edges[1:] - edges[:-1])[:, None] * nodes).reshape(-1)  # (S,) in [0, 1]
    s = o["delta"][..., None] * frac  # (B, L, S) lags
    k, _ = oscillator_at(s, o["k0"], o["ck"], o["lam"], o["omega_k"], o["gamma_k"])  # (B, L, S, d)
    za, zb = model.query_cos.double(), model.query_sin.double()
    q = query_eval(za, zb, o["lam"], o["times"][..., None] + s)  # (B, L, S, d)
    return ((q * k).sum(-1) * wts.repeat(n_panels)).sum(-1) / n_panels  # (B, L): mean over [t_l, T]
