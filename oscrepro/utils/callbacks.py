"""Lightning callbacks every run gets (train.py): per-epoch wall-clock in the run's history.

Wall-clock comparisons (fsn Table 2, §4.6: time for the FSN to reach the transformer's final validation loss)
need the time at which each validation value was reached. ``EpochWallClock`` logs ``time/wall_s``, the
seconds since ``fit`` started, at the end of every validation epoch, so it lands in history.csv on the same
row as ``val/*``. A resumed run continues the clock: ``offset_s`` is the wall-clock the run had reached at its
checkpoint (train.py reads it from the history kept from before the interruption).
"""

from __future__ import annotations

import time

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from oscrepro.utils.signals import signals_held

EPOCH_TIME = "time/train_epoch_s"
WALL_COLUMN = "time/wall_s"


class EpochWallClock(L.Callback):
    """Log cumulative fit wall-clock (s) at each validation epoch end as ``time/wall_s``, and the training time of
    each epoch (its batches, without validation) as ``time/train_epoch_s`` (osciformer's "epoch time" columns)."""

    def __init__(self, offset_s: float = 0.0) -> None:
        self._t0: float | None = None
        self._epoch_t0: float | None = None
        self._val_t0, self._val_s = 0.0, 0.0
        self.offset_s = offset_s

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._t0 = time.perf_counter()

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_t0, self._val_s = time.perf_counter(), 0.0

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._val_t0 = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._epoch_t0 is not None:  # Lightning validates inside the training epoch: not training time
            self._val_s += time.perf_counter() - self._val_t0

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._epoch_t0 is not None:  # None after a mid-epoch resume: that epoch's time is not known
            train_s = time.perf_counter() - self._epoch_t0 - self._val_s
            pl_module.log(EPOCH_TIME, train_s, on_step=False, on_epoch=True)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._t0 is None or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        pl_module.log(WALL_COLUMN, self.offset_s + time.perf_counter() - self._t0, on_step=False, on_epoch=True)


class EpochCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that saves at epoch ends only: without ``every_n_train_steps`` or
    ``train_time_interval`` its per-batch hook decides nothing, so it is skipped (about 2 % of a small model's
    step in the loop). Its saves run with the job's signals held (:func:`~oscrepro.utils.signals.signals_held`):
    a requeue or preemption signal lands after ``last.ckpt`` links to the new checkpoint, never while it links
    to the one just deleted."""

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        with signals_held():
            super().on_train_epoch_end(trainer, pl_module)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        with signals_held():
            super().on_validation_end(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        with signals_held():
            super().on_train_end(trainer, pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args, **kwargs) -> None:
        if self._every_n_train_steps or self._train_time_interval is not None:
            super().on_train_batch_end(trainer, pl_module, *args, **kwargs)
