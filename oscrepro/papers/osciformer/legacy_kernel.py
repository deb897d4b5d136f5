"""OsciFormer's closed-form kernel as it stood before issue 37 (commit 1624233): the "before" column of
``oscrepro.papers.osciformer.kernel_bench``, kept only so that the bench compares old and new in one process.

Same module (``OsciFormerAttention``'s parameters, buffers and API); only the forward differs: complex
exponential modes of the transient with a per-pair fallback for near-critical channels, the O(T^2 J d) ridge fit
``oscillator_kernels.ridge_query_coef``, full-width (non-causal) logit products and autograd through every
(B, H, T, T) and (B, H, T, d_h, J) intermediate. Its derivation is in the git history of
``oscrepro/attention/osciformer.py``; tests check that the rebuilt kernel equals it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from oscrepro.attention.base import Aux, fp32_only, merge_heads, split_heads
from oscrepro.attention.osciformer import OsciFormerAttention
from oscrepro.attention.oscillator_kernels import (
    gauss_legendre,
    oscillator_state,
    ridge_query_coef,
    steady_state_amplitude,
    transient_modes,
)

MAX_GROWTH = 300.0  # bound on rate * (t - anchor) in the separable factors


def _re_matmul(a: Tensor, b: Tensor) -> Tensor:
    """Re(a @ b^T) for complex a (..., C, M), b (..., K, M) as one real matrix product over interleaved
    (re, im) pairs: Re(a b) = [a_re, a_im] . [b_re, -b_im]."""
    return torch.view_as_real(a).flatten(-2) @ torch.view_as_real(b.conj().resolve_conj()).flatten(-2).mT


def _cexp(r: Tensor, s: Tensor) -> Tensor:
    """e^{r s} for complex r and real s (broadcasting), as polar(e^{Re r s}, Im r s): real exp/cos/sin."""
    return torch.polar(torch.exp(r.real * s), r.imag * s)


class LegacyOsciFormerAttention(OsciFormerAttention):
    """The pre-issue-37 OsciFormer forward (bench baseline only); build it and ``load_state_dict`` a new layer's."""

    def oscillator(self, role: str, e: Tensor, lam: Tensor) -> dict[str, Tensor]:
        """Per-token oscillator data for projections e (B, H, T, d_h): omega, zeta (1, H, 1, d_h); transient anchor
        state x0, v0 (B, H, T, d_h); the steady state W_im = u_i G_m (Eq. 64), rank one in (token, mode): drive
        u (B, H, T, d_h) and response G (H, J, d_h), complex (None when undriven); the transient's modes."""
        omega, zeta = self.omega_zeta(role)  # (H, d_h)
        u_mat = getattr(self, f"velocity_{role}").to(e.dtype)
        v_init = torch.einsum("hcd,bhtd->bhtc", u_mat, e)  # x'(t_i) = U E_i (Sec. 6)
        out = {
            "omega": omega[None, :, None],
            "zeta": zeta[None, :, None],
            "x0": e,
            "v0": v_init,
            "e": e,
            "u": None,
            "g": None,
        }
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
            coef = ridge_query_coef(tt, q, lam, self.ridge)  # (B, H, T, d_h, J, 2): (A, B), Eq. (48) on prefixes
            key, val = self.oscillator("k", k, lam), self.oscillator("v", v, lam)
            feats = self._features(tt, coef, lam, key, val)
            parts = [self._rows(j0, j1, tt, lam, key, val, feats) for j0, j1 in self._chunks(tt, key, val)]
            y, weights, logits = parts[0] if len(parts) == 1 else (torch.cat(z, 2) for z in zip(*parts, strict=True))
        aux: Aux = {}
        if need_weights:
            aux = {
                "weights": weights.to(x.dtype),
                "logits": logits.to(x.dtype),
                "query_cos": coef[..., 0].transpose(-1, -2),
                "query_sin": coef[..., 1].transpose(-1, -2),
                "freqs": lam,
            }
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
            ok_ = ((t_cpu[:, j0:] - t_cpu[:, j0 : j0 + 1]).amax(0) * rate <= MAX_GROWTH)[:step]
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
            cols = [
                [inv_p, beta, s1 + s2, 1j * (s1 - s2), -0.5 * g.conj(), 0.5j * g.conj()],  # K_i
                [zero, zero, g, 1j * g, zero, zero],
            ]  # X_i = u_i G e^{-i lam t_i}
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

    def _rows(
        self, j0: int, j1: int, tt: Tensor, lam: Tensor, key: dict, val: dict, feats: dict
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
        xh, vh = oscillator_state(
            lag[..., None], self._flat(key["x0"], idx)[:, None], self._flat(key["v0"], idx)[:, None], om, ze
        )  # (B, C, T, N)
        part = self._flat(pq, idx)[:, :, None] * vh + self._flat(rq, idx)[:, :, None] * xh  # (B, C, T, N)
        b, c, t, _ = part.shape
        out = part.new_zeros(b, c, t, self.n_heads).index_add(3, heads, part)  # (B, C, T, H)
        return out.permute(0, 3, 1, 2)

    def _critical_values(self, lag: Tensor, val: dict, weights: Tensor) -> Tensor:
        """sum_i w_ji x_i(Delta_ji) (B, H, C, d_h) on the near-critical value channels (zero elsewhere)."""
        idx, heads, om, ze = self._crit_channels(val)
        xv, _ = oscillator_state(
            lag[..., None], self._flat(val["x0"], idx)[:, None], self._flat(val["v0"], idx)[:, None], om, ze
        )  # (B, C, T, N)
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
        kv, _ = oscillator_state(
            s[:, None, :, None],
            key["x0"][bi, :, ii][:, :, None],
            key["v0"][bi, :, ii][:, :, None],
            key["omega"],
            key["zeta"],
        )  # (P, H, G, d_h)
        if key["u"] is not None:  # + Re sum_m u_i G_m e^{i lam_m s}
            phase = s[:, None, :, None] * lam[None, :, None]  # (P, H, G, J)
            ss = torch.einsum("phgm,hmc->phgc", torch.polar(torch.ones_like(phase), phase), key["g"])
            kv = kv + (ss * key["u"][bi, :, ii][:, :, None]).real
        vals = ((qv * kv).sum(-1) * wts).sum(-1)  # (P, H)
        return out.index_put((bi, jj, ii), vals).permute(0, 3, 1, 2)
