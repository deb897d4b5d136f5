"""What a researcher reads at the end of a run or a sweep: its numbers, in one line, and where its record is.

A run used to end with ``run record: <dir> (status ok)``: the metrics were only in ``metrics.json``. :func:`run_line`
puts the final validation and test metrics on that line; :func:`job_lines` gives the same for every job of a
Hydra multirun (``oscrepro.runs.sweep.outcome``), read back from the run records.

Which metrics: every ``val/<name>`` the run logged (a task's headline metrics: loss, acc, ppl, bpc, mse, ll, ...;
trackers such as ``val/ppl_best`` left out) and the ``test/<name>`` of the same names. Test-only extras (the SVA
attention probes, counts) stay in ``metrics.json``, so the line stays readable.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("oscrepro.train")

SPLITS = ("val", "test")
TRACKER_SUFFIX = "_best"  # STYLE.md: ``_best`` marks a tracker, not a final metric


def headline_names(metrics: Mapping[str, Any]) -> list[str]:
    """The metric names shown for a run: those logged under ``val/`` (trackers left out), sorted."""
    return sorted(
        k.split("/", 1)[1]
        for k in metrics
        if k.startswith("val/") and not k.endswith(TRACKER_SUFFIX) and _number(metrics[k])
    )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fmt(value: float) -> str:
    """4 significant digits, never scientific notation for ordinary magnitudes (perplexities, accuracies)."""
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"  # .4g: 4.982e+04


def metrics_text(metrics: Mapping[str, Any]) -> str:
    """``val acc=0.5684 loss=0.69 | test acc=0.4634 loss=0.7444`` (empty when the run logged no val metric)."""
    names = headline_names(metrics)
    parts = []
    for split in SPLITS:
        shown = [f"{n}={_fmt(float(metrics[f'{split}/{n}']))}" for n in names if _number(metrics.get(f"{split}/{n}"))]
        if shown:
            parts.append(f"{split} {' '.join(shown)}")
    return " | ".join(parts)


def run_line(run_dir: Path, status: str, metrics: Mapping[str, Any], reason: str | None = None) -> str:
    """The last line of a run: ``run <id> <status>: <metrics> -> <record dir>``; a diverged or failed run gives
    its epoch or reason instead of metrics (its ``status.json`` has the rest)."""
    head = f"run {Path(run_dir).name} {status}"
    if status == "ok":
        body = metrics_text(metrics) or "no val/test metrics"
    elif status == "diverged" and "diverged_epoch" in metrics:
        body = f"at epoch {metrics['diverged_epoch']}" + (f": {_short(reason)}" if reason else "")
    else:
        body = _short(reason) if reason else "see status.json"
    wall = metrics.get("train_wall_time_s")
    took = f" ({float(wall):.1f} s)" if _number(wall) else ""
    return f"{head}{took}: {body} -> {run_dir}"


def _short(text: str, limit: int = 160) -> str:
    """First line of ``text``, cut to ``limit`` characters (a traceback belongs in status.json, not here)."""
    first = (str(text).strip().splitlines() or [""])[0]
    return first if len(first) <= limit else first[: limit - 3] + "..."


def report_run(
    run_dir: Path, status: str, metrics: Mapping[str, Any], reason: str | None = None, skipped: bool = False
) -> None:
    """Log :func:`run_line` (INFO on ``oscrepro.train``: shown by Hydra's job logging and by table builds);
    ``skipped``: a finished record that was read, not trained."""
    line = run_line(run_dir, status, metrics, reason)
    log.info("%s%s", line, " (finished earlier: not trained again)" if skipped else "")


def job_lines(labels: list[str], records: list[tuple[Path, str, Mapping[str, Any], str | None]]) -> list[str]:
    """One line per multirun job, ``  <label>: <run line>``: ``records`` holds each job's (run dir, status,
    metrics, reason) as read back from its run record."""
    return [
        f"  {label}: {run_line(rd, status, metrics, reason)}"
        for label, (rd, status, metrics, reason) in zip(labels, records, strict=True)
    ]
