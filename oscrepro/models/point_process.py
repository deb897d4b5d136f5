"""Temporal point-process head on the continuous-time encoder (osciformer Table 1: LL, next type, next time).

The encoder (:class:`~oscrepro.models.continuous_time.ContinuousTimeEncoder`, untouched) reads one-hot event
types at their times and is causal, so its state h_j after event j sees events 1..j only. From h_j the head gives,
on the next interval (t_j, t_{j+1}], the per-type conditional intensity of THP (Zuo et al. 2020) as ContiFormer's
PhysioPro TPP model writes it (``calculate_intensity_thp``: per-type slope and temperature, elapsed time not
divided by t_j):

    lambda_k(t | H_t) = f_k( w_k . h_j + b_k + alpha_k (t - t_j) ),   f_k(x) = (1 / beta_k) log(1 + exp(beta_k x)),

with learnable alpha_k (init -0.1) and softplus temperature beta_k > 0 (init 1), both as PhysioPro initialises
them. Why (t - t_j) and not THP's (t - t_j) / t_j: times here are measured from each row's start (a window's from
the event before it), so t_j carries no meaning of its own, and t_1 = 0 for recorded sets (THP divides by
t_j + 1 in its code). beta_k is stored as log beta_k so that it stays positive (PhysioPro's raw beta may cross
zero). f_k switches to the identity above beta_k x > 20 (``torch.nn.functional.softplus``'s threshold), where
PhysioPro clamps (and so flattens) the intensity instead.

Next event, as THP's ``Predictor`` heads (and PhysioPro's ``use_likelihood: false`` path): next-type logits
W_type h_j (K,) and the next inter-event gap w_time . h_j + b (a regression head), trained by cross-entropy and
squared error beside the likelihood (:class:`~oscrepro.tasks.point_process.PointProcessTask`). PhysioPro's
ContiFormer TPP config (``use_likelihood: true``) reads both from the intensity instead (expected next time
int t p(t) dt on a grid); that path is not implemented here.
"""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.base import VECTOR, Aux
from oscrepro.models.continuous_time import ContinuousTimeEncoder


class PointProcessOutput(NamedTuple):
    """hidden (B, T, D): h_j; type_logits (B, T, K): next type after event j; gap (B, T): next gap after t_j."""

    hidden: Tensor
    type_logits: Tensor
    gap: Tensor


class PointProcessHead(nn.Module):
    """Intensities between events, next-type logits and next-gap regression from causal states (module docstring)."""

    def __init__(self, d_model: int, n_types: int, alpha_init: float = -0.1, beta_init: float = 1.0) -> None:
        super().__init__()
        if beta_init <= 0:
            raise ValueError(f"beta_init={beta_init}: the softplus temperature must be > 0")
        self.n_types = n_types
        self.intensity_linear = nn.Linear(d_model, n_types)  # w_k . h_j + b_k
        self.alpha = nn.Parameter(torch.full((n_types,), float(alpha_init)))  # (K,) slope in elapsed time
        self.log_beta = nn.Parameter(torch.full((n_types,), math.log(beta_init)))  # (K,) log softplus temperature
        self.type_head = nn.Linear(d_model, n_types)
        self.time_head = nn.Linear(d_model, 1)

    def intensity(self, hidden: Tensor, elapsed: Tensor) -> Tensor:
        """lambda_k(t_j + s) from h_j: hidden (B, T, D), elapsed s >= 0 (B, T, S) -> (B, T, S, K), all > 0."""
        base = self.intensity_linear(hidden)[:, :, None, :]  # (B, T, 1, K)
        beta = self.log_beta.exp()  # (K,)
        x = base + self.alpha * elapsed[..., None]  # (B, T, S, K)
        return F.softplus(beta * x) / beta  # f_k(x) = log(1 + exp(beta_k x)) / beta_k

    def forward(self, hidden: Tensor) -> tuple[Tensor, Tensor]:
        """hidden (B, T, D) -> (next-type logits (B, T, K), next gap (B, T))."""
        return self.type_head(hidden), self.time_head(hidden).squeeze(-1)


class ContinuousTimeTPP(nn.Module):
    """Continuous-time encoder over one-hot event types + :class:`PointProcessHead` (osciformer Table 1).

    ``n_features`` is the one-hot width the data module reports (its ``num_types``); ``n_types`` defaults to it.
    The one-hot input through the encoder's linear embedding is an event-type embedding (THP's ``nn.Embedding``).
    """

    attention_contract: ClassVar[str | None] = VECTOR  # builds each layer's mechanism (oscrepro.attention.base)

    def __init__(self, n_features: int, n_types: int | None = None, alpha_init: float = -0.1,
                 beta_init: float = 1.0, **encoder_kwargs) -> None:
        super().__init__()
        self.encoder = ContinuousTimeEncoder(n_features=n_features, **encoder_kwargs)
        self.head = PointProcessHead(self.encoder.d_model, n_features if n_types is None else n_types,
                                     alpha_init, beta_init)

    def forward(self, x: Tensor, need_weights: bool = False, *, times: Tensor | None = None,
                mask: Tensor | None = None) -> tuple[PointProcessOutput, list[Aux]]:
        """x (B, T, K) one-hot types at ``times`` (B, T). ``mask`` is accepted and unused: the encoder is causal, so
        right padding never reaches a real position's state (continuous_time's padding design)."""
        hidden, auxes = self.encoder(x, times=times, need_weights=need_weights)  # (B, T, D)
        type_logits, gap = self.head(hidden)
        return PointProcessOutput(hidden, type_logits, gap), auxes

    def intensity(self, hidden: Tensor, elapsed: Tensor) -> Tensor:
        """The head's intensities: hidden (B, T, D), elapsed (B, T, S) -> (B, T, S, K)."""
        return self.head.intensity(hidden, elapsed)
