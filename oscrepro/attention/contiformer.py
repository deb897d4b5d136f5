"""ContiFormer attention (Chen et al., NeurIPS 2023), the ODE baseline of osciformer (Secs. 2 and 5).

What: every event (X_i, t_i) starts a key and a value trajectory governed by a neural ODE (osciformer Eq. 1),

    k_i(t_i) = K_i = W_K X_i + b_K,    dk_i/dt = f_k(t, k_i) = sigmoid(LayerNorm(W k_i + b + w t))

(likewise v_i with its own f_v), and query j scores key i by the time-averaged inner product over the interval
between the two events, alpha_ij = (1/(t_j - t_i)) int_{t_i}^{t_j} <q(tau), k_i(tau)> dtau, with q(tau) an
interpolation of the projected queries Q_m = W_Q X_m + b_Q through the (irregular) event times. Why: it is the
expensive reference OsciFormer replaces by closed-form oscillators, at T_layer = O(N^2 S d^2) with S = 80 vector
field evaluations (fixed-step RK4 at step 0.1 on the rescaled interval [-1, 1], osciformer Sec. 5.4).

How (as PhysioPro ``physiopro/network/contiformer.py`` + ``module/linear.py``, ``ode.py``, configs
``contiformer_mask_classification.yml`` / ``contiformer_tpp.yml``: ``linear_type: before``,
``approximate_method: bilinear``, ``method: rk4``, ``atol: 0.1``):

* All T^2 trajectories (i -> t_j) are integrated at once in the rescaled time s in [-1, 1]
  (``contiformer_ode.solve_pairs``). Memory: backpropagating through the S = 80 evaluations keeps ~5 tensors of
  the pair shape per evaluation, O(B T^2 d S) (B=32, T=32, d=64: ~6 GB in fp32). ``chunk_size`` = Q splits the
  query rows; each chunk runs with no autograd graph (``contiformer_ode.recompute``) and is re-solved in backward,
  so the forward keeps only O(B T d) and the peak is one chunk's graph, O(B Q T d S), at the cost of one extra
  forward. (``torch.utils.checkpoint`` did not bound it: it still records one small autograd node per operation,
  and those long-lived nodes fragment the CPU heap between the freed per-step temporaries, so the resident size
  grew with B T^2 d S whatever the chunk.) Causal chunks solve only the keys they read (i < chunk end), about
  half the pairs. ``conf/attention/contiformer.yaml`` sets chunk_size 4; None is one block.
* ``approximation="bilinear"``: the integral is estimated from the interval's two ends, each factor weighted 1/2:
  alpha_ij = (1/4) (<q(t_i), k_i(t_i)> + <q(t_j), k_i(t_j)>) / sqrt(d_h),
  vbar_ij = (1/2) (v_i(t_i) + v_i(t_j)),   y_j = W_O sum_i softmax_i(alpha_ij) vbar_ij.
  This is PhysioPro's arithmetic: q and k are each scaled by 1/2, so the logit is half the trapezoid rule (a fixed
  temperature of 2). ``approximation="gauss"`` reads n_nodes interior Gauss-Legendre points with per-factor
  weights c_m = w_m / 2 (logit sum_m c_m^2 <q_m, k_m>, value sum_m c_m v_m), again PhysioPro's arithmetic.
* At the ends q(t_i) = Q_i and q(t_j) = Q_j: the interpolant passes through its knots, so with the bilinear
  estimate the spline is never evaluated off a knot; with ``gauss`` the interior nodes read the backward-difference
  Hermite cubic (``interpolation="cubic"``) or the linear interpolant.
* Causal (``causal=True``): keys i > j get weight 0. Nothing row j reads depends on a later token: k_i and v_i
  start at token i <= j, the end queries are Q_i and Q_j, and the backward-difference spline on [t_i, t_j] reads
  only knots up to j (``contiformer_ode`` docstring), so causality holds for every approximation.

Departures from PhysioPro, and why (constructor flags restore the official behaviour where it is a behaviour):
1. PhysioPro's TPP model calls the network with ``mask=None``, so every event attends to future events.
   Here ``causal=True`` masks them; ``attend_future=True`` ignores ``causal`` and restores the official behaviour.
2. PhysioPro backpropagates with ``odeint_adjoint`` (an adjoint solve on the same RK4 grid, an approximate
   gradient); here the default differentiates through the RK4 steps (the exact gradient of the computed forward,
   and what the fast-vs-reference test can check). ``adjoint=True`` uses ``odeint_adjoint``.
3. PhysioPro looks the query spline up on a 0.01 grid (``itol``, index floor(t / 0.01) into a grid whose spacing
   is only roughly 0.01) and builds one spline per batch row on the union of all rows' times (other rows' times
   filled by linear interpolation); here the spline is evaluated exactly, at each row's own knots. This is
   numerical noise in the original, not behaviour, so there is no flag.
4. No residual, LayerNorm or dropout inside the layer (PhysioPro's ``MultiHeadAttention`` has them): the backbone
   owns them in oscrepro. PhysioPro's ``eval()`` detaches the vector field (no effect on outputs); we do not.
   Gauss nodes are exact (PhysioPro tabulates them to 5 digits), and the energy regulariser (off in the configs)
   is not implemented.
5. ``times=None`` means 0..T-1 (the oscrepro contract); PhysioPro's default is linspace(0, 1, T).
Kept from PhysioPro: one vector field per K/V over the full d_model (LayerNorm across heads, heads split after the
ODE), the time term w t zero-initialised, W and b with nn.Linear's default init (``zero_init_ode: False``),
Xavier-uniform weights for the Q/K/V/output projections, temperature sqrt(d_h), the absolute time fed to the field.
"""

from __future__ import annotations

from functools import partial
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.base import AttentionBase, Aux, at_least_fp32, fp32_only, one_of, refuse, whole
from oscrepro.attention.contiformer_ode import (
    ACTIVATIONS,
    ODEVectorField,
    gauss_legendre,
    pair_times,
    recompute,
    solve_pairs,
    spline_eval,
)

APPROXIMATIONS = ("bilinear", "gauss")
INTERPOLATIONS = ("cubic", "linear")


class ContiFormerAttention(AttentionBase):
    """Continuous-time attention with neural-ODE keys/values and interpolated queries (ContiFormer)."""

    continuous_time: ClassVar[bool] = True

    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0, step_size: float = 0.1,
                 method: str = "rk4", approximation: str = "bilinear", n_nodes: int = 3, actfn: str = "sigmoid",
                 layer_norm: bool = True, time_dependent: bool = True, interpolation: str = "cubic",
                 chunk_size: int | None = None, attend_future: bool = False, adjoint: bool = False) -> None:
        refuse(ContiFormerAttention.config_problems(d_model, n_heads, approximation=approximation, n_nodes=n_nodes,
                                                    actfn=actfn, interpolation=interpolation, chunk_size=chunk_size))
        super().__init__(d_model, n_heads, layer_idx)
        self.step_size, self.method, self.approximation = step_size, method, approximation
        self.interpolation, self.chunk_size = interpolation, chunk_size
        self.attend_future, self.adjoint = attend_future, adjoint
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        with torch.no_grad():  # Xavier-uniform per projection, as PhysioPro's lin_outside and fc
            for w in self.qkv.weight.chunk(3, dim=0):
                nn.init.xavier_uniform_(w)
            nn.init.xavier_uniform_(self.out.weight)
        self.field = ODEVectorField(d_model, n_fields=2, actfn=actfn, layer_norm=layer_norm,
                                    time_dependent=time_dependent)  # f_k and f_v stacked on axis 0
        if approximation == "bilinear":  # read s = -1 and s = 1, each factor weighted 1/2
            nodes, weights, read = torch.tensor([-1.0, 1.0]), torch.tensor([0.5, 0.5]), slice(None)
        else:  # n interior Gauss-Legendre points, weights w_m / 2; solve from -1 to 1, drop the ends
            g, w = gauss_legendre(n_nodes)
            nodes, weights, read = torch.cat([g.new_tensor([-1.0]), g, g.new_tensor([1.0])]), w / 2, slice(1, -1)
        self.register_buffer("nodes", nodes.double(), persistent=False)  # (M_solve,) rescaled times s
        self.register_buffer("node_weights", weights.double(), persistent=False)  # (M,) c_m
        self.read = read

    @classmethod
    def config_problems(cls, d_model: int, n_heads: int, *, approximation: str = "bilinear", n_nodes: int = 3,
                        actfn: str = "sigmoid", interpolation: str = "cubic", chunk_size: int | None = None,
                        **hparams: Any) -> list[str]:
        """The shared head split; a known approximation (with n_nodes >= 1 for gauss), activation and query
        interpolation; query chunks of at least one row."""
        problems = (super().config_problems(d_model, n_heads, **hparams)
                    + one_of("approximation", approximation, APPROXIMATIONS)
                    + one_of("actfn", actfn, tuple(ACTIVATIONS))
                    + one_of("interpolation", interpolation, INTERPOLATIONS))
        if approximation == "gauss" and not whole(n_nodes, 1):
            problems.append(f"n_nodes={n_nodes!r} must be an integer >= 1 (Gauss-Legendre nodes)")
        if chunk_size is not None and not whole(chunk_size, 1):
            problems.append(f"chunk_size={chunk_size!r} must be >= 1 or None")
        return problems

    def _rows(self, q: Tensor, k: Tensor, v: Tensor, times: Tensor, start: int, stop: int, mask_future: bool
              ) -> tuple[Tensor, Tensor]:
        """Query rows start..stop-1 against the keys they can read -> (o (B, Q, D), weights (B, H, Q, K)).

        Causal rows read keys 0..stop-1 only (K = stop): the later ones would get weight exactly 0, so their
        trajectories are not solved. Otherwise K = T.
        """
        b, t, d = k.shape
        n_keys = stop if mask_future else t
        h, dh, rows, keys = self.n_heads, self.d_head, slice(start, stop), slice(0, n_keys)
        t0, t1 = pair_times(times, rows, keys)  # (B, Q, K, 1) each: interval i -> t_j
        y0 = torch.stack([k[:, keys], v[:, keys]])[:, :, None].expand(2, b, stop - start, n_keys, d)  # (2, B, Q, K, D)
        traj = solve_pairs(self.field, y0, t0, t1, self.nodes, method=self.method, step_size=self.step_size,
                           adjoint=self.adjoint)[self.read]  # (M, 2, B, Q, K, D) at the read nodes
        k_m, v_m = traj[:, 0], traj[:, 1]  # (M, B, Q, K, D)
        c = self.node_weights.to(q)  # (M,)
        if self.approximation == "bilinear":  # q at the ends is the knot value: Q_i at t_i, Q_j at t_j
            q_m = torch.stack([q[:, keys, None].transpose(1, 2).expand_as(k_m[0]),
                               q[:, rows, None].expand_as(k_m[0])])  # (2, B, Q, K, D)
        else:  # interior node tau = t_i + (s + 1)(t_j - t_i)/2 on the (causal) query spline over all knots
            s = self.nodes[self.read].to(q).view(-1, 1, 1, 1, 1)  # (M, 1, 1, 1, 1)
            tau = (t0 + (s + 1) * (t1 - t0) / 2).squeeze(-1)  # (M, B, Q, K)
            tau = tau.permute(1, 0, 2, 3).reshape(b, -1)  # (B, M*Q*K)
            q_m = spline_eval(q, times, tau, self.interpolation).view(b, -1, stop - start, n_keys, d).transpose(0, 1)
        qk = (q_m * k_m).view(*k_m.shape[:-1], h, dh).sum(-1)  # (M, B, Q, K, H) per-node, per-head <q, k>
        scores = torch.einsum("m,mbqth->bhqt", c * c, qk) / dh ** 0.5  # (B, H, Q, K) logits alpha_ij
        if mask_future:
            future = torch.arange(n_keys, device=q.device) > torch.arange(start, stop, device=q.device)[:, None]
            scores = scores.masked_fill(future, float("-inf"))  # key i > query j
        weights = scores.softmax(dim=-1)  # (B, H, Q, K)
        vbar = torch.einsum("m,mbqtd->bqtd", c, v_m).view(b, stop - start, n_keys, h, dh)  # (B, Q, K, H, Dh)
        o = torch.einsum("bhqt,bqthe->bqhe", weights, vbar).reshape(b, stop - start, d)  # (B, Q, D)
        return o, weights

    def forward(self, x: Tensor, *, causal: bool = False, pos: Tensor | None = None, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        b, t, _ = x.shape
        with fp32_only(x):  # ODE and spline in fp32 (or fp64) even inside a bf16-mixed model
            xf = at_least_fp32(x)
            if times is None:
                times = torch.arange(t, device=x.device, dtype=xf.dtype).expand(b, t)
            times = times.to(xf.dtype)  # (B, T)
            q, k, v = self.qkv(xf).chunk(3, dim=-1)  # (B, T, D) each: Q_i, K_i, V_i
            mask_future = causal and not self.attend_future
            size = self.chunk_size or t
            outs, weights = [], []
            for start in range(0, t, size):
                rows = partial(self._rows, start=start, stop=min(start + size, t), mask_future=mask_future)
                if self.chunk_size is not None and torch.is_grad_enabled():  # no graph now, recompute in backward
                    o, w = recompute(rows, (q, k, v, times), tuple(self.field.parameters()))
                else:
                    o, w = rows(q, k, v, times)
                outs.append(o)
                weights.append(F.pad(w, (0, t - w.shape[-1])))  # (B, H, Q, T): causal chunks solved K <= T keys
            y = self.out(torch.cat(outs, dim=1)).to(x.dtype)  # (B, T, D)
        aux: Aux = {"weights": torch.cat(weights, dim=2)} if need_weights else {}  # (B, H, T, T)
        return y, aux
