"""Shared LightningModule plumbing: optimizer/scheduler from config partials and divergence detection."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn


class DivergedError(RuntimeError):
    """Raised when the training loss becomes NaN/inf; the run record marks the run ``diverged``."""

    def __init__(self, epoch: int, step: int, loss: float) -> None:
        super().__init__(f"non-finite training loss {loss} at epoch {epoch}, step {step}")
        self.epoch, self.step, self.loss = epoch, step, loss


class BaseTask(L.LightningModule):
    """Owns the model, builds the optimizer (and optional per-epoch scheduler) from Hydra partials.

    ``debug_nan_step`` is a fault-injection knob used only by ``conf/debug/diverge.yaml`` and the tests: at that
    global step the loss is replaced by NaN so the divergence path can be exercised end to end.
    """

    def __init__(self, model: nn.Module, optimizer: Callable[..., torch.optim.Optimizer],
                 scheduler: Callable[..., Any] | None = None, debug_nan_step: int | None = None) -> None:
        super().__init__()
        self.model = model
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.debug_nan_step = debug_nan_step

    def on_train_epoch_start(self) -> None:
        self._loss_sum, self._loss_n = torch.zeros(()), 0

    def log_train_loss(self, loss: Tensor, batch_size: int) -> None:
        """``train/loss_step`` at the logging cadence and ``train/loss_epoch`` (batch-size weighted mean) at epoch end.

        The same two series ``self.log(..., on_step=True, on_epoch=True)`` writes, without its per-step cost (about
        a third of a small model's step on CPU): the step value is handed to Lightning only on the steps its logger
        connector writes (``log_every_n_steps``), the epoch mean is accumulated here as Lightning does (float32
        sum of loss x batch size over the summed batch size).
        """
        self._loss_sum += loss.detach().float() * batch_size
        self._loss_n += batch_size
        if self.trainer._logger_connector.should_update_logs or self.trainer.fast_dev_run:
            self.log("train/loss_step", loss, on_step=True, on_epoch=False, prog_bar=True, batch_size=batch_size)

    def on_train_epoch_end(self) -> None:
        if self._loss_n:
            self.log("train/loss_epoch", self._loss_sum / self._loss_n, on_step=False, on_epoch=True)

    def configure_optimizers(self) -> Any:
        params = [p for p in self.parameters() if p.requires_grad]
        opt = self.optimizer_factory(params)
        if self.scheduler_factory is None:
            return opt
        sched = self.scheduler_factory(opt, T_max=max(1, self.trainer.max_epochs or 1))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}

    def check_finite(self, loss: Tensor) -> Tensor:
        """Raise :class:`DivergedError` on a non-finite loss (after optional fault injection)."""
        if self.debug_nan_step is not None and self.global_step >= self.debug_nan_step:
            loss = loss * float("nan")
        value = float(loss.detach())
        if not math.isfinite(value):
            raise DivergedError(self.current_epoch, self.global_step, value)
        return loss
