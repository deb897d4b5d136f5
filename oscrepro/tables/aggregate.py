"""Run records -> table cells: mean ± std over seeds, n, divergences, failures, missing runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from oscrepro.tables.plan import RunRequest
from oscrepro.tables.spec import Column, Row, TableSpec


@dataclass
class Cell:
    """One aggregated table cell. ``mean``/``std`` are over finished (status ok) seeds with a finite metric."""

    mean: float = math.nan
    std: float = math.nan
    n: int = 0
    n_runs: int = 0
    n_diverged: int = 0
    n_failed: int = 0
    n_missing: int = 0
    count: int | None = None  # count_below columns
    values: list[float] = field(default_factory=list)


class MissingMetricError(KeyError):
    """A spec names a metric that a finished run did not log."""


def metric_key(col: Column, row: Row) -> str:
    return col.metric.format(**row.vars) if col.metric else ""


def _values(reqs: list[RunRequest], key: str, cell: Cell) -> list[float]:
    vals = []
    for r in reqs:
        status = r.record.status().get("status")
        cell.n_runs += 1
        if status == "ok":
            metrics = r.record.metrics()
            if key not in metrics:
                raise MissingMetricError(f"metric {key!r} not in {r.run_dir}/metrics.json; logged: {sorted(metrics)}")
            v = float(metrics[key])
            if math.isfinite(v):
                vals.append(v)
        elif status == "diverged":
            cell.n_diverged += 1
        elif status == "failed":
            cell.n_failed += 1
        else:
            cell.n_missing += 1
    return vals


def aggregate(spec: TableSpec, cells: dict[tuple[int, str], list[RunRequest]]) -> dict[tuple[int, str], Cell]:
    """Aggregate every cell; delta columns are differences of the referenced columns' means."""
    out: dict[tuple[int, str], Cell] = {}
    for ri, row in enumerate(spec.rows):
        for col in spec.columns:
            if col.delta is not None:
                continue
            cell = Cell()
            if col.count_below is not None:
                vals = _values(cells[(ri, col.name)], col.count_below["metric"].format(**row.vars), cell)
                cell.count = sum(v < float(col.count_below["threshold"]) for v in vals)
                cell.n = len(vals)
            else:
                vals = [v * col.scale * row.scale for v in _values(cells[(ri, col.name)], metric_key(col, row), cell)]
                cell.n, cell.values = len(vals), vals
                if vals:
                    cell.mean = float(np.mean(vals))
                    cell.std = float(np.std(vals, ddof=1)) if len(vals) > 1 else math.nan
            out[(ri, col.name)] = cell
        for col in spec.columns:
            if col.delta is not None:
                a, b = (out[(ri, name)] for name in col.delta)
                out[(ri, col.name)] = Cell(mean=a.mean - b.mean, n=min(a.n, b.n))
    return out
