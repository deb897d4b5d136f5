"""Regression at target times (spiral interpolation / extrapolation, resonance forecasting): masked MSE and RMSE.

Batches are ``(x, y, meta)``: ``x`` (B, T, C) right-padded observations, ``y`` (B, K, C_out) targets at
``meta['target_times']`` (B, K), ``meta['target_mask']`` (B, K) True on real targets (absent: all real), and
``meta['times']`` / ``meta['mask']`` for the observations. Every meta key the model reads (:data:`MODEL_KEYS`) is
passed to it as a keyword (:class:`~oscrepro.models.continuous_time.ContinuousTimeRegressor`). Padded targets
count nowhere: not in the loss, not in its gradient, not in the metrics (they may even hold NaN).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
from torch import Tensor

from oscrepro.tasks.base import BaseTask
from oscrepro.tasks.classification import time_kwargs

MODEL_KEYS = ("times", "mask", "target_times")  # meta keys handed to the model as keywords


def masked_squared_error(pred: Tensor, y: Tensor, target_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Sum of squared errors over real targets and the number of real scalars it sums.

    pred, y (B, K, C_out), target_mask (B, K) bool -> (sum, count), both scalars. ``torch.where`` (not a product
    with the mask, where 0 * NaN = NaN) keeps NaN / inf in padded targets out of the value and the gradient.
    """
    if target_mask is None:
        target_mask = torch.ones(pred.shape[:2], dtype=torch.bool, device=pred.device)
    keep = target_mask[..., None].expand_as(pred)  # (B, K, C_out)
    diff = torch.where(keep, pred - y, pred.new_zeros(()))  # (B, K, C_out), zero (and no gradient) on pads
    return diff.square().sum(), keep.sum()


def target_mask_of(batch: tuple) -> Tensor | None:
    """``meta['target_mask']`` (B, K) of a batch, or None (all targets real)."""
    return batch[2].get("target_mask") if len(batch) > 2 else None


class RegressionTask(BaseTask):
    """Masked mean squared error as the objective; logs ``<split>/mse``, ``<split>/rmse`` and ``<split>/loss``
    (= mse) over each evaluation epoch (errors summed over all real targets, then divided once)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sums: dict[str, list[Tensor]] = defaultdict(list)

    def predict(self, batch: tuple, need_weights: bool = False) -> tuple[Tensor, list]:
        """The model's predictions (B, K, C_out) for a batch, with the meta keys it reads."""
        return self.model(batch[0], need_weights=need_weights, **time_kwargs(batch, MODEL_KEYS))

    def loss(self, batch: tuple) -> Tensor:
        """Masked MSE of a training batch: mean over real targets and output channels."""
        pred, _ = self.predict(batch)
        sse, n = masked_squared_error(pred, batch[1], target_mask_of(batch))
        return sse / n.clamp(min=1)

    def _eval_step(self, batch: tuple, split: str) -> None:
        pred, _ = self.predict(batch)
        sse, n = masked_squared_error(pred, batch[1], target_mask_of(batch))
        self._sums[f"{split}/sse"].append(sse.detach().double()[None])
        self._sums[f"{split}/n"].append(n[None])

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: tuple, batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def _flush(self, split: str) -> None:
        sums = {k: torch.cat(v).sum() for k, v in self._sums.items()}
        self._sums.clear()
        if f"{split}/n" not in sums:
            return
        mse = (sums[f"{split}/sse"] / sums[f"{split}/n"].clamp(min=1)).float()
        self.log_dict({f"{split}/loss": mse, f"{split}/mse": mse, f"{split}/rmse": mse.sqrt()}, prog_bar=split == "val")

    def on_validation_epoch_end(self) -> None:
        self._flush("val")

    def on_test_epoch_end(self) -> None:
        self._flush("test")
