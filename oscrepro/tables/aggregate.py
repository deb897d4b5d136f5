"""Run records -> table cells: mean ± std over seeds, n, divergences, failures, missing runs.

A number that is not finite never enters a cell. A record whose status says ``ok`` but whose final val/test
metrics (or the cell's own metric) hold NaN or inf is a run whose numbers are made up: a loss that went NaN leaves
an accuracy that is the argmax of NaN logits. Runs now record ``diverged`` for it (oscrepro.train), but records
written before that (kept in git) may still say ``ok``, so the engine guards anyway: such a record counts as
diverged in every cell that reads it (:func:`effective_status`), the cell flags it, and the table header counts it
under ``diverged``, never under ``ok``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oscrepro.tables.plan import RunRequest
from oscrepro.tables.spec import Column, Row, TableSpec
from oscrepro.tables.values import unit_differences

log = logging.getLogger(__name__)
FINAL_PREFIXES = ("val/", "test/")  # the final metrics a record reports; any non-finite one voids the record


@dataclass
class Cell:
    """One aggregated table cell. ``mean``/``std`` are over finished (status ok) seeds whose final metrics are all
    finite; an ``ok`` record with a non-finite one counts in ``n_diverged`` (module docstring)."""

    mean: float = math.nan
    std: float = math.nan
    n: int = 0
    n_runs: int = 0
    n_diverged: int = 0
    n_failed: int = 0
    n_missing: int = 0
    count: int | None = None  # count_below columns
    values: list[float] = field(default_factory=list)
    units: list[tuple[str, float]] = field(default_factory=list)  # (run id, value) of each value, for pairing
    failed_as: list[str] = field(default_factory=list)  # SLURM states of failed runs whose job ended so


class MissingMetricError(KeyError):
    """A spec names a metric that a finished run did not log."""


def metric_key(col: Column, row: Row) -> str:
    return col.metric.format(**row.vars) if col.metric else ""


def non_finite_metrics(metrics: dict[str, Any], keys: tuple[str, ...] = ()) -> list[str]:
    """Keys of ``metrics`` whose value is a number that is not finite: every final val/test metric, plus
    ``keys`` (the metric a cell reads, whatever its name)."""
    bad = []
    for key, value in metrics.items():
        if not (key.startswith(FINAL_PREFIXES) or key in keys) or isinstance(value, bool):
            continue
        try:
            finite = math.isfinite(float(value))
        except (TypeError, ValueError):  # not a number (a string, a list): not ours to judge here
            continue
        if not finite:
            bad.append(key)
    return sorted(bad)


def effective_status(status: dict[str, Any], metrics: dict[str, Any], keys: tuple[str, ...] = ()) -> str:
    """The status a table counts a record under: its recorded one, except that an ``ok`` record with a non-finite
    final metric (:func:`non_finite_metrics`) counts as ``diverged`` (module docstring); ``missing`` without one."""
    recorded = str(status.get("status", "missing"))
    return "diverged" if recorded == "ok" and non_finite_metrics(metrics, keys) else recorded


def _values(reqs: list[RunRequest], key: str, cell: Cell) -> list[float]:
    """The finite values of metric ``key`` over the cell's runs; counts the others in ``cell`` and keys each value
    by its run id in ``cell.units``."""
    vals = []
    for r in reqs:
        recorded = r.record.status()
        metrics = r.record.metrics() if recorded.get("status") == "ok" else {}
        status = effective_status(recorded, metrics, (key,))
        cell.n_runs += 1
        if status == "ok":
            if key not in metrics:
                raise MissingMetricError(f"metric {key!r} not in {r.run_dir}/metrics.json; logged: {sorted(metrics)}")
            vals.append(float(metrics[key]))
            cell.units.append((r.run_dir.name, vals[-1]))
        elif status == "diverged":
            if recorded.get("status") == "ok":
                log.warning("run %s: status ok but non-finite %s: counted as diverged, not averaged", r.run_dir,
                            ", ".join(non_finite_metrics(metrics, (key,))))
            cell.n_diverged += 1
        elif status == "failed":
            cell.n_failed += 1
            if recorded.get("slurm_state"):  # the job was cancelled, timed out, ... (oscrepro.tables.slurm)
                cell.failed_as.append(str(recorded["slurm_state"]))
        else:
            cell.n_missing += 1
    return vals


def delta_cell(a: Cell, b: Cell) -> Cell:
    """A delta column's cell ``a − b``. Where both columns were measured on the same runs (fqo Table 3's a_vs and
    a_vd), the difference is taken per run: its mean is the difference of the means, and it has a seed spread
    (the paired one) and per-run units, so claims can judge it. Else (two models: Table 7's oscillator − softmax)
    it is the difference of the means, with no spread: the seeds of two models are not paired observations."""
    units = unit_differences(a.units, b.units)
    if units is None:
        return Cell(mean=a.mean - b.mean, n=min(a.n, b.n))
    vals = [v for _, v in units]
    return Cell(mean=float(np.mean(vals)), std=float(np.std(vals, ddof=1)) if len(vals) > 1 else math.nan,
                n=len(vals), values=vals, units=units)


def aggregate(spec: TableSpec, cells: dict[tuple[int, str], list[RunRequest]]) -> dict[tuple[int, str], Cell]:
    """Aggregate every cell; delta columns are per-run differences of the referenced columns where both read the
    same runs, else differences of their means (:func:`delta_cell`)."""
    out: dict[tuple[int, str], Cell] = {}
    for ri, row in enumerate(spec.rows):
        for col in spec.columns:
            if col.delta is not None:
                continue
            cell = Cell()
            if col.count_below is not None:
                vals = _values(cells[(ri, col.name)], col.count_below["metric"].format(**row.vars), cell)
                cell.count = sum(v < float(col.count_below["threshold"]) for v in vals)
                cell.units = []  # a count over seeds has no per-run value
                cell.n = len(vals)
            else:
                vals = [v * col.scale * row.scale for v in _values(cells[(ri, col.name)], metric_key(col, row), cell)]
                cell.n, cell.values = len(vals), vals
                cell.units = [(u, v) for (u, _), v in zip(cell.units, vals, strict=True)]
                if vals:
                    cell.mean = float(np.mean(vals))
                    cell.std = float(np.std(vals, ddof=1)) if len(vals) > 1 else math.nan
            out[(ri, col.name)] = cell
        for col in spec.columns:
            if col.delta is not None:
                a, b = (out[(ri, name)] for name in col.delta)
                out[(ri, col.name)] = delta_cell(a, b)
    return out
