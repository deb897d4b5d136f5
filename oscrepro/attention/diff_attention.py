"""Differential attention (Ye et al., 2025, "Differential Transformer", Eqs. 1-3), a published baseline in coupledqk
(Sec. 2.3, Tables 9 and 11).

What: each differential head splits its query and key into two halves and takes the difference of two softmax
maps, A = softmax(Q1 K1^T / sqrt(d)) - lambda softmax(Q2 K2^T / sqrt(d)) (Ye Eq. 1). It applies A to the values,
normalises each head with RMSNorm and scales by (1 - lambda_init) (Ye Eq. 3), then projects with W_O. Here
lambda_init = 0.8 - 0.6 exp(-0.3 l), with l the 0-based ``layer_idx`` (coupledqk Table 9). Why: common-mode
"attention noise" cancels between the two maps. coupledqk places this post-scoring axis opposite its own
pre-scoring coupling (Sec. 2.3).

Two forms (``form``), both with bias-free d -> d projections W_Q, W_K, W_V, W_O (4 d^2, as standard attention):

* ``official`` follows microsoft/unilm ``Diff-Transformer/multihead_diffattn.py``. There are H' = n_heads / 2
  differential heads. Each has two query/key sub-heads of width d = d_model / n_heads = d_h (scale 1/sqrt(d_h))
  and a value of width 2 d_h. Sub-heads 2i and 2i+1 of the projection belong to head i (the official
  ``view(B, T, 2H', d)`` layout). lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init (Ye Eq. 2). It uses
  four vectors of size d_h, drawn from N(0, 0.1) and shared by all heads of the layer, plus RMSNorm(2 d_h,
  eps 1e-5) with an affine weight, shared by the heads. That is +6 d_h per layer: 8 x 384 = 3,072 at Small.
* ``paper`` is the variant that coupledqk's counts imply. Table 9 gives a "sub-head dimension d_h/2" and
  Table 11 gives "+64" at 8 heads x 8 layers. So there are H' = n_heads differential heads, each with two
  sub-heads of width d_h / 2 (scale 1/sqrt(d_h / 2)) and a value of width d_h. There is one learnable scalar
  lambda per head, initialised to lambda_init (8 per layer x 8 layers = 64), and RMSNorm(d_h, eps 1e-5) has no
  affine weight (0 parameters). Everything else is as in ``official``.

Choices where the sources leave room:
* RoPE (``rope=True``) rotates each q/k sub-head with the rotate-half convention of ``oscrepro.attention.rope``.
  The official code rotates interleaved pairs, which differs only by a fixed permutation of the W_Q and W_K
  columns. Positions are the indices 0..T-1 and ``pos`` is ignored, as for every mechanism.
* ``aux`` (only with ``need_weights``): ``diff_weights`` is the differential map A1 - lambda A2 (B, H', T, T);
  ``lambda`` is (H',) (the official scalar repeated per head). ``weights`` (B, H, T, T) is the map that mixes the
  values into output block h of width d_h, i.e. ``diff_weights`` repeated H / H' times per head. That is the
  map itself in the paper form, and each official head's map twice, since its value spans two d_h blocks. This
  keeps the shared contract's (B, n_heads, T, T) meaning of ``weights``. The entries can be negative and rows
  sum to 1 - lambda, so they are not probabilities.
* The two forms share one class through ``form``, as the brief asks for one selectable mechanism. The
  parameter names differ (``lambda_q1``, ... vs ``lambda_head``), so state_dicts do not move between forms.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.base import AttentionBase, Aux, causal_mask, one_of, refuse
from oscrepro.attention.rope import rope_problems, rope_qk

FORMS = ("official", "paper")


def lambda_init_at(layer_idx: int) -> float:
    """lambda_init = 0.8 - 0.6 exp(-0.3 l), l = 0-based layer index (Ye et al. 2025; coupledqk Table 9)."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer_idx)


class DifferentialAttention(AttentionBase):
    """Difference of two softmax maps per head, per-head RMSNorm, x (1 - lambda_init) (Ye et al. Eqs. 1-3)."""

    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0, form: str = "official", bias: bool = False,
                 rope: bool = False, rope_base: float = 10000.0) -> None:
        refuse(DifferentialAttention.config_problems(d_model, n_heads, form=form, rope=rope))
        super().__init__(d_model, n_heads, layer_idx)
        self.form, self.rope, self.rope_base = form, rope, rope_base
        self.n_diff = n_heads // 2 if form == "official" else n_heads  # H' differential heads
        self.d_sub = self.d_head if form == "official" else self.d_head // 2  # q/k sub-head width d
        self.lambda_init = lambda_init_at(layer_idx)
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        if form == "official":  # Ye Eq. 2 re-parameterisation, vectors shared by the layer's heads
            self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
                nn.Parameter(torch.empty(self.d_sub).normal_(mean=0.0, std=0.1)) for _ in range(4))
        else:  # one scalar per head (Table 11's +64)
            self.lambda_head = nn.Parameter(torch.full((self.n_diff,), self.lambda_init))
        self.norm = nn.RMSNorm(2 * self.d_sub, eps=1e-5, elementwise_affine=form == "official")

    @classmethod
    def config_problems(cls, d_model: int, n_heads: int, *, form: str = "official", rope: bool = False,
                        **hparams: Any) -> list[str]:
        """The shared head split; ``official``: an even n_heads (pairs of sub-heads); ``paper``: an even head
        dimension (two sub-heads of d_h / 2); with ``rope``, an even sub-head width (d_h, or d_h / 2)."""
        problems = super().config_problems(d_model, n_heads, **hparams) or one_of("form", form, FORMS)
        if problems:
            return problems
        d_head = d_model // n_heads
        if form == "official" and n_heads % 2:
            return [f"form='official' needs an even n_heads (n_heads / 2 differential heads), got {n_heads}"]
        if form == "paper" and d_head % 2:
            return [f"form='paper' needs an even head dimension (sub-heads of d_h / 2), got {d_head}"]
        return rope_problems(d_head if form == "official" else d_head // 2, rope,
                             "q/k sub-head width (d_model / n_heads, halved by form='paper')")

    def lambdas(self) -> Tensor:
        """lambda per differential head, (H',)."""
        if self.form == "paper":
            return self.lambda_head
        lam = (torch.exp((self.lambda_q1 * self.lambda_k1).sum()) - torch.exp((self.lambda_q2 * self.lambda_k2).sum())
               + self.lambda_init)  # Ye Eq. 2, a scalar
        return lam.expand(self.n_diff)

    def forward(self, x: Tensor, *, causal: bool = False, pos: Tensor | None = None, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        b, t, _ = x.shape
        hd, d = self.n_diff, self.d_sub
        q = self.q_proj(x).view(b, t, 2 * hd, d).transpose(1, 2)  # (B, 2H', T, d): sub-heads 2i, 2i+1 -> head i
        k = self.k_proj(x).view(b, t, 2 * hd, d).transpose(1, 2)  # (B, 2H', T, d)
        v = self.v_proj(x).view(b, t, hd, 2 * d).transpose(1, 2)  # (B, H', T, 2d)
        if self.rope:
            q, k = rope_qk(q, k, self.rope_base)
        q1, q2, k1, k2 = q[:, 0::2], q[:, 1::2], k[:, 0::2], k[:, 1::2]  # (B, H', T, d) each
        lam = self.lambdas().to(q.dtype)  # (H',)
        lam4 = lam.view(1, hd, 1, 1)
        aux: Aux = {}
        if need_weights:
            s1 = q1 @ k1.transpose(-2, -1) / math.sqrt(d)  # (B, H', T, T)
            s2 = q2 @ k2.transpose(-2, -1) / math.sqrt(d)  # (B, H', T, T)
            if causal:
                allowed = causal_mask(t, x.device)
                s1, s2 = (s.masked_fill(~allowed, float("-inf")) for s in (s1, s2))
            w = s1.softmax(dim=-1) - lam4 * s2.softmax(dim=-1)  # (B, H', T, T), Ye Eq. 1
            o = w @ v  # (B, H', T, 2d)
            aux = {"weights": w.repeat_interleave(self.n_heads // hd, dim=1),  # (B, H, T, T)
                   "diff_weights": w, "lambda": lam}
        else:  # (A1 - lambda A2) V = A1 V - lambda A2 V
            o = (F.scaled_dot_product_attention(q1, k1, v, is_causal=causal)
                 - lam4 * F.scaled_dot_product_attention(q2, k2, v, is_causal=causal))  # (B, H', T, 2d)
        o = self.norm(o) * (1.0 - self.lambda_init)  # per-head RMSNorm, x (1 - lambda_init), Ye Eq. 3
        return self.out_proj(o.transpose(1, 2).reshape(b, t, hd * 2 * d)), aux  # (B, T, D)
