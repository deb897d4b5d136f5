"""A lean per-batch path through Lightning's fit loop for small models (what ``BaseTask`` trains with).

Lightning's training-epoch loop dispatches every hook of every batch generically: for each hook name it walks all
callbacks (building each one's profiler key, ``ModelCheckpoint``'s a ``repr`` of its settings), looks up which of
module or data module overrides the three batch-transfer hooks, re-reads ``training_step``'s signature, and asks
``trainer.enable_validation`` (an ``is_overridden`` walk) after every batch; the manual optimization's
``manual_backward`` and ``LightningOptimizer.step`` add the same dispatch for ``on_before_backward``,
``on_after_backward`` and ``on_before_optimizer_step``. On the SVA classifier, whose bare step (forward, backward,
AdamW) is 1-3 ms of mostly Python and dispatch, that machinery was the largest part of the loop's overhead
(results/bench/loop_overhead.md: the stock loop beside the lean one, same process).

:class:`~oscrepro.tasks.lean_loop.LeanEpochLoop` resolves all of that once per epoch and then per batch calls only
the hooks something overrides, in Lightning's order, with the same progress counters, logger-connector calls,
validation checks and scheduler updates as ``_TrainingEpochLoop``, so that histories, checkpoints and resumes are
those of the stock loop (tests/unit/tasks/test_lean.py compares the two bit for bit). With a profiler, a
``dataloader_iter`` training step, a restart inside an epoch or several processes the stock code runs instead.
:func:`direct_backward` / :func:`direct_step` are the same bypass for ``BaseTask.training_step``, taken only when no
callback or module hook observes backward and step and the precision plugin does nothing around them.

:class:`ThrottledProgressBar` is Lightning's TQDM bar redrawn at most every :data:`REFRESH_S` seconds instead of
after every batch (two terminal writes and a metrics copy per batch).

Written against Lightning 2.6 (pinned in requirements.lock); it uses the loop's private members, as Lightning's own
loops do, and the tests fail if an upgrade changes what they mean.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor

from oscrepro.tasks.lean_loop import LeanEpochLoop, eligible, overriding

REFRESH_S = 0.5  # progress-bar redraw period (display only; a bar always shows its last batch)
STEP_HOOKS = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")  # direct_backward/step skip


def direct_step_ok(trainer: L.Trainer) -> bool:
    """Whether :func:`direct_backward` / :func:`direct_step` compute and observe exactly what ``manual_backward``
    and ``LightningOptimizer.step`` would: nothing overrides :data:`STEP_HOOKS` (nor the module's ``backward``),
    and the precision plugin neither scales the loss nor wraps the step (32-bit, or bf16 autocast)."""
    module, plugin = trainer.lightning_module, trainer.precision_plugin
    plain = type(plugin) is Precision or (type(plugin) is MixedPrecision and plugin.scaler is None)
    return (
        eligible(trainer)
        and plain
        and module._fabric is None
        and not is_overridden("backward", module)
        and not any(is_overridden(h, module) or overriding(trainer, h) for h in STEP_HOOKS)
    )


def direct_backward(objective: Tensor) -> None:
    """``manual_backward`` when :func:`direct_step_ok`: Lightning's chain ends in ``objective.backward()``."""
    objective.backward()


def direct_step(opt: Any) -> None:
    """``LightningOptimizer.step()`` when :func:`direct_step_ok`: the manual loop's progress bookkeeping around the
    wrapped optimizer's ``step()`` (Lightning passes it a closure that only calls the skipped hooks)."""
    opt._on_before_step()  # optim_step_progress.increment_ready (global_step counts completed steps)
    opt.optimizer.step()
    opt._on_after_step()


def install(trainer: L.Trainer) -> bool:
    """Make ``trainer``'s training-epoch loop a :class:`LeanEpochLoop` and its default progress bar a
    :class:`ThrottledProgressBar`: the same objects, their state kept (this runs at ``on_fit_start``, before a
    checkpoint's loop state is restored; the subclasses add no state, and a progress bar has none in checkpoints).
    Returns whether the loop is lean (False: a loop that is not Lightning's own, left as it is)."""
    loop, bar = trainer.fit_loop.epoch_loop, trainer.progress_bar_callback
    if type(loop) is _TrainingEpochLoop:
        loop.__class__ = LeanEpochLoop
    if type(bar) is TQDMProgressBar:
        bar.__class__ = ThrottledProgressBar
    return isinstance(loop, LeanEpochLoop)


class ThrottledProgressBar(TQDMProgressBar):
    """Lightning's TQDM progress bar, redrawn at most every :data:`REFRESH_S` seconds (and at each bar's end)."""

    _last = 0.0

    def _should_update(self, current: int, total: int) -> bool:
        if not self.is_enabled:
            return False
        now = time.monotonic()
        if current == total or now - self._last >= REFRESH_S:
            self._last = now
            return True
        return False
