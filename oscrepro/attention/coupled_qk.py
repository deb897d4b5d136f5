"""Coupled QK dynamics (coupledqk: Sec. 2, Eqs. 2-4; App. A, Eqs. 6-9; App. B, Tables 9 and 11).

What: after the Q, K, V projections and before scoring, each head's queries and keys evolve jointly for
``n_steps`` steps of a coupled update: q drifts with k as its velocity and k is deflected by a learned coupling
network f(q). The evolved (q_n, k_n) replace (Q, K) in standard scaled dot-product attention (Eq. 1); V is
untouched. Why: the paper's claim is that this pre-scoring Q-K coupling is the active ingredient, not
symplecticity (Euler matches leapfrog) nor the step count (Sec. 3.1). The three integrators below therefore
share every parameter, and a state_dict of one loads strictly into another.

Integrators (``integrator``):

* ``hamiltonian``: leapfrog (Stormer-Verlet), Eqs. (3) and (6)-(8), with q the position and k the momentum.
  Each step is a composition of shear maps with unit Jacobian determinant, so it preserves volume (Eq. 9).
  f(q_{t+1}) from the closing kick of a step is reused for the opening kick of the next one. Both evaluate the
  same function at the same input, so the numbers are identical to the naive rule; f runs n+1 times, not 2n.
* ``euler``: forward Euler, Eq. (4): q_{t+1} = q_t + dt k_t and k_{t+1} = k_t + dt f(q_t), both computed from
  the old state. Not volume-preserving.
* ``mlp_only``: the uncoupled ablation of Sec. 2.3, q' = q + f(q), with k and v unchanged.

Parameters per layer, on top of the 4 d^2 of standard attention (no biases):
* f: one coupling network per layer, shared by the heads (Sec. 2.2, "operating independently per head"): a
  two-layer MLP d_h -> d_h -> d_h with SiLU between and no bias (``coupling.0``, ``coupling.2``), so 2 d_h^2.
* ``log_dt`` = tau_h: one per head, with dt_h = exp(tau_h) (Sec. 2.1), so H.
At d_model 512 with 8 heads (d_h 64) and 8 layers this is 8 x (2 * 64 * 64 + 8) = 65,600, as in Table 11.

Where the paper is silent or ambiguous, this is what we chose:
* mlp_only applies the residual update once, as Sec. 2.3 writes it (q' = q + f(q), no dt, no iteration). Any
  ``n_steps >= 1`` gives that single update. ``n_steps = 0`` switches the update off for every integrator, so
  that ``n_steps = 0`` is exactly standard attention in all three. mlp_only keeps ``log_dt`` without using it
  (it gets no gradient). This keeps "identical parameter count" (Sec. 2.3) and lets state_dicts move between
  integrators. A DDP run of mlp_only would need ``find_unused_parameters``.
* RoPE placement (Table 13 does not say): with ``rope=True``, the *coupled* q, k are rotated just before
  scoring. The dynamics act on content, and positions enter the scores exactly as in standard RoPE. ``aux`` q and
  k are the coupled vectors before rotation. Positions are the token indices 0..T-1 and ``pos`` is ignored, as
  for every mechanism (``oscrepro.attention.base``).
* f keeps the default ``nn.Linear`` initialisation (Kaiming-uniform, U(+-1/sqrt(d_h))), because the paper does
  not give one. With dt = 0.1 the initial deflection is small but non-zero.
* Projections: fused ``qkv`` and ``out``, with the same names as ``SoftmaxAttention``. A
  ``SoftmaxAttention(bias=False)`` state_dict therefore loads with only ``coupling.*`` and ``log_dt`` missing,
  and n_steps = 0 then reproduces it. The scale stays 1/sqrt(d_h), as in Eq. (1).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from oscrepro.attention.base import (
    AttentionBase,
    Aux,
    dot_product_attention,
    merge_heads,
    one_of,
    refuse,
    split_heads,
    whole,
)
from oscrepro.attention.rope import rope_problems, rope_qk

INTEGRATORS = ("hamiltonian", "euler", "mlp_only")


class CoupledQKAttention(AttentionBase):
    """Softmax attention on queries and keys evolved by ``n_steps`` of coupled dynamics (Eqs. 2-4, 6-8)."""

    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0, integrator: str = "hamiltonian",
                 n_steps: int = 3, dt_init: float = 0.1, bias: bool = False, rope: bool = False,
                 rope_base: float = 10000.0) -> None:
        refuse(CoupledQKAttention.config_problems(d_model, n_heads, integrator=integrator, n_steps=n_steps,
                                                  dt_init=dt_init, rope=rope))
        super().__init__(d_model, n_heads, layer_idx)
        self.integrator, self.n_steps = integrator, n_steps
        self.rope, self.rope_base = rope, rope_base
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        d = self.d_head
        # f: d_h -> d_h -> d_h, SiLU, no bias; one per layer, applied to every head (Sec. 2.2)
        self.coupling = nn.Sequential(nn.Linear(d, d, bias=False), nn.SiLU(), nn.Linear(d, d, bias=False))
        self.log_dt = nn.Parameter(torch.full((n_heads,), math.log(dt_init)))  # tau_h, dt_h = exp(tau_h)

    @classmethod
    def config_problems(cls, d_model: int, n_heads: int, *, integrator: str = "hamiltonian", n_steps: int = 3,
                        dt_init: float = 0.1, rope: bool = False, **hparams: Any) -> list[str]:
        """The shared head split; a known integrator, n_steps >= 0, dt_init > 0 (dt = exp(tau)); RoPE's even head
        dimension."""
        problems = super().config_problems(d_model, n_heads, **hparams) + one_of("integrator", integrator, INTEGRATORS)
        if not whole(n_steps, 0):
            problems.append(f"n_steps={n_steps!r} must be an integer >= 0")
        if not (isinstance(dt_init, int | float) and dt_init > 0):
            problems.append(f"dt_init={dt_init!r} must be > 0 (dt = exp(tau))")
        return problems or rope_problems(d_model // n_heads, rope)

    def integrate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """(q, k) (B, H, T, Dh) -> (q_n, k_n) (B, H, T, Dh) after ``n_steps`` of the chosen update rule."""
        f = self.coupling
        if self.n_steps == 0:
            return q, k
        if self.integrator == "mlp_only":
            return q + f(q), k  # Sec. 2.3: q' = q + f(q), keys unchanged
        dt = self.log_dt.exp().to(q.dtype).view(1, -1, 1, 1)  # (1, H, 1, 1), dt_h = exp(tau_h)
        if self.integrator == "euler":
            for _ in range(self.n_steps):
                q, k = q + dt * k, k + dt * f(q)  # Eq. (4), both from the old state
            return q, k
        force = f(q)  # f(q_0)
        for _ in range(self.n_steps):
            k = k + 0.5 * dt * force  # Eq. (6): k_{t+1/2} = k_t + dt/2 f(q_t)
            q = q + dt * k  # Eq. (7): q_{t+1} = q_t + dt k_{t+1/2}
            force = f(q)  # f(q_{t+1}), reused as the next step's f(q_t)
            k = k + 0.5 * dt * force  # Eq. (8): k_{t+1} = k_{t+1/2} + dt/2 f(q_{t+1})
        return q, k

    def forward(self, x: Tensor, *, causal: bool = False, pos: Tensor | None = None, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        q0, k0, v = (split_heads(t, self.n_heads) for t in self.qkv(x).chunk(3, dim=-1))  # (B, H, T, Dh)
        q, k = self.integrate(q0, k0)  # (B, H, T, Dh) each: the coupled pre-scoring dynamics
        qr, kr = rope_qk(q, k, self.rope_base) if self.rope else (q, k)  # positions enter the scores only
        o, weights = dot_product_attention(qr, kr, v, causal, need_weights)  # (B, H, T, Dh), Eq. (1)
        aux: Aux = {"q0": q0, "k0": k0, "q": q, "k": k, "weights": weights} if need_weights else {}
        return self.out(merge_heads(o)), aux
