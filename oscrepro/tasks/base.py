"""Shared LightningModule plumbing: the training step, optimizer/scheduler from config partials, divergence detection.

The optimization is written out here (Lightning manual optimization) instead of Lightning's automatic loop: on a
small model the automatic loop's closure and per-step hook chain cost about as much as the model (SVA: 0.2 ms of a
1.5 ms step, measured by ``python -m oscrepro.bench.loop``). What a step computes is unchanged: the loss divided by
``accumulate_grad_batches``, backward, and every ``accumulate_grad_batches`` batches (or at the epoch's last batch)
gradient clipping through Lightning's precision plugin, ``optimizer.step()``, ``zero_grad(set_to_none=True)``; an
epoch-interval scheduler steps once at the end of every training epoch. The trainer config keeps its keys
(``gradient_clip_val``, ``gradient_clip_algorithm``, ``accumulate_grad_batches``): :func:`oscrepro.train.make_trainer`
hands them to the task (:meth:`BaseTask.configure_loop`) instead of to Lightning.

Per batch, Lightning's loop around that step is made lean at ``on_fit_start`` (:mod:`oscrepro.tasks.lean`: hooks
resolved once per epoch, backward and step without the hook dispatch nothing listens to, a throttled progress bar);
``lean_loop = False`` trains with Lightning's stock per-batch code, which gives the same run bit for bit.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import lightning as L
import numpy as np
import torch
from torch import Tensor, nn

from oscrepro.tasks import lean


class DivergedError(RuntimeError):
    """Raised when the training loss becomes NaN/inf; the run record marks the run ``diverged``."""

    def __init__(self, epoch: int, step: int, loss: float) -> None:
        super().__init__(f"non-finite training loss {loss} at epoch {epoch}, step {step}")
        self.epoch, self.step, self.loss = epoch, step, loss


class BaseTask(L.LightningModule):
    """Owns the model, builds the optimizer and an optional scheduler from Hydra partials.

    ``scheduler_interval``: ``epoch`` (the partial is called with ``T_max`` = max_epochs and stepped at every
    training epoch's end) or ``step`` (the partial carries its own length, e.g. ``oscrepro.tasks.schedules``'
    ``warmup_cosine``, and is stepped after every optimizer step).

    ``debug_nan_step`` is a fault-injection knob used only by ``conf/debug/diverge.yaml`` and the tests: at that
    global step the loss is replaced by NaN so the divergence path can be exercised end to end.
    """

    lean_loop: bool = True  # False: Lightning's stock per-batch code (the reference tests/unit/tasks/test_lean.py uses)

    def __init__(
        self,
        model: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., Any] | None = None,
        debug_nan_step: int | None = None,
        scheduler_interval: str = "epoch",
    ) -> None:
        super().__init__()
        if scheduler_interval not in ("epoch", "step"):
            raise ValueError(f"task.scheduler_interval={scheduler_interval!r}; valid: epoch, step")
        self.scheduler_interval = scheduler_interval
        self.model = model
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.debug_nan_step = debug_nan_step
        self.automatic_optimization = False  # training_step optimizes (module docstring)
        self.gradient_clip_val: float | None = None
        self.gradient_clip_algorithm: str = "norm"
        self.accumulate_grad_batches: int = 1
        self._direct = False  # backward and step without Lightning's hook dispatch (on_fit_start decides)
        # the epoch's loss accumulators; also set here because a resume in the middle of an epoch (a step-based run
        # checkpointed at a validation) enters the epoch without calling on_train_epoch_start
        self._loss_sum, self._loss_n = np.float32(0), 0

    def configure_loop(
        self,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = "norm",
        accumulate_grad_batches: int = 1,
    ) -> None:
        """The trainer config's clipping and accumulation, applied by :meth:`training_step`."""
        if accumulate_grad_batches < 1:
            raise ValueError(f"trainer.accumulate_grad_batches={accumulate_grad_batches}: must be >= 1")
        self.gradient_clip_val = float(gradient_clip_val) if gradient_clip_val else None
        self.gradient_clip_algorithm = gradient_clip_algorithm or "norm"
        self.accumulate_grad_batches = int(accumulate_grad_batches)

    def batch_size(self, batch: Any) -> int:
        """Examples in a batch (the first element's leading dimension); weights the epoch's mean loss."""
        return len(batch[0])

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        """Loss (``self.loss``, checked finite, logged), backward, and every ``accumulate_grad_batches`` batches
        clip, step and zero the gradients."""
        loss = self.check_finite(self.loss(batch))
        self.log_train_loss(loss, self.batch_size(batch))
        acc = self.accumulate_grad_batches
        objective = loss * self.shard_weight(batch) if self.trainer.world_size > 1 else loss
        objective = objective / acc if acc > 1 else objective
        if self._direct:
            lean.direct_backward(objective)
        else:
            self.manual_backward(objective)
        if acc == 1 or (batch_idx + 1) % acc == 0 or self.trainer.is_last_batch:
            opt = self.optimizers()
            if self.gradient_clip_val:
                self.clip_gradients(
                    opt, gradient_clip_val=self.gradient_clip_val, gradient_clip_algorithm=self.gradient_clip_algorithm
                )
            if self._direct:
                lean.direct_step(opt)
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)
            if self.scheduler_interval == "step" and self.scheduler_factory is not None:
                self.lr_schedulers().step()
        return loss.detach()

    def shard_weight(self, batch: Any) -> Tensor:
        """Multi-process training: this rank's share of the global batch times the world size, so that DDP's mean
        of the ranks' gradients is the gradient of the global batch's mean loss even when the ranks' slices differ
        in size (a length bucket's last batch). One all-reduce of the local batch size per step."""
        n_local = torch.tensor(float(self.batch_size(batch)), device=self.device)
        n_global = self.trainer.strategy.reduce(n_local.clone(), reduce_op="sum")
        return n_local * self.trainer.world_size / n_global

    def gather_samples(self, values: Tensor) -> Tensor:
        """Per-sample ``values`` (n, ...) of every rank concatenated (ranks may hold different n); itself on one
        process. Evaluation metrics computed from the gathered samples equal the single-process ones."""
        if self.trainer.world_size == 1:
            return values
        n = torch.tensor([len(values)], device=values.device)
        sizes = self.all_gather(n).reshape(-1).tolist()  # (world,)
        padded = torch.zeros((max(sizes), *values.shape[1:]), dtype=values.dtype, device=values.device)
        padded[: len(values)] = values
        every = self.all_gather(padded)  # (world, max n, ...)
        return torch.cat([every[r, :k] for r, k in enumerate(sizes)])

    def on_fit_start(self) -> None:
        """The lean per-batch path (module docstring), unless ``lean_loop`` is off."""
        self._direct = self.lean_loop and lean.install(self.trainer) and lean.direct_step_ok(self.trainer)

    def on_train_epoch_start(self) -> None:
        self._loss_sum, self._loss_n = np.float32(0), 0

    def log_train_loss(self, loss: Tensor, batch_size: int) -> None:
        """``train/loss_step`` at the logging cadence and ``train/loss_epoch`` (batch-size weighted mean) at epoch end.

        The same two series ``self.log(..., on_step=True, on_epoch=True)`` writes, without its per-step cost (about
        a third of a small model's step on CPU): the step value is handed to Lightning only on the steps its logger
        connector writes (``log_every_n_steps``), the epoch mean is accumulated here as Lightning does (float32
        sum of loss x batch size over the summed batch size). The sum is kept as a NumPy float32 scalar: the same
        IEEE float32 products and sums as Lightning's 0-dim tensors (one rounding per operation), at a tenth of a
        tensor operation's dispatch cost, and no device to follow (the loss is read once, as ``check_finite`` did).
        """
        self._loss_sum = self._loss_sum + np.float32(loss.item()) * np.float32(batch_size)
        self._loss_n += batch_size
        if self.trainer._logger_connector.should_update_logs or self.trainer.fast_dev_run:
            self.log("train/loss_step", loss, on_step=True, on_epoch=False, prog_bar=True, batch_size=batch_size)

    def on_train_epoch_end(self) -> None:
        if self._loss_n:
            total = torch.tensor(self._loss_sum, dtype=torch.float32, device=self.device)
            self.log("train/loss_epoch", total / self._loss_n, on_step=False, on_epoch=True)
        scheduler = self.lr_schedulers()
        if scheduler is not None and self.scheduler_interval == "epoch":  # manual optimization steps it here
            scheduler.step()

    def configure_optimizers(self) -> Any:
        params = [p for p in self.parameters() if p.requires_grad]
        opt = self.optimizer_factory(params)
        if self.scheduler_factory is None:
            return opt
        if self.scheduler_interval == "step":
            factory = self.scheduler_factory
            if getattr(factory, "keywords", {}).get("total_steps", 0) is None:  # "the whole run" (schedules.py)
                factory = functools.partial(factory, total_steps=int(self.trainer.estimated_stepping_batches))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": factory(opt), "interval": "step"}}
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
