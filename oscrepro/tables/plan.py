"""Expand a runs-table spec into run requests (cells x seeds) with their composed configs and run ids."""

from __future__ import annotations

from pathlib import Path

from oscrepro.tables.runs import RunRequest
from oscrepro.tables.spec import CONF_DIR, TableSpec

Cells = dict[tuple[int, str], list[RunRequest]]


def plan(spec: TableSpec, budget: str, extra: list[str] | None = None, conf_dir: Path = CONF_DIR) -> Cells:
    """Map each (row index, run-backed column name) to its per-seed run requests.

    Cells with identical configs (e.g. the same model requested by two columns or two tables) share run ids,
    hence run records: they are trained once.
    """
    extra = list(extra or [])
    cells: Cells = {}
    cache: dict[tuple[str, ...], RunRequest] = {}
    for ri in range(len(spec.rows)):
        for col in spec.columns:
            if col.delta is not None:
                continue
            reqs = []
            for seed in spec.seeds_for(budget):
                ov = tuple(spec.cell_overrides(ri, col.name, budget, extra) + [f"seed={seed}"])
                if ov not in cache:
                    cache[ov] = RunRequest.compose(list(ov), conf_dir)
                reqs.append(cache[ov])
            cells[(ri, col.name)] = reqs
    return cells


def unique_runs(cells: Cells) -> list[RunRequest]:
    """Distinct runs in plan order."""
    seen: dict[Path, RunRequest] = {}
    for reqs in cells.values():
        for r in reqs:
            seen.setdefault(r.run_dir, r)
    return list(seen.values())
