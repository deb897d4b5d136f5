"""Expand a runs-table spec into run requests (cells x seeds) with their composed configs and run ids."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from oscrepro.tables.spec import CONF_DIR, TableSpec
from oscrepro.utils.run_record import RunRecord, run_id


@dataclass
class RunRequest:
    """One training run a table needs."""

    overrides: list[str]  # Hydra overrides, seed included
    cfg: DictConfig
    run_dir: Path

    @property
    def record(self) -> RunRecord:
        return RunRecord(self.run_dir)


def compose_run(overrides: list[str], conf_dir: Path = CONF_DIR) -> DictConfig:
    """Compose ``conf/train.yaml`` with ``overrides`` exactly as ``python -m oscrepro.train`` would."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def cell_overrides(spec: TableSpec, row_idx: int, col_name: str, budget: str, extra: list[str]) -> list[str]:
    """Overrides (without seed) of one (row, column) cell."""
    col = next(c for c in spec.columns if c.name == col_name)
    row = spec.rows[row_idx]
    experiment = col.experiment or row.experiment or spec.experiment
    return [f"experiment={experiment}", f"budget={budget}", f"table_name={spec.key}",
            *row.overrides, *(o.format(**row.vars) for o in col.overrides), *extra]


def plan(spec: TableSpec, budget: str, extra: list[str] | None = None,
         conf_dir: Path = CONF_DIR) -> dict[tuple[int, str], list[RunRequest]]:
    """Map each (row index, run-backed column name) to its per-seed run requests.

    Cells with identical configs (e.g. the same model requested by two columns or two tables) share run ids,
    hence run records: they are trained once.
    """
    extra = list(extra or [])
    cells: dict[tuple[int, str], list[RunRequest]] = {}
    cache: dict[tuple[str, ...], RunRequest] = {}
    for ri in range(len(spec.rows)):
        for col in spec.columns:
            if col.delta is not None:
                continue
            reqs = []
            for seed in spec.seeds_for(budget):
                ov = tuple(cell_overrides(spec, ri, col.name, budget, extra) + [f"seed={seed}"])
                if ov not in cache:
                    cfg = compose_run(list(ov), conf_dir)
                    cache[ov] = RunRequest(list(ov), cfg, Path(cfg.paths.runs_dir) / cfg.experiment_name / run_id(cfg))
                reqs.append(cache[ov])
            cells[(ri, col.name)] = reqs
    return cells


def unique_runs(cells: dict[tuple[int, str], list[RunRequest]]) -> list[RunRequest]:
    """Distinct runs in plan order."""
    seen: dict[Path, RunRequest] = {}
    for reqs in cells.values():
        for r in reqs:
            seen.setdefault(r.run_dir, r)
    return list(seen.values())
