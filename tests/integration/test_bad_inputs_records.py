"""Run records never lie (issue 31): a run is recorded ``ok`` only with finite final metrics, a checkpoint of
another run is never resumed, a full disk gives a ``failed`` record with the original error and no ``*.tmp`` litter,
and a resumed run trains at the thread count it started with. Each test fails on the code before issue 31."""

from __future__ import annotations

import errno
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

from oscrepro.runs.record import RunRecord
from oscrepro.runs.record import run_dir as run_dir_for
from oscrepro.train import train
from tests.integration.test_exact_resume import CASES, RUN

SMOKE = ["experiment=fqo/sva", "budget=smoke", "trainer.enable_progress_bar=false"]
HUGE_LR = ["task.optimizer.lr=1e30", "trainer.limit_train_batches=1"]  # finite training loss, NaN weights after it


def _strict_json(path: pathlib.Path) -> dict:
    """The file's JSON; NaN or Infinity in it fails the test (they are not JSON numbers)."""
    def refuse(token: str) -> float:
        raise AssertionError(f"{path} holds {token}")

    return json.loads(path.read_text(), parse_constant=refuse)


def _tmp_files(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in root.rglob("*") if p.name.endswith(".tmp"))


# -- 1. ok only when right ------------------------------------------------------------------------------------------

def test_non_finite_final_metrics_are_recorded_diverged_not_ok(compose, results_dir):
    """lr=1e30 keeps the one training loss finite but leaves NaN weights: val/test loss NaN. The record says
    diverged, names the metrics and the epoch, and holds no NaN."""
    cfg = compose(SMOKE + HUGE_LR + [f"paths.results_dir={results_dir}"])
    result = train(cfg)
    rd = run_dir_for(cfg)
    status = _strict_json(rd / "status.json")
    assert result["status"] == status["status"] == "diverged", status
    assert "val/loss=nan" in status["reason"] and "test/loss=nan" in status["reason"]
    assert "epoch 0" in status["reason"]
    metrics = _strict_json(rd / "metrics.json")
    assert metrics["diverged_epoch"] == 0
    assert not [k for k in metrics if k.startswith(("val/", "test/"))]
    assert train(cfg)["status"] == "diverged"  # a recorded outcome, not retried


def test_an_empty_split_omits_its_attention_means_instead_of_nan():
    from oscrepro.papers.fqo.verb_attention import verb_attention_summary

    out = verb_attention_summary(torch.tensor([0.5, 0.7]), torch.tensor([0.1, 0.3]), torch.tensor([True, True]))
    assert out == pytest.approx({"attn_vs_correct": 0.6, "attn_vd_correct": 0.2, "n_hard_correct": 2.0,
                                 "n_hard_wrong": 0.0})
    assert all(math.isfinite(v) for v in out.values())


def test_a_record_refuses_a_non_finite_metric(tmp_path):
    record = RunRecord(tmp_path / "run")
    record.start(OmegaConf.create({"seed": 0}), {"run_id": "run"})
    with pytest.raises(ValueError, match="not JSON compliant"):
        record.finish("ok", {"test/acc": math.nan}, {})
    assert not (tmp_path / "run" / "metrics.json").exists() and not _tmp_files(tmp_path)
    assert record.status()["status"] == "running"


# -- 2. checkpoints belong to their run -----------------------------------------------------------------------------

def test_another_runs_checkpoint_is_refused_naming_both_runs(compose, results_dir):
    """Run A's last checkpoint (same shapes) placed under run B's id: B is refused in one message naming both ids
    and the checkpoints dir to delete, nothing is trained or recorded; a checkpoint without a run id too. Deleting
    the dir, as the message says, lets B train from the start."""
    from oscrepro.runs.resume import RUN_ID_KEY, CheckpointOwnerError

    a = compose(SMOKE + [f"paths.results_dir={results_dir}", "seed=0"])
    b = compose(SMOKE + [f"paths.results_dir={results_dir}", "seed=1"])
    assert train(a)["status"] == "ok"
    ra, rb = run_dir_for(a), run_dir_for(b)
    assert ra.name != rb.name
    ckpt = torch.load(ra / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt[RUN_ID_KEY] == ra.name
    (rb / "checkpoints").mkdir(parents=True)
    shutil.copy(ra / "checkpoints" / "last.ckpt", rb / "checkpoints" / "last.ckpt")
    with pytest.raises(CheckpointOwnerError) as refused:
        train(b)
    message = str(refused.value)
    assert ra.name in message and rb.name in message and f"Delete {rb / 'checkpoints'}" in message
    assert "\n" not in message
    assert not (rb / "status.json").exists() and not (rb / "metrics.json").exists()

    del ckpt[RUN_ID_KEY]  # a checkpoint that carries no run id (another run's, or from before run ids)
    torch.save(ckpt, rb / "checkpoints" / "last.ckpt")
    with pytest.raises(CheckpointOwnerError, match=f"carries no run id.*Delete {rb / 'checkpoints'}"):
        train(b)
    assert not (rb / "status.json").exists()

    shutil.rmtree(rb / "checkpoints")
    assert train(b)["status"] == "ok"


def test_the_cli_refuses_another_runs_checkpoint_in_one_line(compose, tmp_path):
    results = tmp_path / "results"
    overrides = SMOKE + [f"paths.results_dir={results}"]
    a, b = compose(overrides + ["seed=0"]), compose(overrides + ["seed=1"])
    assert train(a)["status"] == "ok"
    ra, rb = run_dir_for(a), run_dir_for(b)
    (rb / "checkpoints").mkdir(parents=True)
    shutil.copy(ra / "checkpoints" / "last.ckpt", rb / "checkpoints" / "last.ckpt")
    import oscrepro

    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(oscrepro.__file__).parents[1])}  # the code under test
    proc = subprocess.run([sys.executable, "-m", "oscrepro.train", *overrides, "seed=1"], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ra.name in ln]
    assert len(lines) == 1 and rb.name in lines[0] and "Delete" in lines[0], proc.stderr
    assert not (rb / "status.json").exists()


# -- 3. a full disk -------------------------------------------------------------------------------------------------

class DiskFull:
    """From the second checkpoint save on, the disk is full: that save raises ENOSPC, and so does every later
    atomic write (``*.tmp``, half written first, as a real full disk does) of the record files in ``failing``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, failing: tuple[str, ...]) -> None:
        from lightning.pytorch.plugins.io.torch_plugin import TorchCheckpointIO

        self.full, self.saves, self.failing = False, 0, failing
        save, write_text = TorchCheckpointIO.save_checkpoint, pathlib.Path.write_text
        disk = self

        def save_checkpoint(io, checkpoint, path, storage_options=None):
            disk.saves += 1
            if disk.saves >= 2:
                disk.full = True
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            return save(io, checkpoint, path, storage_options)

        def full_write_text(path, data, *args, **kwargs):
            if disk.full and path.name.endswith(".tmp") and path.name.split(".")[0] in disk.failing:
                write_text(path, data[: len(data) // 2], *args, **kwargs)
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            return write_text(path, data, *args, **kwargs)

        monkeypatch.setattr(TorchCheckpointIO, "save_checkpoint", save_checkpoint)
        monkeypatch.setattr(pathlib.Path, "write_text", full_write_text)


@pytest.mark.parametrize("failing", [("history",), ("history", "metrics")], ids=["history", "history+metrics"])
def test_a_full_disk_gives_a_failed_record_with_the_original_error_and_no_litter(compose, results_dir,
                                                                                    monkeypatch, failing):
    """ENOSPC at epoch 1's checkpoint, then at history.csv's write (and metrics.json's): the record is failed, its
    reason is the checkpoint's ENOSPC first (not masked by the history's), and no ``*.tmp`` file is left."""
    cfg = compose(SMOKE + [f"paths.results_dir={results_dir}", "trainer.max_epochs=2"])
    disk = DiskFull(monkeypatch, failing)
    result = train(cfg)
    assert disk.full
    rd = run_dir_for(cfg)
    status = _strict_json(rd / "status.json")
    assert result["status"] == status["status"] == "failed"
    reason = status["reason"]
    assert "OSError: [Errno 28] No space left on device" in reason
    assert reason.index("epoch=1") < reason.index("history.csv"), reason  # the checkpoint's error first, not masked
    assert ("metrics.json" in reason) == ("metrics" in failing)
    assert _tmp_files(results_dir) == []


def test_when_even_status_json_cannot_be_written_the_error_is_raised_and_no_litter(compose, results_dir,
                                                                                  monkeypatch):
    """Nothing can be written any more: train() raises the ENOSPC (not silent), status.json still says running
    (a finished run is never claimed; the next attempt trains it again), and no ``*.tmp`` file is left."""
    cfg = compose(SMOKE + [f"paths.results_dir={results_dir}", "trainer.max_epochs=2"])
    DiskFull(monkeypatch, ("history", "metrics", "status"))
    with pytest.raises(OSError, match="No space left on device") as raised:
        train(cfg)
    assert "metrics.json" in str(raised.value)
    assert any("status.json could not be written either" in note for note in raised.value.__notes__)
    assert RunRecord(run_dir_for(cfg)).status()["status"] == "running"
    assert _tmp_files(results_dir) == []


# -- 4. exact resume across worker counts ---------------------------------------------------------------------------

@pytest.fixture
def threads_restored():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_run_resumed_with_another_thread_count_trains_at_its_own(compose, tmp_path, monkeypatch,
                                                                    threads_restored):
    """Started with torch_threads=2, killed in the middle of epoch 1, resumed by a build with torch_threads=1 (not
    in the run id: the same record): the resumed process trains at 2 threads and its metrics equal the
    uninterrupted 2-thread run's bit for bit; status.json records the count."""
    import oscrepro.train as train_mod
    from oscrepro.utils.callbacks import EpochWallClock

    seen: list[int] = []

    class CrashMidEpoch1(EpochWallClock):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.current_epoch == 1 and batch_idx == 2:
                raise RuntimeError("simulated SIGKILL in the middle of epoch 1")

    class CountThreads(EpochWallClock):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append(torch.get_num_threads())

    overrides = [*CASES["fqo/sva"], *RUN]
    uninterrupted = train(compose([*overrides, "torch_threads=2", f"paths.results_dir={tmp_path / 'clean'}"]))
    killed = compose([*overrides, "torch_threads=2", f"paths.results_dir={tmp_path / 'killed'}"])
    resumed_cfg = compose([*overrides, "torch_threads=1", f"paths.results_dir={tmp_path / 'killed'}"])
    rd = run_dir_for(killed)
    assert run_dir_for(resumed_cfg) == rd  # torch_threads stays out of the run id
    monkeypatch.setattr(train_mod, "EpochWallClock", CrashMidEpoch1)
    assert train(killed)["status"] == "failed"
    assert (rd / "checkpoints" / "last.ckpt").exists()
    assert RunRecord(rd).status()["torch_threads"] == 2
    torch.set_num_threads(1)  # a fresh worker process of a 2-worker build
    monkeypatch.setattr(train_mod, "EpochWallClock", CountThreads)
    resumed = train(resumed_cfg)
    assert resumed["status"] == "ok" == uninterrupted["status"]
    assert seen and set(seen) == {2}, seen
    assert RunRecord(rd).status()["torch_threads"] == 2
    keys = sorted(k for k in uninterrupted if k.startswith(("val/", "test/")))
    assert keys and {k: resumed[k] for k in keys} == {k: uninterrupted[k] for k in keys}
