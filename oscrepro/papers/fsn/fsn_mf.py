"""FSN-MF collective-mode feed-forward block and its winding-register variant (fsn Eq. 4, §2.4, App. A).

FSN-MF replaces the SwiGLU block of :class:`~oscrepro.papers.fsn.torus_lm.TorusLM` with coupling to M learned
collective modes (generalised order parameters) of the layer's own phasors z = exp(i theta)::

    m_h = sum_c C_hc z_c,   q = SiLU(Re m^g + b) * m^v,   a^ffn = Im(conj(z) * D q)                   (Eq. 4)

C^g, C^v in C^{M x k}, D in C^{k x M} (complex: "learned projection D"; a complex D is what makes M = k land within
0.1 % of the SwiGLU block, see below), b in R^M. Parameters: 6Mk + M. The output is a tangent vector at theta,
bounded and added by the backbone exactly like the SwiGLU update.

Mode count (``n_modes=None``): the integer M whose block is nearest the SwiGLU block it replaces, LayerNorm
included (2k + 3k*hidden); at k = 176, hidden 352: SwiGLU 186,208 vs 176 modes 186,032 (-0.095 %), whole model
-704 of 1,011,834 (-0.07 %).

Winding register (App. A "Feed-forward variants"): a small set of R real gated modes that read the lifted
(unwrapped) phases theta instead of the phasors, r = SiLU(R^g theta + b_r) * (R^v theta), added through a real
projection E r (3Rk + R parameters); the complex mode count is rebalanced so the block still matches. The paper
does not give R; the default 16 ("a small set") is a choice, set in the config.

Initialisation (not in the paper, a choice; ``init``): ``"linear"`` (the configs' default) gives every real map of
the block nn.Linear's default, the family of the SwiGLU block it replaces: Re/Im of C ~ U(+-1/sqrt(2k)) (C acts on
the 2k real inputs (Re z, Im z)), Re/Im of D ~ U(+-1/sqrt(2M)), b = 0; the register's R^g, R^v are nn.Linear's and
its output map E starts at 0 (it reads the unwrapped phases, so an nn.Linear-default E kicks every coordinate by
~1 rad at init: gradient norm 60 vs the SwiGLU model's 5 on a 2 x 64 batch).
``"gaussian"``, the first choice (Re/Im of C ~ N(0, 1/(2k)) so that modes have O(1) magnitude, Re/Im of D ~
N(0, 1/(2M))), kept for the records trained with it, starts in a chaotic regime: measured at init on random
phases, the block's update RMS is 0.28 (SwiGLU block 0.105; "linear" 0.051), bounded to 1.6 rad per coordinate,
and the model's gradient norm is ~40x the SwiGLU model's (attention 19.8 vs 0.43, FFN 30 vs 1.1), so the global
clip at 1.0 shrinks every useful update: FSN-MF stayed at the unigram level (4.7-4.8 val bpc on the enwik8
stand-in) for 9,500 steps at lr 1e-3 and 3e-3 (H100 pilot, issue 16). With "linear" the gradient norms match the
SwiGLU model's (attention 0.55, FFN 0.75).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def swiglu_block_params(k: int, hidden_mult: float = 2.0) -> int:
    """Parameters of the SwiGLU phase block (LayerNorm weight+bias, W1, W3, W2 without biases)."""
    hidden = int(round(hidden_mult * k))
    return 2 * k + 3 * k * hidden


def collective_params(k: int, n_modes: int) -> int:
    """Parameters of Eq. 4 with complex C^g, C^v, D and real b."""
    return 6 * n_modes * k + n_modes


def register_params(k: int, n_register: int) -> int:
    """Parameters of the real winding register (R^g with bias, R^v, E)."""
    return 3 * n_register * k + n_register


def match_modes(k: int, target: int, n_register: int = 0) -> int:
    """Complex mode count M whose block (plus an R-mode register) is nearest ``target`` parameters."""
    left = target - register_params(k, n_register)
    return max(1, round(left / (6 * k + 1)))


class CollectiveModeFFN(nn.Module):
    """Eq. 4 block. Complex weights stored as real/imag pairs; complex products written out in real arithmetic."""

    def __init__(self, d_model: int, layer_idx: int = 0, n_modes: int | None = None, match_hidden_mult: float = 2.0,
                 n_register: int = 0, init: str = "gaussian") -> None:
        super().__init__()
        k = d_model
        m = n_modes if n_modes is not None else match_modes(k, swiglu_block_params(k, match_hidden_mult), n_register)
        self.k, self.n_modes, self.layer_idx = k, m, layer_idx
        if init == "linear":  # nn.Linear's default bound 1/sqrt(fan_in) (module docstring)
            def draw(*shape: int) -> Tensor:
                return (torch.rand(*shape) * 2 - 1) / shape[-1] ** 0.5 / 2 ** 0.5  # fan_in = 2 x last dim
        elif init == "gaussian":
            def draw(*shape: int) -> Tensor:
                return torch.randn(*shape) / (2 * shape[-1]) ** 0.5
        else:
            raise ValueError(f"init={init!r}: 'linear' or 'gaussian'")
        self.c_g = nn.Parameter(draw(2, m, k))  # [Re, Im] of C^g, (2, M, k)
        self.c_v = nn.Parameter(draw(2, m, k))
        self.d = nn.Parameter(draw(2, k, m))  # [Re, Im] of D, (2, k, M)
        self.b = nn.Parameter(torch.zeros(m))

    def modes(self, zr: Tensor, zi: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Re m^g, Re m^v, Im m^v, each (B, T, M), from Re/Im z (B, T, k): one GEMM over [zr, zi]."""
        cg, cv = self.c_g, self.c_v
        w = torch.cat([torch.cat([cg[0], -cg[1]], 1), torch.cat([cv[0], -cv[1]], 1),
                       torch.cat([cv[1], cv[0]], 1)], 0)  # (3M, 2k)
        return (torch.cat([zr, zi], dim=-1) @ w.t()).chunk(3, dim=-1)

    def collective_update(self, zr: Tensor, zi: Tensor) -> Tensor:
        """Im(conj(z) * D q) with q = SiLU(Re m^g + b) * m^v: (B, T, k)."""
        mg, mvr, mvi = self.modes(zr, zi)  # (B, T, M)
        act = F.silu(mg + self.b)
        qr, qi = act * mvr, act * mvi
        dr, di = self.d[0], self.d[1]  # (k, M)
        w = torch.cat([torch.cat([dr, -di], 1), torch.cat([di, dr], 1)], 0)  # (2k, 2M): rows Re | Im of D q
        pr, pi = (torch.cat([qr, qi], dim=-1) @ w.t()).chunk(2, dim=-1)  # (B, T, k)
        return zr * pi - zi * pr

    def forward(self, theta: Tensor) -> Tensor:
        return self.collective_update(torch.cos(theta), torch.sin(theta))  # (B, T, k)


class WindingRegisterFFN(CollectiveModeFFN):
    """FSN-MF plus R real gated modes on the lifted phases (the winding register, App. A)."""

    def __init__(self, d_model: int, layer_idx: int = 0, n_modes: int | None = None, match_hidden_mult: float = 2.0,
                 n_register: int = 16, init: str = "gaussian") -> None:
        super().__init__(d_model, layer_idx, n_modes, match_hidden_mult, n_register, init)
        self.reg_in = nn.Linear(d_model, 2 * n_register, bias=False)  # R^g | R^v
        self.reg_bias = nn.Parameter(torch.zeros(n_register))
        self.reg_out = nn.Linear(n_register, d_model, bias=False)  # E
        if init == "linear":  # the register reads the unwrapped phases (|theta| ~ pi and more): its nn.Linear-default
            nn.init.zeros_(self.reg_out.weight)  # output would kick by ~1 rad per coordinate, so E starts at 0

    def forward(self, theta: Tensor) -> Tensor:
        gate, val = self.reg_in(theta).chunk(2, dim=-1)  # (B, T, R): reads the unwrapped lift
        register = self.reg_out(F.silu(gate + self.reg_bias) * val)  # (B, T, k)
        return self.collective_update(torch.cos(theta), torch.sin(theta)) + register


def collective_reference(module: CollectiveModeFFN, theta: Tensor) -> Tensor:
    """Plain complex-dtype Eq. 4 (reference for the real-arithmetic fast path)."""
    z = torch.polar(torch.ones_like(theta), theta)  # (B, T, k)
    cg = torch.complex(module.c_g[0], module.c_g[1])
    cv = torch.complex(module.c_v[0], module.c_v[1])
    d = torch.complex(module.d[0], module.d[1])
    mg, mv = z @ cg.transpose(0, 1), z @ cv.transpose(0, 1)  # (B, T, M) complex
    q = F.silu(mg.real + module.b) * mv
    return (z.conj() * (q @ d.transpose(0, 1))).imag
