"""The lean per-batch path (oscrepro.tasks.lean) trains the runs the stock Lightning loop trains, bit for bit.

Three references: the fingerprints the loop wrote before the lean path existed (tests/fixtures/loop_fingerprint.json,
commit 1624233; compared where torch and the CPU kernels are those it was written with), the stock loop in this
process (``BaseTask.lean_loop = False``; portable), and the hooks a callback sees, call by call. Each run also
counts the lean path's own calls, so that a silent fall-back to the stock code fails here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import pytest

from oscrepro.tasks import lean
from oscrepro.tasks.base import BaseTask
from oscrepro.train import build, make_trainer
from tests.helpers.run_fingerprint import CASES, machine, run_case

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "loop_fingerprint.json"


@pytest.fixture
def lean_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of the lean epoch loop's batches and of direct optimizer steps."""
    calls = {"lean batches": 0, "direct steps": 0}
    transfer, step = lean.LeanEpochLoop._transfer, lean.direct_step

    def counted_transfer(self: lean.LeanEpochLoop, batch: Any) -> Any:
        calls["lean batches"] += 1
        return transfer(self, batch)

    def counted_step(opt: Any) -> None:
        calls["direct steps"] += 1
        step(opt)

    monkeypatch.setattr(lean.LeanEpochLoop, "_transfer", counted_transfer)
    monkeypatch.setattr(lean, "direct_step", counted_step)
    return calls


@pytest.mark.parametrize("case", sorted(CASES))
def test_lean_runs_match_the_fingerprint_written_by_the_stock_loop(case, lean_calls, tmp_path):
    reference = json.loads(FIXTURE.read_text())
    if reference["machine"] != machine():
        pytest.skip(f"fingerprint written with {reference['machine']}, this is {machine()} (bits differ by kernel)")
    got, _ = run_case(case, tmp_path)
    assert got == reference["runs"][case]
    assert lean_calls["lean batches"] > 0 and lean_calls["direct steps"] == got["global_step"]


@pytest.mark.parametrize("case", ["sva_clip_accumulate_step_schedule", "xor"])
def test_lean_run_equals_the_stock_run(case, lean_calls, tmp_path, monkeypatch):
    lean_run, _ = run_case(case, tmp_path / "lean")
    assert lean_calls["direct steps"] == lean_run["global_step"] > 0
    monkeypatch.setattr(BaseTask, "lean_loop", False)
    seen = dict(lean_calls)
    stock_run, _ = run_case(case, tmp_path / "stock")
    assert lean_calls == seen  # the stock run did not touch the lean path
    assert lean_run == stock_run


class Recorder(L.Callback):
    """What a callback sees per batch: hook, batch index, global step, the module's current hook name."""

    def __init__(self, step_hooks: bool) -> None:
        self.seen: list[tuple[Any, ...]] = []
        if step_hooks:  # overriding these turns the direct backward/step off (lean.direct_step_ok)
            for hook in lean.STEP_HOOKS:
                setattr(self, hook, self._recorder(hook))

    def _recorder(self, hook: str) -> Any:
        def record(trainer: L.Trainer, module: L.LightningModule, *args: Any) -> None:
            self.seen.append((hook, trainer.global_step, module._current_fx_name))

        return record

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        lc = trainer._logger_connector  # the metric dicts as the previous batch's end left them (not recomputed)
        stored = [
            {k: float(v) for k, v in d.items()}
            for d in (lc._callback_metrics, lc._logged_metrics, lc._progress_bar_metrics)
        ]
        self.seen.append(
            ("batch_start", batch_idx, trainer.global_step, module._current_fx_name, len(batch[0]), stored)
        )

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.seen.append(
            (
                "batch_end",
                batch_idx,
                trainer.global_step,
                module._current_fx_name,
                float(outputs["loss"]),
                trainer.is_last_batch,
            )
        )


def _recorded(compose, tmp_path: Path, lean_loop: bool, step_hooks: bool) -> tuple[list[tuple[Any, ...]], bool]:
    cfg = compose(
        [
            "experiment=fqo/sva",
            "attention=softmax",
            "budget=smoke",
            "trainer.limit_train_batches=5",
            "trainer.limit_val_batches=1",
            "trainer.max_epochs=2",
            "trainer.log_every_n_steps=2",
            f"paths.results_dir={tmp_path}",
        ]
    )
    dm, _, task = build(cfg)
    task.lean_loop = lean_loop
    recorder = Recorder(step_hooks)
    trainer = make_trainer(
        cfg,
        task,
        logger=False,
        enable_checkpointing=False,
        callbacks=[recorder],
        default_root_dir=str(tmp_path),
        accumulate_grad_batches=2,
    )
    trainer.fit(task, datamodule=dm)
    return recorder.seen, isinstance(trainer.fit_loop.epoch_loop, lean.LeanEpochLoop) and task._direct


@pytest.mark.parametrize("step_hooks", [False, True], ids=["batch hooks", "batch and step hooks"])
def test_callbacks_see_the_stock_loop_call_for_call(step_hooks, compose, tmp_path):
    stock, stock_lean = _recorded(compose, tmp_path / "stock", lean_loop=False, step_hooks=step_hooks)
    got, direct = _recorded(compose, tmp_path / "lean", lean_loop=True, step_hooks=step_hooks)
    assert not stock_lean and direct is not step_hooks  # observed backward/step hooks keep Lightning's calls
    assert len(got) == len(stock) > 10 and got == stock


def _weights_after_fit(compose, tmp_path: Path, **trainer_kwargs: Any) -> tuple[list[Any], L.Trainer]:
    cfg = compose(["experiment=fqo/sva", "attention=softmax", "budget=smoke", f"paths.results_dir={tmp_path}"])
    dm, _, task = build(cfg)
    trainer = make_trainer(
        cfg, task, logger=False, enable_checkpointing=False, default_root_dir=str(tmp_path), **trainer_kwargs
    )
    trainer.fit(task, datamodule=dm)
    return [p.detach().clone() for p in task.parameters()], trainer


def test_progress_bar_run_is_throttled_and_trains_the_same(compose, tmp_path, lean_calls):
    import torch

    plain, _ = _weights_after_fit(compose, tmp_path / "plain", enable_progress_bar=False)
    with_bar, trainer = _weights_after_fit(compose, tmp_path / "bar", enable_progress_bar=True)
    assert type(trainer.progress_bar_callback) is lean.ThrottledProgressBar
    assert all(torch.equal(a, b) for a, b in zip(plain, with_bar, strict=True))


def test_a_profiled_run_takes_lightnings_own_path(compose, tmp_path, lean_calls):
    import torch

    lean_run, _ = _weights_after_fit(compose, tmp_path / "lean", enable_progress_bar=False)
    seen = dict(lean_calls)
    assert seen["lean batches"] > 0 and seen["direct steps"] > 0
    profiled, trainer = _weights_after_fit(compose, tmp_path / "profiled", enable_progress_bar=False, profiler="simple")
    assert isinstance(trainer.fit_loop.epoch_loop, lean.LeanEpochLoop) and lean_calls == seen  # no lean batch
    assert all(torch.equal(a, b) for a, b in zip(lean_run, profiled, strict=True))


def test_throttled_progress_bar_redraws_at_its_period_and_at_the_end(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(lean.time, "monotonic", lambda: now[0])
    bar = lean.ThrottledProgressBar()
    assert bar._should_update(1, 50)  # first batch: drawn
    now[0] += lean.REFRESH_S / 2
    assert not bar._should_update(2, 50)
    assert bar._should_update(50, 50)  # the last batch always
    now[0] += lean.REFRESH_S
    assert bar._should_update(3, 50)
    bar.disable()
    now[0] += lean.REFRESH_S
    assert not bar._should_update(50, 50)


def test_epoch_loss_sum_is_the_float32_tensor_sum_bit_for_bit():
    """BaseTask.log_train_loss sums in NumPy float32 what Lightning summed in 0-dim float32 tensors."""
    import numpy as np
    import torch

    gen = torch.Generator().manual_seed(0)
    losses = torch.rand(2000, generator=gen) * 3 + torch.rand(2000, generator=gen) * 1e-3  # (N,) float32
    sizes = torch.randint(1, 65, (2000,), generator=gen).tolist()
    reference, total = torch.zeros(()), np.float32(0)
    for loss, n in zip(losses, sizes, strict=True):
        reference = reference + loss.float() * n
        total = total + np.float32(loss.item()) * np.float32(n)
    assert torch.tensor(total, dtype=torch.float32).view(torch.int32) == reference.view(torch.int32)
    assert float(reference) != float(losses.double() @ torch.tensor(sizes, dtype=torch.float64))  # rounding matters
