"""The lean training-epoch loop (:mod:`oscrepro.tasks.lean` says why and when): ``_TrainingEpochLoop`` with each
batch run from a :class:`Plan` resolved when the epoch starts.

Per batch it does what ``_TrainingEpochLoop.advance`` / ``on_advance_end`` (Lightning 2.6) do, in their order: the
same progress counters, hooks, logger-connector calls, validation checks and optimizer-progress hooks, but calls
only the hooks something overrides, reads the trainer settings an epoch cannot change from the plan, runs the
manual optimization's ``training_step`` without the strategy-hook dispatch, and skips the logger connector's
per-batch metric refresh when nothing was logged since the last one (it would write the values already there).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import lightning as L
from lightning.fabric.plugins.precision.precision import Precision as FabricPrecision
from lightning.pytorch.loops.fetchers import _DataLoaderIterDataFetcher
from lightning.pytorch.loops.optimization.manual import ManualResult
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
from lightning.pytorch.profilers import PassThroughProfiler
from lightning.pytorch.strategies import SingleDeviceStrategy, Strategy
from lightning.pytorch.trainer import call
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.model_helpers import is_overridden
from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature

TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


@dataclasses.dataclass
class Plan:
    """What a lean epoch calls per batch and the trainer settings it reads, resolved when the epoch starts (none of
    them changes inside an epoch: Lightning sets them up before an epoch's loop runs)."""

    module: L.LightningModule
    check_val_epoch: bool  # _TrainingEpochLoop._should_check_val_epoch() of this epoch
    num_batches: int | float  # trainer.num_training_batches
    accumulate: int  # trainer.accumulate_grad_batches (Lightning's; the task's own is BaseTask.configure_loop's)
    strategy_accumulates: bool  # strategy.handles_gradient_accumulation
    convert_input: Callable[[Any], Any] | None  # the precision plugin's, when it is not the identity
    transfer: list[tuple[Callable[..., Any], tuple, str | None]]  # (bound hook, its arguments, name if the module's)
    batch_start: list[L.Callback]  # callbacks overriding on_train_batch_start
    batch_end: list[L.Callback]
    module_batch_start: bool  # the module overrides on_train_batch_start
    module_batch_end: bool
    strategy_batch_start: bool  # the strategy overrides on_train_batch_start
    pass_batch_idx: bool  # training_step takes batch_idx (_TrainingEpochLoop._build_kwargs)
    metrics_seen: list[Any] | None = None  # _metrics_state after the last logger-connector refresh


def eligible(trainer: L.Trainer) -> bool:
    """One process, no profiler: the conditions under which the lean paths equal Lightning's by construction."""
    return isinstance(trainer.profiler, PassThroughProfiler) and type(trainer.strategy) is SingleDeviceStrategy


def overriding(trainer: L.Trainer, hook: str) -> list[L.Callback]:
    """The trainer's callbacks whose class overrides ``hook`` (Lightning calls every callback's; the rest no-op)."""
    return [cb for cb in trainer.callbacks if is_overridden(hook, cb, parent=L.Callback)]


def _swap_fx(module: L.LightningModule, name: str | None) -> str | None:
    """Set ``module._current_fx_name`` (what ``self.log`` checks), returning the previous value. Written to the
    instance dict: ``nn.Module.__setattr__``'s parameter/buffer/module checks cost a microsecond per hook."""
    prev = module.__dict__["_current_fx_name"]
    module.__dict__["_current_fx_name"] = name
    return prev


def _metrics_state(loop: _TrainingEpochLoop) -> list[Any]:
    """What the logger connector's per-batch refresh (``on_batch_end``) reads, as objects compared by identity: the
    training results, each logged entry's step value (a fresh clone per ``self.log``) and reset flag, and the three
    metric dicts it updates. Unchanged identities mean a refresh would write the values the dicts hold already."""
    lc = loop.trainer._logger_connector
    state: list[Any] = [loop._results, lc._callback_metrics, lc._logged_metrics, lc._progress_bar_metrics]
    for key, entry in loop._results.items():
        state += [key, entry, entry._forward_cache, entry.has_reset]
    return state


def _same(a: list[Any] | None, b: list[Any]) -> bool:
    return a is not None and len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


class LeanEpochLoop(_TrainingEpochLoop):
    """``_TrainingEpochLoop`` that runs each batch from the :class:`Plan` resolved at the epoch's start (module
    docstring); outside an epoch's run, or where no plan applies, Lightning's own methods run."""

    _plan: Plan | None = None

    def run(self, data_fetcher: Any) -> None:
        try:
            super().run(data_fetcher)
        finally:
            self._plan = None  # a plan holds for the epoch it was made in

    def on_run_start(self, data_fetcher: Any) -> None:
        super().on_run_start(data_fetcher)
        trainer = self.trainer
        self._plan = None
        if not eligible(trainer) or isinstance(data_fetcher, _DataLoaderIterDataFetcher):
            return
        module, strategy = trainer.lightning_module, trainer.strategy
        selector = trainer._data_connector._datahook_selector
        transfer = []
        for hook, args in zip(TRANSFER_HOOKS, ((0,), (strategy.root_device, 0), (0,)), strict=True):
            owner = selector.get_instance(hook)
            if hook == "transfer_batch_to_device" or is_overridden(hook, owner):  # the other two default to identity
                transfer.append((getattr(owner, hook), args, hook if owner is module else None))
        plugin = trainer.precision_plugin
        self._plan = Plan(
            module=module,
            check_val_epoch=super()._should_check_val_epoch(),
            num_batches=trainer.num_training_batches,
            accumulate=trainer.accumulate_grad_batches,
            strategy_accumulates=strategy.handles_gradient_accumulation,
            convert_input=None if type(plugin).convert_input is FabricPrecision.convert_input else plugin.convert_input,
            transfer=transfer,
            batch_start=overriding(trainer, "on_train_batch_start"),
            batch_end=overriding(trainer, "on_train_batch_end"),
            module_batch_start=is_overridden("on_train_batch_start", module),
            module_batch_end=is_overridden("on_train_batch_end", module),
            strategy_batch_start=type(strategy).on_train_batch_start is not Strategy.on_train_batch_start,
            pass_batch_idx=is_param_in_hook_signature(module.training_step, "batch_idx", min_args=2),
        )

    # the three checks Lightning's loop, logger connector and fit loop make several times per batch, from the plan
    def _should_check_val_epoch(self) -> bool:
        return super()._should_check_val_epoch() if self._plan is None else self._plan.check_val_epoch

    def _num_ready_batches_reached(self) -> bool:
        plan = self._plan
        if plan is None:
            return super()._num_ready_batches_reached()
        return self.batch_progress.current.ready == plan.num_batches or self.batch_progress.is_last_batch

    def _should_accumulate(self) -> bool:
        plan = self._plan
        if plan is None:
            return super()._should_accumulate()
        accumulation_done = self.batch_progress.current.ready % plan.accumulate == 0
        return not accumulation_done and (plan.strategy_accumulates or not self._num_ready_batches_reached())

    def _hooks(self, callbacks: list[L.Callback], module_hook: bool, name: str, *args: Any) -> Any:
        """Lightning's callback then module dispatch of ``name`` (``_current_fx_name`` set while they run, as
        Lightning sets it for ``self.log``), restricted to the overriding ones."""
        module = self._plan.module
        out = None
        if callbacks or module_hook:
            prev = _swap_fx(module, name)
            for cb in callbacks:
                getattr(cb, name)(self.trainer, module, *args)
            if module_hook:
                out = getattr(module, name)(*args)
            _swap_fx(module, prev)
        return out

    def _transfer(self, batch: Any) -> Any:
        """The precision plugin's input conversion and the batch-transfer hooks that do something
        (``transfer_batch_to_device`` always), of whichever of module and data module Lightning's hook selector
        picks, with Lightning's arguments (root device, dataloader 0)."""
        plan = self._plan
        if plan.convert_input is not None:
            batch = plan.convert_input(batch)
        for hook, args, module_hook in plan.transfer:
            if module_hook is None:
                batch = hook(batch, *args)
            else:
                prev = _swap_fx(plan.module, module_hook)
                batch = hook(batch, *args)
                _swap_fx(plan.module, prev)
        return batch

    def _manual_run(self, kwargs: OrderedDict) -> dict[str, Any]:
        """``_ManualOptimization.run(kwargs)`` with the strategy's ``training_step`` hook called directly (no
        profiler, one device, the module unwrapped): the optimizers' progress hooks set around the step, the step
        under the precision plugin's context (bf16 autocast), its output detached."""
        manual, trainer, module = self.manual_optimization, self.trainer, self._plan.module
        manual.on_run_start()
        with suppress(StopIteration):  # as _ManualOptimization.run
            prev = _swap_fx(module, "training_step")
            with trainer.precision_plugin.train_step_context():
                output = module.training_step(*kwargs.values())
            _swap_fx(module, prev)
            del kwargs
            trainer.strategy.post_training_step()
            manual._output = ManualResult.from_training_step_output(output).asdict()
        manual._restarting = False
        return manual.on_run_end()

    def advance(self, data_fetcher: Any) -> None:
        """``_TrainingEpochLoop.advance`` (Lightning 2.6) for one process without a profiler, hooks resolved."""
        plan = self._plan
        if plan is None or self.restarting:  # the stock code (it also handles resuming inside an epoch)
            return super().advance(data_fetcher)
        self.val_loop.restarting = False
        trainer, module, progress = self.trainer, plan.module, self.batch_progress
        batch, _, __ = next(data_fetcher)
        batch_idx = progress.current.ready  # self.batch_idx + 1
        progress.is_last_batch = data_fetcher.done
        batch = self._transfer(batch)
        progress.increment_ready()
        _logger_connector_batch_start(trainer._logger_connector, self._results, batch)
        batch_output, skip_rest = None, False
        if batch is None:
            self._warning_cache.warn("train_dataloader yielded None. If this was on purpose, ignore this warning...")
        else:
            response = self._hooks(plan.batch_start, plan.module_batch_start, "on_train_batch_start", batch, batch_idx)
            if plan.strategy_batch_start:
                trainer.strategy.on_train_batch_start(batch, batch_idx)
            skip_rest = response == -1
            if skip_rest:
                progress.increment_by(0, is_last_batch=True)
            else:
                progress.increment_started()
                kwargs = OrderedDict(batch=batch)
                if plan.pass_batch_idx:
                    kwargs["batch_idx"] = batch_idx
                if module.automatic_optimization:
                    batch_output = self.automatic_optimization.run(trainer.optimizers[0], batch_idx, kwargs)
                elif trainer.strategy.model is module:
                    batch_output = self._manual_run(kwargs)
                else:  # a wrapped model (forward redirection): Lightning's own call
                    batch_output = self.manual_optimization.run(kwargs)
        progress.increment_processed()
        if module.automatic_optimization:  # Lightning steps no scheduler of a manually optimized module
            self.update_lr_schedulers("step", update_plateau_schedulers=False)
            if self._num_ready_batches_reached():
                self.update_lr_schedulers("epoch", update_plateau_schedulers=False)
        if skip_rest:
            raise StopIteration
        self._hooks(plan.batch_end, plan.module_batch_end, "on_train_batch_end", batch_output, batch, batch_idx)
        if _same(plan.metrics_seen, _metrics_state(self)):  # nothing logged since the last refresh: skip it
            self._results.batch, self._results.batch_size = None, None  # what it does besides
        else:
            trainer._logger_connector.on_batch_end()
            plan.metrics_seen = _metrics_state(self)
        progress.increment_completed()
        trainer._logger_connector.update_train_step_metrics()

    def on_advance_end(self, data_fetcher: Any) -> None:
        """``_TrainingEpochLoop.on_advance_end`` without the plateau-scheduler update of a manually optimized
        module (Lightning's returns at once for one)."""
        plan = self._plan
        if plan is None or plan.module.automatic_optimization:
            return super().on_advance_end(data_fetcher)
        should_check_val = self._should_check_val_fx(data_fetcher)
        if self._skip_next_val:
            should_check_val = self._skip_next_val = False
        trainer = self.trainer
        if should_check_val:
            trainer.validating = True
            first_loop_iter = trainer._logger_connector._first_loop_iter
            if not self._should_accumulate():
                call._call_lightning_module_hook(trainer, "on_validation_model_zero_grad")
            self.val_loop.run()
            trainer.training = True
            trainer._logger_connector._first_loop_iter = first_loop_iter
        if not self._should_accumulate():
            self._batches_that_stepped += 1
        self._save_loggers_on_train_batch_end()
        if not self._is_training_done and trainer.received_sigterm:
            raise SIGTERMException


def _logger_connector_batch_start(connector: Any, results: Any, batch: Any) -> None:
    """``_LoggerConnector.on_batch_start(batch)`` in training (the active results are the epoch loop's)."""
    if connector._first_loop_iter is None:
        connector._first_loop_iter = True
    elif connector._first_loop_iter is True:
        connector._first_loop_iter = False
    results.batch, results.batch_size, results.dataloader_idx = batch, None, None
