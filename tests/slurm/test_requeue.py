"""A signalled job requeues, and its run resumes from its last epoch-end checkpoint to the metrics of an
uninterrupted run, bit for bit: after a preemption-like USR2 (``scancel --signal=USR2``: submitit's checkpoint
and ``scontrol requeue``), after SLURM's own preemption (a job of the higher-priority ``urgent`` partition of
scripts/slurm_up.sh takes the CPUs: SIGTERM, then SLURM requeues it) and after its time limit (``--signal=USR2@N``
in the submitted script)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from oscrepro.runs.lookup import RunRequest
from oscrepro.runs.record import run_dir
from oscrepro.tables.launch import Progress, launch, resolve_launcher
from oscrepro.tables.slurm import log_path
from oscrepro.train import train
from tests.slurm.cluster import ended, final_metrics, ledger, status, table_runs, wait_for

pytestmark = pytest.mark.slurm
ROW = "Oscillator d_osc=2 (full)"  # one run of fqo Table 2 at smoke, trained longer


def _detach(results: Path, overrides: list[str], launcher: list[str]) -> tuple[RunRequest, str, dict[str, Any]]:
    """Submit the run of :data:`ROW` alone as a SLURM job through the table engine (``launch(..., detach=True)``
    with the ``slurm_cpu`` config and ``launcher`` overrides): ``(request, job id, ledger entry)``."""
    req = table_runs(results, overrides)[ROW]
    launch([req], resolve_launcher("slurm_cpu", launcher), Progress("requeue", 1, 0), detach=True)
    (entry,) = ledger(results)
    return req, entry["runs"][str(req.run_dir)], entry


def _uninterrupted(req: RunRequest, where: Path) -> dict[str, float]:
    """The same run trained here without interruption (same config and run id, another results dir; the job's
    thread count): its final metrics."""
    cfg = OmegaConf.create(OmegaConf.to_container(req.cfg, resolve=False))
    cfg.paths.results_dir = str(where)
    assert run_dir(cfg).name == req.run_dir.name
    metrics = train(cfg)
    assert metrics["status"] == "ok"
    return {k: v for k, v in metrics.items() if k.startswith(("val/", "test/"))}


def _mtime(path: Path) -> int | None:
    """``path``'s modification time (ns; a link's target's), None while it is missing (a checkpoint being replaced)."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _job_log(entry: dict[str, Any], job: str) -> str:
    err = log_path(entry["folder"], job)
    return err.read_text() + err.with_suffix(".out").read_text()


def test_a_job_preempted_twice_resumes_each_time_to_the_uninterrupted_metrics(tmp_path):
    # ~15 s of training (0.15 s an epoch here): the run is still training after its first resume, when the urgent
    # job preempts it (40 epochs, ~6 s, left a race with that second requeue)
    req, job, entry = _detach(tmp_path / "results", ["trainer.max_epochs=100", "trainer.limit_train_batches=16"], [])
    last = req.run_dir / "checkpoints" / "last.ckpt"
    first_ckpt = wait_for("the run's first epoch-end checkpoint", lambda: _mtime(last), every_s=0.2)
    subprocess.run(["scancel", "--signal=USR2", job], check=True)  # what submitit's preemption handling expects
    resumed = f"resuming {req.run_dir.name} after epoch"
    try:
        wait_for(
            "the requeued job to resume and save its next checkpoint",
            lambda: resumed in _job_log(entry, job) and _mtime(last) not in (None, first_ckpt),
            every_s=0.2,
        )
    except AssertionError as err:
        raise AssertionError(f"{err}; the job's log:\n{_job_log(entry, job)[-4000:]}") from None
    # SLURM's preemption: an urgent job that needs every CPU of the node requeues ours (PreemptMode=REQUEUE)
    cpus = subprocess.run(["sinfo", "-h", "-N", "-o", "%c"], capture_output=True, text=True).stdout.split()[0]
    subprocess.run(["sbatch", "-p", "urgent", "-c", cpus, "-o", "/dev/null", "--wrap", "sleep 1"], check=True)
    reference = _uninterrupted(req, tmp_path / "reference")  # trains here while the job requeues
    attempts = wait_for(f"job {job} to finish", lambda: ended([job]))[job]
    assert attempts[0] == "REQUEUED" and "PREEMPTED" in attempts and attempts[-1] == "COMPLETED", attempts
    log = _job_log(entry, job)
    assert "this job is preempted" in log and "signalled: requeued; the run resumes from " in log, log[-3000:]
    assert "DUE TO PREEMPTION" in log and log.count(resumed) == 2, log[-3000:]
    assert status(req.run_dir)["status"] == "ok"
    assert final_metrics(req.run_dir) == reference


@pytest.mark.slow  # 2-4 min: SLURM's time-limit signal lands only some 30-60 s before the limit of 2 min
def test_a_job_at_its_time_limit_requeues_and_resumes_to_the_uninterrupted_metrics(tmp_path):
    # the signal lands 30-60 s after the job starts (USR2@60 of a 2 min limit; slurmctld checks every 30 s):
    # the run trains longer than that, so its first attempt is cut mid-training, and requeues as often as needed
    longer = ["trainer.max_epochs=200", "trainer.limit_train_batches=16"]
    launcher = ["hydra.launcher.timeout_min=2", "hydra.launcher.signal_delay_s=60", "hydra.launcher.max_num_timeout=8"]
    req, job, entry = _detach(tmp_path / "results", longer, launcher)
    reference = _uninterrupted(req, tmp_path / "reference")
    attempts = wait_for(f"job {job} to finish", lambda: ended([job]), deadline_s=900, every_s=2)[job]
    assert "REQUEUED" in attempts and attempts[-1] == "COMPLETED", attempts
    log = _job_log(entry, job)
    assert "this job is timed-out" in log and f"resuming {req.run_dir.name} after epoch" in log, log[-3000:]
    assert status(req.run_dir)["status"] == "ok"
    assert final_metrics(req.run_dir) == reference
