"""Continuous-time sequence backbone (OsciFormer, ContiFormer) and its heads: irregular-series classification and
regression at target times.

An observation (x_i, t_i) of an irregularly sampled series becomes a token: a linear projection of its features
x_i (osciformer App. E.2: "h = E x"), plus, with ``time_embedding='sinusoidal'``, the temporal encoding of t_i that
ContiFormer's encoder adds (``ContiFormer/spiral.py``: ``lin_in(x) + temporal_enc(t)``). The default ``'none'``
leaves time to the mechanism, as in OsciFormer; a discrete-time baseline (softmax) sees time only through it. The
tokens run through pre-LN blocks (:class:`~oscrepro.models.block.TransformerBlock`) whose mechanism gets the
timestamps ``times`` (B, T) with ``causal=True`` on every call: OsciFormer's output at t_j is a softmax over i <= j
(osciformer Sec. 6), so the encoder is causal whatever mechanism it hosts, and never branches on which one it is.

Padding design. Batches are right-padded: ``mask`` (B, T) is True on real observations, pads come after every
real one and repeat the last real time. Under causal attention a real position j attends to i <= j only, all of them
real, so the real positions' outputs are exactly those of the unpadded sequence; the heads then read real positions
only (``mask``). The attention contract therefore needs no key-padding mask.

Heads are small modules composed with the encoder (:class:`ReadoutHead`, the regressor's query tokens + linear map),
so a further head (a point-process intensity) is a new class beside these and the encoder stays untouched.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn

from oscrepro.attention.base import VECTOR, Aux
from oscrepro.models.block import AttentionFactory, TransformerBlock

TIME_EMBEDDINGS = ("none", "sinusoidal")
READOUTS = ("last", "mean")


def index_times(x: Tensor) -> Tensor:
    """Regular sampling 0, 1, ..., T-1 for a (B, T, F) input: the ``times`` used when a batch carries none."""
    b, t = x.shape[:2]
    return torch.arange(t, device=x.device, dtype=torch.float32).expand(b, t)  # (B, T)


def sinusoidal_times(times: Tensor, d: int) -> Tensor:
    """Temporal encoding of real-valued times (ContiFormer / Transformer Hawkes): channel c carries
    sin (c even) or cos (c odd) of t / 10000^(2 floor(c/2) / d). (B, T) -> (B, T, D)."""
    c = torch.arange(d, device=times.device)
    inv_period = torch.exp(-(2 * (c // 2)).float() * (math.log(10000.0) / d))  # (D,)
    angle = times.float()[..., None] * inv_period  # (B, T, D)
    return torch.where(c % 2 == 0, angle.sin(), angle.cos())


class ContinuousTimeEncoder(nn.Module):
    """Feature projection (+ optional time encoding) -> causal pre-LN blocks that receive ``times`` -> final LN."""

    def __init__(self, n_features: int, d_model: int, n_heads: int, n_layers: int, d_ff: int,
                 attention: AttentionFactory, dropout: float = 0.0, time_embedding: str = "none") -> None:
        super().__init__()
        if time_embedding not in TIME_EMBEDDINGS:
            raise ValueError(f"time_embedding={time_embedding!r}; valid: {', '.join(TIME_EMBEDDINGS)}")
        self.d_model = d_model
        self.time_embedding = time_embedding
        self.embed = nn.Linear(n_features, d_model)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, attention, layer_idx=i, dropout=dropout) for i in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def time_features(self, times: Tensor) -> Tensor:
        """(B, T) -> (B, T, D) added to the tokens: the sinusoidal encoding, or zeros with ``'none'``."""
        if self.time_embedding == "sinusoidal":
            return sinusoidal_times(times, self.d_model)
        return times.new_zeros(*times.shape, self.d_model)

    def tokens(self, x: Tensor, times: Tensor) -> Tensor:
        """Observation tokens: (B, T, F) features at (B, T) times -> (B, T, D)."""
        return self.embed(x) + self.time_features(times).to(x.dtype)

    def encode(self, h: Tensor, times: Tensor, need_weights: bool = False) -> tuple[Tensor, list[Aux]]:
        """Run the causal blocks over ready tokens h (B, T, D) at non-decreasing ``times`` (B, T)."""
        h = self.drop(h)
        auxes: list[Aux] = []
        for block in self.blocks:
            h, aux = block(h, causal=True, times=times, need_weights=need_weights)  # (B, T, D)
            auxes.append(aux)
        return self.norm(h), auxes

    def forward(self, x: Tensor, *, times: Tensor | None = None, need_weights: bool = False
                ) -> tuple[Tensor, list[Aux]]:
        """(B, T, F) features at ``times`` (B, T; default 0..T-1) -> ((B, T, D), one aux per layer)."""
        times = index_times(x) if times is None else times
        return self.encode(self.tokens(x, times), times, need_weights)


class ReadoutHead(nn.Module):
    """Pool the real positions of (B, T, D) states, then a linear map. ``'last'``: the last real observation (the
    state at the final time, where osciformer App. E.2 places its single query); ``'mean'``: the mean over real ones."""

    def __init__(self, d_model: int, n_out: int, readout: str = "last") -> None:
        super().__init__()
        if readout not in READOUTS:
            raise ValueError(f"readout={readout!r}; valid: {', '.join(READOUTS)}")
        self.readout = readout
        self.linear = nn.Linear(d_model, n_out)

    def forward(self, h: Tensor, mask: Tensor | None = None) -> Tensor:
        """h (B, T, D), mask (B, T) bool or None (all real) -> (B, n_out)."""
        if mask is None:
            pooled = h[:, -1] if self.readout == "last" else h.mean(dim=1)  # (B, D)
        elif self.readout == "last":
            last = mask.long().sum(dim=1).clamp(min=1) - 1  # (B,) index of the last real observation
            pooled = h[torch.arange(h.shape[0], device=h.device), last]  # (B, D)
        else:
            w = mask.to(h.dtype)[..., None]  # (B, T, 1)
            pooled = (h * w).sum(dim=1) / w.sum(dim=1).clamp(min=1.0)  # (B, D)
        return self.linear(pooled)


class ContinuousTimeClassifier(nn.Module):
    """Continuous-time encoder + :class:`ReadoutHead` (irregular UEA, bit-stream XOR, resonance classification)."""

    attention_contract: ClassVar[str | None] = VECTOR  # builds each layer's mechanism (oscrepro.attention.base)

    kwargs_to: ClassVar[str] = "ContinuousTimeEncoder"  # where **encoder_kwargs go (config keys checked against it)

    def __init__(self, n_classes: int, readout: str = "last", **encoder_kwargs) -> None:
        super().__init__()
        self.encoder = ContinuousTimeEncoder(**encoder_kwargs)
        self.head = ReadoutHead(self.encoder.d_model, n_classes, readout)

    def forward(self, x: Tensor, need_weights: bool = False, *, times: Tensor | None = None,
                mask: Tensor | None = None) -> tuple[Tensor, list[Aux]]:
        h, auxes = self.encoder(x, times=times, need_weights=need_weights)  # (B, T, D)
        return self.head(h, mask), auxes  # (B, C)


def merge_by_time(times: Tensor, mask: Tensor, target_times: Tensor) -> tuple[Tensor, Tensor]:
    """Order that interleaves T observations and K target queries by time, and the merged times.

    Sort keys: real observations and queries at their time, padded observations at +inf (so they go last and no
    real token sees them). The sort is stable over [observations, queries], so on a tie an observation precedes a
    query (a query at tau sees the observation at tau) and queries keep their order (padded targets, which repeat
    the last target time, come after every real one). Times after the sort are lifted by a running max so that the
    padded tail keeps them non-decreasing. Returns order (B, T + K) into the concatenation and times (B, T + K).
    """
    t_all = torch.cat([times, target_times.to(times.dtype)], dim=1)  # (B, T + K)
    real = torch.cat([mask, torch.ones_like(target_times, dtype=torch.bool)], dim=1)  # (B, T + K)
    order = torch.sort(t_all.masked_fill(~real, float("inf")), dim=1, stable=True).indices  # (B, T + K)
    return order, t_all.gather(1, order).cummax(dim=1).values


class ContinuousTimeRegressor(nn.Module):
    """Continuous-time encoder that predicts values at target times (spiral interpolation / extrapolation,
    resonance forecasting).

    Target-time design: a query token per target time tau_k, a learned "query" embedding (zero features) plus the
    time encoding of tau_k, is merged into the observation sequence at tau_k (:func:`merge_by_time`), the whole
    sequence is encoded once with the causal encoder at the merged times, and the states at the query positions
    are mapped to ``n_out`` values. This works through the attention contract alone: the mechanism sees one
    non-decreasing ``times`` row (as the data contract promises), evaluates its dynamics from each t_i forward to
    tau_k as it does between observations, and causality makes the prediction at tau_k a function of the
    observations at times <= tau_k only (a filtering forecast; ContiFormer's ``spiral.py`` instead interpolates the
    embedded input at the target times, which reads the next observation too, and is not causal). Later tokens do
    attend to earlier query tokens, so a prediction depends on the earlier target *times* (never on target values);
    with a fixed target grid per dataset that is the same in training and evaluation. With ``need_weights`` each
    layer's aux also holds ``merge_order`` (B, T + K), since its weights are in merged order.
    """

    attention_contract: ClassVar[str | None] = VECTOR  # builds each layer's mechanism (oscrepro.attention.base)

    kwargs_to: ClassVar[str] = "ContinuousTimeEncoder"  # where **encoder_kwargs go (config keys checked against it)

    def __init__(self, n_out: int | None = None, **encoder_kwargs) -> None:
        super().__init__()
        self.encoder = ContinuousTimeEncoder(**encoder_kwargs)
        d = self.encoder.d_model
        n_out = encoder_kwargs["n_features"] if n_out is None else n_out  # None: predict the observed channels
        self.query = nn.Parameter(torch.randn(d))  # (D,) learned query embedding, N(0, 1) like nn.Embedding
        self.head = nn.Linear(d, n_out)

    def forward(self, x: Tensor, need_weights: bool = False, *, times: Tensor | None = None,
                mask: Tensor | None = None, target_times: Tensor | None = None) -> tuple[Tensor, list[Aux]]:
        """x (B, T, F) at ``times`` (B, T), ``mask`` (B, T) real observations, ``target_times`` (B, K; default
        ``times``) -> (predictions (B, K, n_out), one aux per layer)."""
        b, t, _ = x.shape
        times = index_times(x) if times is None else times
        mask = torch.ones(b, t, dtype=torch.bool, device=x.device) if mask is None else mask
        target_times = times if target_times is None else target_times
        enc, d = self.encoder, self.encoder.d_model
        order, merged_times = merge_by_time(times, mask, target_times)  # (B, T + K) each
        queries = self.query.to(x.dtype) + enc.time_features(target_times).to(x.dtype)  # (B, K, D)
        h = torch.cat([enc.tokens(x, times), queries], dim=1)  # (B, T + K, D) observations then queries
        h = h.gather(1, order[..., None].expand(-1, -1, d))  # (B, T + K, D) sorted by time
        h, auxes = enc.encode(h, merged_times, need_weights)
        at = order.argsort(dim=1)[:, t:]  # (B, K) merged position of each query
        h_q = h.gather(1, at[..., None].expand(-1, -1, d))  # (B, K, D)
        if need_weights:
            auxes = [{**aux, "merge_order": order} for aux in auxes]
        return self.head(h_q), auxes  # (B, K, n_out)
