"""A smoke run writes a complete run record; finished runs are skipped; divergence is recorded; determinism."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from oscrepro.runs.record import run_dir as run_dir_for
from oscrepro.train import train

SMOKE = ["experiment=fqo/sva", "budget=smoke", "trainer.enable_progress_bar=false"]


def _record(cfg) -> Path:
    return run_dir_for(cfg)


def test_smoke_run_writes_complete_run_record(compose, results_dir):
    cfg = compose(SMOKE + [f"paths.results_dir={results_dir}"])
    result = train(cfg)
    assert result["status"] == "ok"
    rd = _record(cfg)
    assert rd.parent == results_dir / "runs" / "fqo" / "sva"
    for name in ("config.yaml", "metrics.json", "status.json", "history.csv"):
        assert (rd / name).exists(), name
    status = json.loads((rd / "status.json").read_text())
    assert status["status"] == "ok" and status["run_id"] == rd.name and status["data_fingerprint"]
    metrics = json.loads((rd / "metrics.json").read_text())
    for key in ("test/acc", "test/acc_hard", "val/acc", "test/attn_vs_correct", "n_params"):
        assert key in metrics
    with open(rd / "history.csv") as fh:  # per-epoch wall-clock sits on the validation rows (fsn Table 2)
        rows = [r for r in csv.DictReader(fh) if r.get("val/acc")]
    walls = [float(r["time/wall_s"]) for r in rows]
    assert len(walls) == metrics["epochs"] >= 1  # one value per validation epoch, none from the test pass
    assert all(w > 0 for w in walls) and walls == sorted(walls)


def test_an_attempt_stopped_before_its_first_checkpoint_restarts_quietly(compose, results_dir, caplog):
    """A run killed before its first checkpoint left logs/ behind: the retry says it starts again, replaces the
    partial history (Lightning's "Experiment logs directory ... will be deleted" warning does not show) and equals
    a fresh run."""
    import warnings

    cfg = compose(SMOKE + [f"paths.results_dir={results_dir}"])
    fresh = train(compose(SMOKE + [f"paths.results_dir={results_dir / 'fresh'}"]))
    logs = _record(cfg) / "logs"
    logs.mkdir(parents=True)
    (logs / "metrics.csv").write_text("epoch,step,train/loss\n0,1,9.9\n")  # the stopped attempt's history
    with warnings.catch_warnings(record=True) as caught, caplog.at_level("INFO", logger="oscrepro.train"):
        warnings.simplefilter("always")
        result = train(cfg)
    assert result["status"] == "ok" and result["test/acc"] == fresh["test/acc"]
    assert not [w for w in caught if "Experiment logs directory" in str(w.message)]
    assert "an earlier attempt left no checkpoint" in caplog.text
    assert "9.9" not in (logs / "metrics.csv").read_text()


def test_finished_run_is_not_redone(compose, results_dir):
    cfg = compose(SMOKE + [f"paths.results_dir={results_dir}"])
    first = train(cfg)
    mtime = (_record(cfg) / "metrics.json").stat().st_mtime_ns
    second = train(cfg)
    assert second["test/acc"] == first["test/acc"]
    assert (_record(cfg) / "metrics.json").stat().st_mtime_ns == mtime


def test_a_run_held_by_another_process_is_waited_for_not_retrained(compose, results_dir):
    """Two table builds sharing a cell: the second waits on the first's lock and reads its record."""
    cfg = compose(SMOKE + [f"paths.results_dir={results_dir}"])
    rd = _record(cfg)
    rd.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, json, pathlib, time
        d = pathlib.Path({str(rd)!r})
        with open(d / "lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            (d / "held").touch()
            time.sleep(1.5)
            (d / "metrics.json").write_text(json.dumps({{"test/acc": 0.123}}))
            (d / "status.json").write_text(json.dumps({{"status": "ok"}}))
        """)])
    try:
        deadline = time.time() + 30
        while not (rd / "held").exists() and time.time() < deadline:
            time.sleep(0.05)
        result = train(cfg)  # blocks until the holder releases, then finds the run finished
    finally:
        holder.wait(timeout=60)
    assert result == {"test/acc": 0.123, "status": "ok"}
    assert not (rd / "history.csv").exists()  # nothing was trained here


def test_run_id_ignores_logging_and_paths_but_not_hyperparameters(compose, results_dir):
    base = compose(SMOKE)
    assert run_dir_for(compose(SMOKE + ["logger=wandb"])).name == run_dir_for(base).name
    assert run_dir_for(compose(SMOKE + ["paths.results_dir=/elsewhere"])).name == run_dir_for(base).name
    assert run_dir_for(compose(SMOKE + ["seed=1"])).name != run_dir_for(base).name
    assert run_dir_for(compose(SMOKE + ["model.d_ff=16"])).name != run_dir_for(base).name


def test_forced_divergence_is_recorded(compose, results_dir):
    cfg = compose(SMOKE + [f"paths.results_dir={results_dir}", "debug=diverge"])
    result = train(cfg)
    assert result["status"] == "diverged"
    status = json.loads((_record(cfg) / "status.json").read_text())
    assert status["status"] == "diverged" and "non-finite" in status["reason"]
    assert json.loads((_record(cfg) / "metrics.json").read_text())["diverged_epoch"] == 0
    assert train(cfg)["status"] == "diverged"  # recorded outcome, not retried


def test_same_seed_gives_identical_metrics(compose, tmp_path):
    a = train(compose(SMOKE + [f"paths.results_dir={tmp_path / 'a'}"]))
    b = train(compose(SMOKE + [f"paths.results_dir={tmp_path / 'b'}"]))
    keys = [k for k in a if k.startswith(("test/", "val/"))]
    assert keys and all(a[k] == b[k] for k in keys)


def test_seed_zero_is_a_seed(compose, tmp_path):
    """seed=0 must seed (STYLE rule 9): two seed-0 runs agree, and differ from seed 1."""
    r0 = train(compose(SMOKE + ["seed=0", f"paths.results_dir={tmp_path / 'a'}"]))
    r1 = train(compose(SMOKE + ["seed=1", f"paths.results_dir={tmp_path / 'b'}"]))
    assert r0["val/loss"] != r1["val/loss"]


def test_interrupted_run_resumes_and_keeps_its_history(compose, results_dir, monkeypatch):
    """A run that fails after epoch 0 resumes from last.ckpt; history.csv holds every epoch once, and the
    wall-clock column continues from the checkpoint instead of restarting (Lightning's CSV logger would have
    deleted the rows logged before the interruption)."""
    import oscrepro.train as train_mod
    from oscrepro.utils.callbacks import EpochWallClock

    class CrashAtEpoch1(EpochWallClock):
        def on_train_epoch_start(self, trainer, pl_module):
            if trainer.current_epoch == 1:
                raise RuntimeError("simulated preemption")

    cfg = compose(SMOKE + [f"paths.results_dir={results_dir}", "trainer.max_epochs=3"])
    monkeypatch.setattr(train_mod, "EpochWallClock", CrashAtEpoch1)
    assert train(cfg)["status"] == "failed"
    rd = _record(cfg)
    assert (rd / "checkpoints" / "last.ckpt").exists()
    monkeypatch.setattr(train_mod, "EpochWallClock", EpochWallClock)
    result = train(cfg)
    assert result["status"] == "ok" and result["epochs"] == 3
    with open(rd / "history.csv") as fh:
        rows = list(csv.DictReader(fh))
    val = [r for r in rows if r.get("val/acc")]
    assert [int(r["epoch"]) for r in val] == [0, 1, 2]
    walls = [float(r["time/wall_s"]) for r in val]
    assert walls == sorted(walls) and walls[0] > 0
    train_epochs = [int(r["epoch"]) for r in rows if r.get("train/loss_epoch")]
    assert train_epochs == [0, 1, 2], "rows logged before the interruption were lost or repeated"
    with open(rd / "logs" / "metrics.csv") as fh:  # the second attempt resumed at epoch 1, it did not restart
        assert {int(r["epoch"]) for r in csv.DictReader(fh) if r.get("train/loss_epoch")} == {1, 2}


def test_run_interrupted_mid_epoch_restarts_and_equals_an_uninterrupted_run(compose, results_dir, tmp_path,
                                                                             monkeypatch):
    """A step-based run validated mid-epoch (steps 2, 4) over 3-batch epochs, killed at step 3: checkpoints are
    written at epoch ends only, never at the mid-epoch validation; Lightning would restore this run's loop one batch
    off (train.resumes_exactly), so it trains again from the start and equals the uninterrupted run exactly."""
    import oscrepro.train as train_mod
    from oscrepro.utils.callbacks import EpochWallClock

    class CrashAfterCheckpoint(EpochWallClock):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step == 3 and not (Path(trainer.default_root_dir) / "resumed").exists():
                raise RuntimeError("simulated preemption")

    cfg = compose(SMOKE + [f"paths.results_dir={results_dir}", "trainer.max_epochs=-1", "++trainer.max_steps=5",
                           "++trainer.val_check_interval=2", "++trainer.check_val_every_n_epoch=null",
                           "data.n_train=256", "data.batch_size=16"])
    monkeypatch.setattr(train_mod, "EpochWallClock", CrashAfterCheckpoint)
    assert train(cfg)["status"] == "failed"
    rd = _record(cfg)
    assert not train_mod.mid_epoch(rd / "checkpoints" / "last.ckpt")  # epoch 0's end, not step 2's validation
    assert not train_mod.resumes_exactly(cfg, rd / "checkpoints" / "last.ckpt")
    (rd / "resumed").touch()
    result = train(cfg)
    assert result["status"] == "ok", json.loads((rd / "status.json").read_text()).get("reason")
    clean = compose(SMOKE + [f"paths.results_dir={tmp_path / 'clean'}", "trainer.max_epochs=-1",
                             "++trainer.max_steps=5", "++trainer.val_check_interval=2",
                             "++trainer.check_val_every_n_epoch=null", "data.n_train=256", "data.batch_size=16"])
    monkeypatch.setattr(train_mod, "EpochWallClock", EpochWallClock)
    uninterrupted = train(clean)
    keys = [k for k in uninterrupted if k.startswith(("val/", "test/"))]
    assert keys and all(result[k] == uninterrupted[k] for k in keys)
    steps = [int(r["step"]) for r in csv.DictReader(open(rd / "history.csv")) if r.get("train/loss_step")]
    assert steps == sorted(set(steps)), "the restarted run's history repeats steps"


def test_a_legacy_mid_epoch_checkpoint_is_recognised(tmp_path):
    """Records from before epoch-end-only checkpoints may hold a mid-epoch last.ckpt: train() discards it (the loaders
    cannot resume inside an epoch) instead of resuming a run that would not equal the uninterrupted one."""
    import torch

    import oscrepro.train as train_mod

    def ckpt(completed: int, last: bool) -> Path:
        path = tmp_path / f"c{completed}{last}.ckpt"
        progress = {"current": {"completed": completed}, "is_last_batch": last}
        torch.save({"epoch": 0, "loops": {"fit_loop": {"epoch_loop.batch_progress": progress}}}, path)
        return path

    assert train_mod.mid_epoch(ckpt(3, False))
    assert not train_mod.mid_epoch(ckpt(16, True)) and not train_mod.mid_epoch(ckpt(0, False))


class _CodeRunningPayload:
    """Unpickling this would call os.makedirs(marker): the shape of a malicious checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return os.makedirs, (str(self.marker),)


def test_a_checkpoint_that_would_run_code_is_refused_and_nothing_runs(compose, results_dir, tmp_path):
    """A last.ckpt carrying a code-running pickle in an unfinished run's directory: the rerun refuses it with one
    message naming the file, before anything is written (no record), and the payload never executes."""
    import torch

    from oscrepro.runs.resume import CheckpointOwnerError

    cfg = compose(SMOKE + [f"paths.results_dir={results_dir}"])
    ckpt = _record(cfg) / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    marker = tmp_path / "payload_ran"
    torch.save({"epoch": 0, "state_dict": {}, "x": _CodeRunningPayload(marker)}, ckpt)
    with pytest.raises(CheckpointOwnerError, match=r"refused.*weights_only") as err:
        train(cfg)
    assert "last.ckpt" in str(err.value) and "\n" not in str(err.value)
    assert not (_record(cfg) / "status.json").exists() and not (_record(cfg) / "metrics.json").exists()
    assert not marker.exists(), "the checkpoint's payload ran"
    # the same file under the old, unsafe load would have run it: the test's payload is real
    torch.load(ckpt, weights_only=False)
    assert marker.exists()


def test_select_tests_the_best_validation_epoch(compose, results_dir, tmp_path):
    """``select`` keeps the epoch with the best validation value and tests it: with mode=max on val/loss (the worst
    epoch, so that it differs from the last) the selected epoch is history's argmax, and the test metrics equal
    those of a run trained (deterministically) to that epoch and tested at its end."""
    sel = ["+select.monitor=val/loss", "+select.mode=max"]
    cfg = compose(SMOKE + [f"paths.results_dir={results_dir}", "trainer.max_epochs=3", *sel])
    result = train(cfg)
    assert result["status"] == "ok", json.loads((_record(cfg) / "status.json").read_text()).get("reason")
    with open(_record(cfg) / "history.csv") as fh:
        val = [(int(r["epoch"]), float(r["val/loss"])) for r in csv.DictReader(fh) if r.get("val/loss")]
    worst = max(val, key=lambda ev: ev[1])[0]
    assert worst < 2, "the worst epoch is the last: the test would not tell best from last"
    assert result["select/epoch"] == worst and result["select/score"] == max(v for _, v in val)
    short = compose(SMOKE + [f"paths.results_dir={tmp_path / 'short'}", f"trainer.max_epochs={worst + 1}"])
    reference = train(short)
    keys = [k for k in reference if k.startswith("test/")]
    assert keys and all(result[k] == reference[k] for k in keys)


def test_bad_select_is_refused_before_anything_runs(compose, results_dir):
    import pytest

    from oscrepro.runs.validate import ConfigError

    cfg = compose(SMOKE + [f"paths.results_dir={results_dir}", "+select.monitor=test/acc", "+select.mode=max"])
    with pytest.raises(ConfigError, match="select="):
        train(cfg)
