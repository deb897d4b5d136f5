"""What every pool of a table build runs for one run, and the submitit job that wraps it (SLURM and local).

* :func:`train_or_refuse`: :func:`oscrepro.train.train`, with a refused run (missing or corrupted data: nothing
  written) reported in one line and counted as failed, so the build goes on and exits non-zero.
* :class:`TrainJob`, a ``submitit.helpers.Checkpointable``: SLURM sends USR2 ``signal_delay_s`` before the time limit
  (``--signal=USR2@N``; ``scancel --signal=USR2`` does the same, as a preemption): submitit calls
  :meth:`TrainJob.checkpoint`, requeues the job (``scontrol requeue``) and exits. The requeued job trains the same
  config, which resumes from the run's last epoch-end checkpoint to the uninterrupted run's metrics bit for bit
  (oscrepro/utils/resume.py; a mid-epoch checkpoint would not resume exactly, so the partial epoch is trained
  again: at most one epoch of work is lost). SLURM's own preemption (SIGTERM, then SLURM requeues) ends the
  attempt the same way and resumes the same way.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import submitit
from omegaconf import DictConfig

from oscrepro.runs.record import RunRecord
from oscrepro.runs.record import run_dir as run_dir_of

# what submitit's UncompletedJobError says when a job at its time limit may not requeue again
TIMED_OUT = "Job not requeued because: timed-out"


def train_or_refuse(cfg: DictConfig) -> dict[str, Any]:
    """One run (its metrics, ``status`` included); a refused one is one printed line and ``failed``."""
    from oscrepro.train import REFUSALS, train  # imported in the worker

    try:
        return train(cfg)
    except REFUSALS as err:
        print(f"[run refused] {err}", flush=True)
        return {"status": "failed"}


def this_job() -> str:
    """The SLURM job this process runs in (``<array>_<task>`` for an array task)."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID", "(none: not in a SLURM job)")


class TrainJob(submitit.helpers.Checkpointable):
    """A submitit job that trains one run (:func:`train_or_refuse`); on USR2 it is resubmitted with the same config
    and resumes from the run's epoch-end checkpoint (module docstring)."""

    def __call__(self, cfg: DictConfig) -> dict[str, Any]:
        # the run's own log lines ("resuming <run> after epoch k") in the job's log, as a train command prints them
        logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
        result = train_or_refuse(cfg)
        record = RunRecord(run_dir_of(cfg))
        if result["status"] == "failed" and TIMED_OUT in str(record.status().get("reason", "")):
            # submitit's signal handler raised inside training (the time limit reached more often than
            # max_num_timeout allows): the run recorded that error; its cell names the state the job ends in
            record.update_status({"slurm_state": "TIMEOUT", "slurm_job": this_job()})
        return result

    def checkpoint(self, cfg: DictConfig) -> submitit.helpers.DelayedSubmission:
        last = run_dir_of(cfg) / "checkpoints" / "last.ckpt"
        where = f"from {last}" if last.exists() else "from the start (no epoch finished yet)"
        print(f"[slurm] job {this_job()} signalled: requeued; the run resumes {where}", flush=True)
        return super().checkpoint(cfg)
