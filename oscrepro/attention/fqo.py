"""Fixed-query oscillator attention (fqo paper, Pasqualetti & Guo, Sec. 2 and App. B).

Per head h and token pair (i, j):

    w_ij = softplus((F e_i)·(G e_j) / sqrt(d_h))                       Eq. (2)  coupling weights (> 0)
    h_i  = sum_j w_ij r_j                                              Eq. (3)  weighted anchor sum
    z_i* = h_i / ||h_i||      (F.normalize, eps = 1e-8, App. B)        Eq. (4)  fixed point of the Lohe ODE
    a_ij = (1 + z_i*·r_j)^p / sum_l (1 + z_i*·r_l)^p                   Eq. (5)  shifted-cosine readout, sharpening p
    o_i  = sum_j a_ij v_j,  v_j = W_V e_j,   y = W_O [o^(1); ...; o^(H)]  Eq. (6)

Causal variant (Sec. 2): w_ij = 0 for j > i in (2) and the sum in (5) runs over l <= i.

Reading of what the paper leaves open (our choice, stated here and in the closing notes):
- **Anchors.** The paper says anchors r_j are "learned during training and held fixed at inference", one per
  input token and head, but not how token j determines r_j. We read it as a learned per-head linear map of token
  j's content to d_osc dimensions, projected onto the sphere: r_j^(h) = normalize(A^(h) e_j). This is the only
  reading under which anchors exist for every position of a variable-length input and are "fixed" at inference
  (they are a deterministic function of the input, not a dynamical variable).
- **F, G, W_V** are the usual fused per-head projections of width d_model (d_h = d_model / H), with biases.
- **Denominator guard.** (5) is undefined only if every r_l is antipodal to z_i*; we clamp the denominator at
  1e-12, which leaves rows summing to 1 to float precision.
- **Ablations** (Tables 1 and 2): ``freeze_value`` keeps W_V at its random init (requires_grad=False);
  ``mode="random_positions"`` draws z_i uniformly on the sphere (Gaussian / norm) with no equilibration;
  ``mode="zero_attention"`` uses uniform weights (mean pooling over the visible tokens).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.base import (
    AttentionBase,
    Aux,
    at_least_fp32,
    causal_mask,
    fp32_only,
    merge_heads,
    one_of,
    refuse,
    split_heads,
    whole,
)
from oscrepro.attention.fqo_tiled import tiled_with_fallback

MODES = ("fixed_point", "random_positions", "zero_attention")
TILED_MIN_ELEMS = 1 << 23  # auto: the tiled (compiled) path once B*H*T^2 reaches it (smaller: the plain path, as
#                            every recorded run; results/bench/fqo_tiled.md: eager tiles do not pay, compiled ones do)
NORM_EPS = 1e-8  # App. B: F.normalize(h, dim=-1, eps=1e-8)


def readout_from_cosines(cos: Tensor, p: float, mask: Tensor | None) -> Tensor:
    """Eq. (5) given the cosines z_i·r_j: (1 + cos)^p normalised over the visible j.  (B,H,T,T) -> (B,H,T,T)."""
    num = (1.0 + cos.clamp(-1.0, 1.0)).pow(p)
    if mask is not None:
        num = num.masked_fill(~mask, 0.0)
    return num / num.sum(dim=-1, keepdim=True).clamp_min(1e-12)


def shifted_cosine_readout(z: Tensor, r: Tensor, p: float, mask: Tensor | None) -> Tensor:
    """Eq. (5): a_ij = (1 + z_i·r_j)^p / sum_l (1 + z_i·r_l)^p.  z: (B,H,T,N), r: (B,H,T,N) -> (B,H,T,T)."""
    return readout_from_cosines(z @ r.transpose(-2, -1), p, mask)


class FixedQueryOscillatorAttention(AttentionBase):
    """Multi-head fixed-query oscillator attention, trained through the closed-form fixed point (4)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_osc: int = 2,
        p: float = 1.0,
        layer_idx: int = 0,
        mode: str = "fixed_point",
        freeze_value: bool = False,
        tiled: bool | None = None,
        tile_elems: int = 1 << 20,
        compile_min_elems: int | None = TILED_MIN_ELEMS,
    ) -> None:
        """tiled: the row-block kernel of ``fqo_tiled`` (no (T, T) tensor stored) for Eqs. (2)-(6); None = once
        B*H*T^2 reaches ``TILED_MIN_ELEMS``, where it pays (results/bench/fqo_tiled.md). Only the paper's mechanism
        (mode ``fixed_point``, this class's hooks) has it; need_weights always takes the plain path.
        compile_min_elems: the tiled blocks go through ``torch.compile`` once B*H*T^2 reaches it (None: never;
        eager on failure)."""
        refuse(FixedQueryOscillatorAttention.config_problems(d_model, n_heads, d_osc=d_osc, p=p, mode=mode))
        super().__init__(d_model, n_heads, layer_idx)
        self.d_osc, self.p, self.mode = d_osc, float(p), mode
        self.tiled, self.tile_elems, self.compile_min_elems = tiled, int(tile_elems), compile_min_elems
        self.f_proj = nn.Linear(d_model, d_model)  # F, all heads (query-like)
        self.g_proj = nn.Linear(d_model, d_model)  # G, all heads (key-like)
        self.anchor_proj = nn.Linear(d_model, n_heads * d_osc)  # A: token content -> anchor direction
        self.v_proj = nn.Linear(d_model, d_model)  # W_V
        self.out = nn.Linear(d_model, d_model)  # W_O
        if freeze_value:
            self.v_proj.requires_grad_(False)

    @classmethod
    def config_problems(cls, d_model: int, n_heads: int, *, d_osc: int = 2, p: float = 1.0, mode: str = "fixed_point",
                        **hparams: Any) -> list[str]:
        """The shared head split; a known mode; oscillators of d_osc >= 2 (a direction on a circle at least) and a
        readout exponent p >= 1 (Eq. 5)."""
        problems = super().config_problems(d_model, n_heads, **hparams) + one_of("mode", mode, MODES)
        if not (whole(d_osc, 2) and isinstance(p, int | float) and p >= 1):
            problems.append(f"need d_osc >= 2 and p >= 1, got d_osc={d_osc!r}, p={p!r}")
        return problems

    # Hooks of Eqs. (2)-(4); the App. C variants (fqo_relpos, fqo_gain) override the one that differs.

    def anchors(self, x: Tensor) -> Tensor:
        """r_j = normalize(A e_j) per head: (B, T, D) -> (B, H, T, N)."""
        return F.normalize(split_heads(self.anchor_proj(x), self.n_heads), dim=-1, eps=NORM_EPS)

    def coupling_scores(self, x: Tensor) -> Tensor:
        """(F e_i)·(G e_j) / sqrt(d_h), the argument of the softplus in Eq. (2): (B, T, D) -> (B, H, T, T)."""
        f = split_heads(self.f_proj(x), self.n_heads)  # (B, H, T, Dh)
        g = split_heads(self.g_proj(x), self.n_heads)  # (B, H, T, Dh)
        return f @ g.transpose(-2, -1) / math.sqrt(self.d_head)

    def coupling(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """Eq. (2) w_ij = softplus(score_ij), zero where ``mask`` hides j: (B, T, D) -> (B, H, T, T)."""
        w = F.softplus(self.coupling_scores(x))
        return w if mask is None else w.masked_fill(~mask, 0.0)

    def fixed_point(self, h: Tensor) -> Tensor:
        """Eq. (4) z* = h/||h|| (App. B eps). ODE inference (papers.fqo.ode_checkpoint) swaps in an integrator."""
        return F.normalize(h, dim=-1, eps=NORM_EPS)

    def settle(self, w: Tensor, r: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Eqs. (3)-(4) and the cosines read in (5): w (B,H,T,T), r (B,H,T,N) -> h, z (B,H,T,N), z_i·r_j (B,H,T,T)."""
        h = w @ r  # Eq. (3)
        if self.mode == "random_positions":
            z = F.normalize(torch.randn_like(h), dim=-1)  # uniform on the sphere, no equilibration
        else:
            z = self.fixed_point(h)  # Eq. (4)
        return h, z, z @ r.transpose(-2, -1)

    def uses_tiled(self, b: int, t: int, need_weights: bool = False) -> bool:
        """Whether a (``b``, ``t``) forward takes the tiled kernel (``tiled``; the hooks must be this class's)."""
        base = FixedQueryOscillatorAttention
        own = all(getattr(getattr(self, name), "__func__", None) is getattr(base, name)
                  for name in ("coupling", "coupling_scores", "settle", "fixed_point", "anchors"))
        wanted = self.tiled if self.tiled is not None else b * self.n_heads * t * t >= TILED_MIN_ELEMS
        return wanted and own and self.mode == "fixed_point" and not need_weights

    def forward(self, x: Tensor, *, causal: bool = False, pos: Tensor | None = None, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        b, t, _ = x.shape
        if self.uses_tiled(b, t, need_weights):  # Eqs. (2)-(6) in row blocks (fqo_tiled), same maths
            f = split_heads(self.f_proj(x), self.n_heads)  # (B, H, T, Dh)
            g = split_heads(self.g_proj(x), self.n_heads)  # (B, H, T, Dh)
            v = split_heads(self.v_proj(x), self.n_heads)  # (B, H, T, Dh)
            big = self.compile_min_elems is not None and b * self.n_heads * t * t >= self.compile_min_elems
            # in one float dtype, autocast off: autocast reaches the kernel's forward but not its hand-written
            # backward, which then met bf16 blocks against fp32 anchors under bf16-mixed (scripts/cuda_parity.py on an
            # H200 at T = 1536: "expected mat1 and mat2 to have the same dtype"); fp32 also keeps Eq. (4)'s norm exact
            r = self.anchors(x)  # (B, H, T, N)
            with fp32_only(x):
                o = tiled_with_fallback(*(at_least_fp32(a) for a in (f, g, r, v)), self.p, causal, self.tile_elems,
                                        big)  # (B, H, T, Dh)
            return self.out(merge_heads(o)), {}
        mask = causal_mask(t, x.device) if causal else None  # (T, T) True = visible
        v = split_heads(self.v_proj(x), self.n_heads)  # (B, H, T, Dh)
        r = self.anchors(x)  # (B, H, T, N)

        if self.mode == "zero_attention":
            visible = mask if mask is not None else torch.ones(t, t, dtype=torch.bool, device=x.device)
            a = (visible / visible.sum(-1, keepdim=True)).to(x.dtype).expand(b, self.n_heads, t, t)  # uniform
            w = h = z = None
        else:
            w = self.coupling(x, mask)  # Eq. (2): (B, H, T, T)
            h, z, cos = self.settle(w, r)  # Eqs. (3)-(4): h, z (B, H, T, N), cos (B, H, T, T)
            a = readout_from_cosines(cos, self.p, mask)  # Eq. (5): (B, H, T, T)

        o = a @ v  # Eq. (6): (B, H, T, Dh)
        y = self.out(merge_heads(o))  # (B, T, D)
        aux: Aux = {}
        if need_weights:
            aux["weights"] = a
            aux["anchors"] = r
            if w is not None:
                aux.update(coupling=w, h=h, z=z)
        return y, aux
