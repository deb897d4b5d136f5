"""A lean per-batch path through Lightning's fit loop for small models (what ``BaseTask`` trains with).

Lightning's training-epoch loop dispatches every hook of every batch generically: for each hook name it walks all
callbacks (building each one's profiler key, ``ModelCheckpoint``'s a ``repr`` of its settings), looks up which of
module or data module overrides the three batch-transfer hooks, re-reads ``training_step``'s signature, and asks
``trainer.enable_validation`` (an ``is_overridden`` walk) after every batch; the manual optimization's
``manual_backward`` and ``LightningOptimizer.step`` add the same dispatch for ``on_before_backward``,
``on_after_backward`` and ``on_before_optimizer_step``. On the SVA classifier (a ~1.5 ms step) that is a quarter of
the step (``python -m oscrepro.bench.loop``).

:class:`LeanEpochLoop` resolves all of that once per epoch (:class:`Plan`) and then per batch calls only the hooks
something overrides, in Lightning's order, with the same progress counters, logger-connector calls, validation
checks and scheduler updates as ``_TrainingEpochLoop.advance``, so that histories, checkpoints and resumes are those
of the stock loop (tests/unit/tasks/test_lean.py compares the two bit for bit). With a profiler, a
``dataloader_iter`` training step, a restart inside an epoch or several processes the stock code runs instead.
:func:`direct_backward` / :func:`direct_step` are the same bypass for ``BaseTask.training_step``, taken only when no
callback or module hook observes backward and step and the precision plugin does nothing around them.

:class:`ThrottledProgressBar` is Lightning's TQDM bar redrawn at most every :data:`REFRESH_S` seconds instead of
after every batch (two terminal writes and a metrics copy per batch).

Written against Lightning 2.6 (pinned in requirements.lock); it uses the loop's private members, as Lightning's own
loops do, and the tests fail if an upgrade changes what they mean.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.loops.fetchers import _DataLoaderIterDataFetcher
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from lightning.pytorch.profilers import PassThroughProfiler
from lightning.pytorch.strategies import SingleDeviceStrategy
from lightning.pytorch.utilities.model_helpers import is_overridden
from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature
from torch import Tensor

REFRESH_S = 0.5  # progress-bar redraw period (display only; a bar always shows its last batch)
STEP_HOOKS = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")  # direct_backward/step skip
TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


@dataclasses.dataclass
class Plan:
    """What a lean epoch calls per batch, resolved at its start (nothing here changes inside an epoch)."""

    epoch: int
    check_val_epoch: bool  # _TrainingEpochLoop._should_check_val_epoch() of this epoch
    transfer: list[tuple[Callable[..., Any], tuple, str | None]]  # (bound hook, its arguments, name if the module's)
    batch_start: list[L.Callback]  # callbacks overriding on_train_batch_start
    batch_end: list[L.Callback]
    module_batch_start: bool  # the module overrides on_train_batch_start
    module_batch_end: bool
    pass_batch_idx: bool  # training_step takes batch_idx (_TrainingEpochLoop._build_kwargs)


def _overriding(trainer: L.Trainer, hook: str) -> list[L.Callback]:
    return [cb for cb in trainer.callbacks if is_overridden(hook, cb, parent=L.Callback)]


def _swap_fx(module: L.LightningModule, name: str | None) -> str | None:
    """Set ``module._current_fx_name`` (what ``self.log`` checks), returning the previous value. Written to the
    instance dict: ``nn.Module.__setattr__``'s parameter/buffer/module checks cost a microsecond per hook."""
    prev = module.__dict__["_current_fx_name"]
    module.__dict__["_current_fx_name"] = name
    return prev


def eligible(trainer: L.Trainer) -> bool:
    """One process, no profiler: the conditions under which the lean paths equal Lightning's by construction."""
    return isinstance(trainer.profiler, PassThroughProfiler) and type(trainer.strategy) is SingleDeviceStrategy


def direct_step_ok(trainer: L.Trainer) -> bool:
    """Whether :func:`direct_backward` / :func:`direct_step` compute and observe exactly what ``manual_backward``
    and ``LightningOptimizer.step`` would: nothing overrides :data:`STEP_HOOKS` (nor the module's ``backward``),
    and the precision plugin neither scales the loss nor wraps the step (32-bit, or bf16 autocast)."""
    module, plugin = trainer.lightning_module, trainer.precision_plugin
    plain = type(plugin) is Precision or (type(plugin) is MixedPrecision and plugin.scaler is None)
    return (eligible(trainer) and plain and module._fabric is None and not is_overridden("backward", module)
            and not any(is_overridden(h, module) or _overriding(trainer, h) for h in STEP_HOOKS))


def direct_backward(objective: Tensor) -> None:
    """``manual_backward`` when :func:`direct_step_ok`: Lightning's chain ends in ``objective.backward()``."""
    objective.backward()


def direct_step(opt: Any) -> None:
    """``LightningOptimizer.step()`` when :func:`direct_step_ok`: the manual loop's progress bookkeeping around the
    wrapped optimizer's ``step()`` (Lightning passes it a closure that only calls the skipped hooks)."""
    opt._on_before_step()  # optim_step_progress.increment_ready (global_step counts completed steps)
    opt.optimizer.step()
    opt._on_after_step()


class LeanEpochLoop(_TrainingEpochLoop):
    """``_TrainingEpochLoop`` whose ``advance`` runs the once-resolved :class:`Plan` (module docstring)."""

    _plan: Plan | None = None

    def on_run_start(self, data_fetcher: Any) -> None:
        super().on_run_start(data_fetcher)
        trainer = self.trainer
        self._plan = None
        if not eligible(trainer) or isinstance(data_fetcher, _DataLoaderIterDataFetcher):
            return
        module, selector = trainer.lightning_module, trainer._data_connector._datahook_selector
        transfer = []
        for hook, args in zip(TRANSFER_HOOKS, ((0,), (trainer.strategy.root_device, 0), (0,)), strict=True):
            owner = selector.get_instance(hook)
            if hook == "transfer_batch_to_device" or is_overridden(hook, owner):  # the other two default to identity
                transfer.append((getattr(owner, hook), args, hook if owner is module else None))
        self._plan = Plan(
            epoch=trainer.current_epoch, check_val_epoch=super()._should_check_val_epoch(), transfer=transfer,
            batch_start=_overriding(trainer, "on_train_batch_start"),
            batch_end=_overriding(trainer, "on_train_batch_end"),
            module_batch_start=is_overridden("on_train_batch_start", module),
            module_batch_end=is_overridden("on_train_batch_end", module),
            pass_batch_idx=is_param_in_hook_signature(module.training_step, "batch_idx", min_args=2))

    def _should_check_val_epoch(self) -> bool:
        plan = self._plan
        if plan is not None and plan.epoch == self.trainer.current_epoch:
            return plan.check_val_epoch
        return super()._should_check_val_epoch()

    def _hooks(self, callbacks: list[L.Callback], module_hook: bool, name: str, *args: Any) -> Any:
        """Lightning's callback then module dispatch of ``name`` (``_current_fx_name`` set while they run, as
        Lightning sets it for ``self.log``), restricted to the overriding ones."""
        trainer = self.trainer
        module = trainer.lightning_module
        out = None
        if callbacks or module_hook:
            prev = _swap_fx(module, name)
            for cb in callbacks:
                getattr(cb, name)(trainer, module, *args)
            if module_hook:
                out = getattr(module, name)(*args)
            _swap_fx(module, prev)
        return out

    def _transfer(self, batch: Any) -> Any:
        """The batch-transfer hooks that do something (``transfer_batch_to_device`` always), of whichever of module
        and data module Lightning's hook selector picks, with Lightning's arguments (root device, dataloader 0)."""
        for hook, args, module_hook in self._plan.transfer:
            if module_hook is None:
                batch = hook(batch, *args)
            else:
                module = self.trainer.lightning_module
                prev = _swap_fx(module, module_hook)
                batch = hook(batch, *args)
                _swap_fx(module, prev)
        return batch

    def advance(self, data_fetcher: Any) -> None:
        """``_TrainingEpochLoop.advance`` (Lightning 2.6) for one process without a profiler, hooks resolved."""
        plan = self._plan
        if plan is None or self.restarting:  # the stock code (it also handles resuming inside an epoch)
            return super().advance(data_fetcher)
        self.val_loop.restarting = False
        trainer = self.trainer
        batch, _, __ = next(data_fetcher)
        batch_idx = self.batch_idx + 1
        self.batch_progress.is_last_batch = data_fetcher.done
        batch = self._transfer(trainer.precision_plugin.convert_input(batch))
        self.batch_progress.increment_ready()
        trainer._logger_connector.on_batch_start(batch)
        batch_output, skip_rest = None, False
        if batch is None:
            self._warning_cache.warn("train_dataloader yielded None. If this was on purpose, ignore this warning...")
        else:
            response = self._hooks(plan.batch_start, plan.module_batch_start, "on_train_batch_start", batch,
                                   batch_idx)
            trainer.strategy.on_train_batch_start(batch, batch_idx)
            skip_rest = response == -1
            if skip_rest:
                self.batch_progress.increment_by(0, is_last_batch=True)
            else:
                self.batch_progress.increment_started()
                kwargs = OrderedDict(batch=batch)
                if plan.pass_batch_idx:
                    kwargs["batch_idx"] = batch_idx
                if trainer.lightning_module.automatic_optimization:
                    batch_output = self.automatic_optimization.run(trainer.optimizers[0], batch_idx, kwargs)
                else:
                    batch_output = self.manual_optimization.run(kwargs)
        self.batch_progress.increment_processed()
        self.update_lr_schedulers("step", update_plateau_schedulers=False)
        if self._num_ready_batches_reached():
            self.update_lr_schedulers("epoch", update_plateau_schedulers=False)
        if skip_rest:
            raise StopIteration
        self._hooks(plan.batch_end, plan.module_batch_end, "on_train_batch_end", batch_output, batch, batch_idx)
        trainer._logger_connector.on_batch_end()
        self.batch_progress.increment_completed()
        trainer._logger_connector.update_train_step_metrics()


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
