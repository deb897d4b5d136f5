"""Opening and closing a run's record: the ``running`` status it starts with, history.csv and wandb after an
attempt, and the final ``ok`` / ``diverged`` / ``failed`` record, written so that an error while closing (a full
disk) never replaces the run's own outcome and is never passed over in silence.

:mod:`oscrepro.train` trains; this module writes what it trained into ``<run-id>/`` (:class:`RunRecord`).
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig

from oscrepro.runs import history
from oscrepro.runs.loggers import finish_wandb
from oscrepro.runs.record import RunRecord
from oscrepro.utils.provenance import provenance

log = logging.getLogger("oscrepro.train")  # the run's own log lines, as before they moved here


def start_record(record: RunRecord, cfg: DictConfig) -> None:
    """Write the record's config.yaml and its ``running`` status: run id, experiment, the intra-op thread count
    (what a resume trains at: ``oscrepro.train.resume_threads``) and the machine's provenance."""
    record.start(cfg, {"run_id": record.dir.name, "experiment": str(cfg.experiment_name),
                       "torch_threads": torch.get_num_threads(),
                       **provenance(str(cfg.trainer.get("accelerator", "")))})


def close_attempt(run_dir: Path, loggers: list[Logger]) -> Exception | None:
    """After an attempt: write history.csv and finish wandb. Returns the first error instead of raising it, so
    that it never masks the attempt's own error (a full disk fails the checkpoint save, then the history write)."""
    first: Exception | None = None
    for step in (lambda: history.merge(run_dir / "logs", run_dir / "history.csv"), lambda: finish_wandb(loggers)):
        try:
            step()
        except Exception as err:  # noqa: BLE001 -- returned and recorded by the caller
            log.error("run %s: closing the attempt failed: %s: %s", run_dir.name, type(err).__name__, err)
            first = first or err
    return first


def failed_closing(status: str, extra: dict[str, Any], err: Exception) -> tuple[str, dict[str, Any]]:
    """The record of an attempt whose history could not be written: ``failed`` (its record is incomplete). A run
    that had failed already keeps its own error as the reason; this one is added after it."""
    text = f"{type(err).__name__}: {err}"
    if status == "failed":
        return status, {**extra, "reason": f"{extra.get('reason', '')}; then writing history.csv failed: {text}"}
    return "failed", {"reason": f"writing history.csv failed: {text}; the run's own outcome: {outcome(status, extra)}",
                      "traceback": "".join(traceback.format_exception(err))}


def outcome(status: str, extra: dict[str, Any]) -> str:
    """``status: reason`` (or the status alone), quoted in the reason of a record that failed while closing."""
    return f"{status}: {extra['reason']}" if extra.get("reason") else status


def write_record(record: RunRecord, status: str, metrics: dict[str, Any], extra: dict[str, Any]) -> str:
    """Write the final record; returns the status written. If metrics.json or status.json cannot be written (a
    full disk), status.json is written once more as ``failed`` naming that error; if even that fails, the error is
    raised (status.json then still says ``running``, as after a kill: the run is not finished and trains again)."""
    try:
        record.finish(status, metrics, extra)
        return status
    except Exception as err:
        reason = (f"writing the run record failed: {type(err).__name__}: {err}; the run's own outcome: "
                  f"{outcome(status, extra)}")
        log.error("run %s: %s", record.dir.name, reason)
        try:
            record.update_status({"status": "failed", "reason": reason,
                                  "traceback": "".join(traceback.format_exception(err))})
        except Exception as again:
            note = f"status.json could not be written either ({type(again).__name__}: {again}): it says running"
            log.error("run %s: %s", record.dir.name, note)
            err.add_note(note)
        else:
            return "failed"
        raise  # the record's own error: a run whose outcome cannot be written is not passed over in silence
