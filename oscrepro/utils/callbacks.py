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

WALL_COLUMN = "time/wall_s"


class EpochWallClock(L.Callback):
    """Log cumulative fit wall-clock (s) at each validation epoch end as ``time/wall_s``."""

    def __init__(self, offset_s: float = 0.0) -> None:
        self._t0: float | None = None
        self.offset_s = offset_s

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._t0 = time.perf_counter()

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._t0 is None or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        pl_module.log(WALL_COLUMN, self.offset_s + time.perf_counter() - self._t0, on_step=False, on_epoch=True)
