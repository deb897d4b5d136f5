"""Sequence-level regression with the continuous-time encoder: one value per series (BIDMC32HR heart rate,
osciformer Table 3).

The causal :class:`~oscrepro.models.continuous_time.ContinuousTimeEncoder` (OsciFormer, ContiFormer or softmax by
the attention factory) reads the irregular series, a :class:`~oscrepro.models.continuous_time.ReadoutHead` pools the
real positions (``'last'``: the state at the final observation, which under causal attention has seen the whole
series, where osciformer App. E.2 places its single query and Neural RDE reads its terminal state; ``'mean'``: the
mean over real observations) and maps them to ``n_out`` standardised values z, and the output is
``z * target_std + target_mean`` in the target's unit. The statistics are buffers set once from the training split
(:meth:`set_data_statistics`, called by ``oscrepro.train.build``; identity until then) and saved with checkpoints.
So the head learns unit-scale values while the regression task's loss and RMSE are in the data's unit (bpm),
and the first prediction is the training mean rather than 0.

Output (B, 1, n_out): the regression task's target layout (one target per series, K = 1), so
:class:`~oscrepro.tasks.regression.RegressionTask` trains and evaluates it unchanged.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from oscrepro.attention.base import VECTOR, Aux
from oscrepro.models.continuous_time import ContinuousTimeEncoder, ReadoutHead


class ContinuousTimeSequenceRegressor(nn.Module):
    """Continuous-time encoder + pooled readout to ``n_out`` values per series, de-standardised (module docstring)."""

    attention_contract: ClassVar[str | None] = VECTOR  # builds each layer's mechanism (oscrepro.attention.base)

    kwargs_to: ClassVar[str] = "ContinuousTimeEncoder"  # where **encoder_kwargs go (config keys checked against it)

    def __init__(self, n_out: int = 1, readout: str = "last", **encoder_kwargs: Any) -> None:
        super().__init__()
        self.encoder = ContinuousTimeEncoder(**encoder_kwargs)
        self.head = ReadoutHead(self.encoder.d_model, n_out, readout)
        self.register_buffer("target_mean", torch.zeros(n_out))  # (n_out,) training targets' mean
        self.register_buffer("target_std", torch.ones(n_out))  # (n_out,) and standard deviation

    def set_target_statistics(self, mean: Tensor | np.ndarray | float, std: Tensor | np.ndarray | float) -> None:
        """Set the (n_out,) mean / std the standardised head output is mapped back with (std must be > 0)."""
        mean_t = torch.as_tensor(mean, dtype=torch.float32).reshape(-1).expand_as(self.target_mean)
        std_t = torch.as_tensor(std, dtype=torch.float32).reshape(-1).expand_as(self.target_std)
        if not bool((std_t > 0).all()) or not bool(torch.isfinite(mean_t).all()):
            raise ValueError(f"target statistics must be finite with std > 0, got mean {mean_t}, std {std_t}")
        self.target_mean.copy_(mean_t)
        self.target_std.copy_(std_t)

    def set_data_statistics(self, datamodule: Any) -> None:
        """Copy the training targets' mean / std from a set-up data module (``HeartRateDataModule``)."""
        if getattr(datamodule, "target_std", None) is None:
            raise ValueError(f"{type(datamodule).__name__} has no target statistics: call setup() first")
        self.set_target_statistics(datamodule.target_mean, datamodule.target_std)

    def standardise(self, y: Tensor) -> Tensor:
        """Targets in their unit (..., n_out) -> the head's standardised scale (the inverse of the output map)."""
        return (y - self.target_mean) / self.target_std

    def forward(self, x: Tensor, need_weights: bool = False, *, times: Tensor | None = None,
                mask: Tensor | None = None, target_times: Tensor | None = None) -> tuple[Tensor, list[Aux]]:
        """x (B, T, F) at ``times`` (B, T), ``mask`` (B, T) real observations -> (predictions (B, 1, n_out) in the
        target's unit, one aux per layer). ``target_times`` (B, 1), the series' end, is accepted because regression
        batches carry it; a sequence-level target has no time of its own, so it is not read."""
        h, auxes = self.encoder(x, times=times, need_weights=need_weights)  # (B, T, D)
        z = self.head(h, mask)  # (B, n_out) standardised
        return (z * self.target_std + self.target_mean)[:, None], auxes  # (B, 1, n_out)
