"""A run's last line carries its val/test metrics and record; a multirun lists each job's, then counts them."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from oscrepro.runs.record import RunRecord, run_dir
from oscrepro.runs.sweep import outcome
from oscrepro.utils.console import headline_names, job_lines, metrics_text, run_line

SVA = {  # a fqo/sva smoke run's metrics.json (abridged)
    "epochs": 1,
    "n_params": 12260,
    "test/acc": 0.46341463923454285,
    "test/acc_hard": 0.4852941036224365,
    "test/attn_vd_correct": 0.16808198392391205,
    "test/loss": 0.7443528175354004,
    "test/n_hard_correct": 33.0,
    "time/train_epoch_s": 0.0669,
    "train_wall_time_s": 3.47,
    "val/acc": 0.5684210658073425,
    "val/acc_hard": 0.5192307829856873,
    "val/loss": 0.690045952796936,
}
LM = {"val/ppl": 49820.1, "val/ppl_best": 40000.0, "val/loss": 10.82, "test/ppl": 50220.0, "test/loss": 10.83}


def test_ok_line_has_val_and_test_metrics_of_the_same_names_and_the_record(tmp_path):
    line = run_line(tmp_path / "15a76d8d4a48", "ok", SVA)
    assert line == (
        f"run 15a76d8d4a48 ok (3.5 s): val acc=0.5684 acc_hard=0.5192 loss=0.69 | "
        f"test acc=0.4634 acc_hard=0.4853 loss=0.7444 -> {tmp_path / '15a76d8d4a48'}"
    )
    assert "attn" not in line and "n_hard" not in line  # test-only extras stay in metrics.json


def test_trackers_are_left_out_and_large_values_stay_readable():
    assert headline_names(LM) == ["loss", "ppl"]
    assert metrics_text(LM) == "val loss=10.82 ppl=49820 | test loss=10.83 ppl=50220"


def test_diverged_and_failed_lines_say_why(tmp_path):
    diverged = run_line(tmp_path / "a", "diverged", {"diverged_epoch": 3, "train_wall_time_s": 1.0}, "loss nan")
    assert diverged == f"run a diverged (1.0 s): at epoch 3: loss nan -> {tmp_path / 'a'}"
    failed = run_line(tmp_path / "b", "failed", {}, "RuntimeError: boom\nTraceback ...")
    assert failed == f"run b failed: RuntimeError: boom -> {tmp_path / 'b'}"


def _job(tmp_path: Path, seed: int, status: str, metrics: dict) -> object:
    cfg = OmegaConf.create({"seed": seed, "experiment_name": "fqo/sva", "paths": {"runs_dir": str(tmp_path)}})
    record = RunRecord(run_dir(cfg))
    record.start(cfg, {})
    record.finish(status, metrics, {"reason": "loss nan"} if status == "diverged" else {})
    return cfg


def test_multirun_summary_lists_each_job_metrics_then_the_count_line(tmp_path):
    cfgs = [_job(tmp_path, 0, "ok", SVA), _job(tmp_path, 1, "diverged", {"diverged_epoch": 0})]
    jobs = [["experiment=fqo/sva", "seed=0"], ["experiment=fqo/sva", "seed=1"]]
    ok, text = outcome(cfgs, jobs)
    lines = text.splitlines()
    assert not ok and len(lines) == 3
    assert lines[0].startswith(f"  seed=0: run {run_dir(cfgs[0]).name} ok (3.5 s): val acc=0.5684")
    assert lines[1] == f"  seed=1: run {run_dir(cfgs[1]).name} diverged: at epoch 0: loss nan -> {run_dir(cfgs[1])}"
    assert lines[2] == f"multirun: 2 job(s): 1 ok, 0 failed, 1 diverged; not ok: {run_dir(cfgs[1])} (diverged)"


def test_job_lines_without_overrides_are_numbered(tmp_path):
    cfg = OmegaConf.create({"seed": 0, "experiment_name": "x", "paths": {"runs_dir": str(tmp_path)}})
    ok, text = outcome([cfg])  # no record: the job never finished
    assert not ok and text.splitlines()[0] == f"  job 0: run {run_dir(cfg).name} unfinished: see status.json -> " + str(
        run_dir(cfg)
    )
    assert job_lines([], []) == []
