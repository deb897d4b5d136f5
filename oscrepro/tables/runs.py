"""The engine's side of run records: the runs of a table's cells (training the missing ones on request) and a
finished run back in memory (config, data module, trained model; weights kept out of git are retrained). Finding a
record (:func:`oscrepro.runs.lookup.find_record`) is the runs layer's.

Analysis tables read the runs of other tables (fqo Table 6 reads Table 4's TinyStories models, fsn Tables 2, 4, 5
and Figure 2 read Table 1 and the ladder). A cell's runs are located exactly as the engine plans them (same
overrides, same run ids: :func:`cell_requests`) and resolved by :func:`finished_cell_runs`; a missing run is a
:class:`MissingRunsError` naming the command that trains it. The engine trains them first with the build's
launcher (:mod:`oscrepro.tables.sources`); :func:`source_runs` is the same lookup for callers outside a build,
training in-process on request (``train_missing``).
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from oscrepro.data.base import model_dims
from oscrepro.data.integrity import instantiate_data
from oscrepro.runs.compose import CKPT_NAME, RunNotUsableError, path_override
from oscrepro.runs.lookup import RunRequest, find_record, model_state_dict
from oscrepro.runs.record import RunRecord, load_record_config
from oscrepro.tables.recover import recover_checkpoint, recovered_note
from oscrepro.tables.spec import SpecError, load_spec


class MissingRunsError(FileNotFoundError):
    """A table needs finished runs (of itself or of another table) that are not in the results directory."""


# ------------------------------------------------------------------------------------ runs of table cells
def cell_requests(source: str, budget: str, row: str, column: str | None, results_dir: Path,
                  overrides: list[str] | None = None) -> list[RunRequest]:
    """Run requests (one per seed) of cell (``row`` label, ``column`` name; default: the first run-backed
    column) of table ``source`` at ``budget``. ``overrides``: extra Hydra overrides the source table was built
    with (``python -m oscrepro.table ... <overrides>``); they are part of the run ids."""
    spec = load_spec(source)
    labels = [r.label for r in spec.rows]
    if row not in labels:
        raise SpecError(f"table {source} has no row {row!r}; rows: {labels}")
    col = column or next(c.name for c in spec.columns if c.delta is None)
    if col not in {c.name for c in spec.columns}:
        raise SpecError(f"table {source} has no column {col!r}")
    base = spec.cell_overrides(labels.index(row), col, budget,
                               [path_override("paths.results_dir", results_dir), *(overrides or [])])
    return [RunRequest.compose([*base, f"seed={s}"]) for s in spec.seeds_for(budget, labels.index(row), col)]


def source_runs(table: str, source: str, budget: str, cells: Mapping[str, tuple[str, str | None]],
                results_dir: Path, train_missing: bool = False, seeds: list[int] | None = None,
                overrides: list[str] | None = None, checkpoints: bool = True
                ) -> tuple[dict[str, list[Path]], list[str]]:
    """Finished run dirs (status ok) per named cell of table ``source``: ``cells`` maps a name to (row, column).

    ``seeds``: only these seeds (default: all of the budget's). Diverged runs are dropped with a note. Missing or
    failed runs raise :class:`MissingRunsError` naming the command that trains them, after training them
    in-process first if ``train_missing``. ``checkpoints``: the caller loads the runs' weights, so a finished record
    kept without them (records are in git, checkpoints are not) gets them back from
    :func:`oscrepro.tables.recover.recover_checkpoint`, and the notes say so; False for callers that read only
    metrics and history.
    """
    reqs = {name: [r for r in cell_requests(source, budget, row, col, results_dir, overrides)
                   if seeds is None or int(r.cfg.seed) in seeds] for name, (row, col) in cells.items()}
    if train_missing:  # in-process, one after another (an analysis built by the engine gets its runs trained by
        # the engine's launcher instead: oscrepro.tables.sources)
        from oscrepro.train import train

        for rs in reqs.values():
            for r in rs:
                if find_record(r) is None:
                    train(r.cfg)
    return finished_cell_runs(table, source, budget, reqs, {name: row for name, (row, _) in cells.items()},
                              results_dir, overrides, {name: checkpoints for name in cells})


def finished_cell_runs(table: str, source: str, budget: str, reqs: Mapping[str, list[RunRequest]],
                       rows: Mapping[str, str], results_dir: Path, overrides: list[str] | None,
                       checkpoints: Mapping[str, bool]) -> tuple[dict[str, list[Path]], list[str]]:
    """The finished-ok run dirs of the run requests ``reqs`` (per named cell of table ``source``; ``rows``: each
    name's row label, for messages), nothing trained: diverged runs dropped with a note, records kept without
    weights given them back where ``checkpoints[name]`` (with the notes that say so), missing or failed runs a
    :class:`MissingRunsError` naming the command that trains them (:func:`source_runs`)."""
    out: dict[str, list[Path]] = {}
    notes: list[str] = []
    missing: list[str] = []
    missing_rows: Counter[str] = Counter()  # missing runs per source row: the list shows only the first few
    recovered: list[str] = []
    for name, rs in reqs.items():
        out[name] = []
        for r in rs:
            found = find_record(r)
            if found is None:
                status = r.record.status().get("status", "missing")
                missing.append(f"{rows[name]} / {r.cfg.experiment_name} seed {r.cfg.seed}: {r.run_dir} [{status}]")
                missing_rows[rows[name]] += 1
            elif RunRecord(found).status()["status"] == "ok":
                out[name].append(found)
                if checkpoints[name]:
                    resolve_run(found)  # recovers the weights of a record kept without them
                    if (note := recovered_note(found)) is not None:
                        recovered.append(note)
            else:
                notes.append(f"**Excluded:** {name} seed {r.cfg.seed} diverged ({found}).")
    if missing:
        shown = "\n  ".join(missing[:8]) + (f"\n  ... and {len(missing) - 8} more" if len(missing) > 8 else "")
        shown += "\n  by row: " + "; ".join(f"{row}: {n}" for row, n in missing_rows.items())
        extra = "".join(f" {o}" for o in overrides or [])
        raise MissingRunsError(
            f"table {table} at budget={budget} reads the runs of table {source}; {len(missing)} are missing or "
            f"unfinished:\n  {shown}\nTrain them first:  python -m oscrepro.table {source} --budget {budget}"
            f" --results-dir {shlex.quote(str(results_dir))}{extra}"
            + (" --variant <the variant's name>" if extra else ""))
    if recovered:
        differ = [n for n in recovered if n.startswith("**")]
        notes += differ
        if len(differ) < len(recovered):
            notes.append(f"**Weights retrained:** {len(recovered) - len(differ)} source run(s) had records without "
                         "checkpoints (records are kept in git, weights are not) and were retrained from their "
                         "recorded configs; their retrained metrics match the records.")
    return out, notes


# ------------------------------------------------------------------------------------ a run back in memory
def resolve_run(path: str | Path) -> tuple[Path, Path]:
    """Accept a run directory or a checkpoint file; return ``(run_dir, ckpt_path)``. A finished (ok) run directory
    whose record has no checkpoint (records are kept in git, weights are not) gets it back by
    :func:`oscrepro.tables.recover.recover_checkpoint`."""
    p = Path(path).expanduser()
    if p.is_dir():
        rdir, ckpt = p, p / "checkpoints" / CKPT_NAME
    elif p.is_file():
        ckpt = p
        rdir = p.parent.parent if p.parent.name == "checkpoints" else p.parent
    else:
        raise RunNotUsableError(f"no run directory or checkpoint at {p}")
    if not (rdir / "config.yaml").exists():
        raise RunNotUsableError(f"{rdir} is not a run record (no config.yaml)")
    if not ckpt.exists() and p.is_dir() and RunRecord(rdir).status().get("status") == "ok":
        recover_checkpoint(rdir)  # a finished record kept in git without its weights: retrain them
    if not ckpt.exists():
        raise RunNotUsableError(f"run {rdir} has no checkpoint {ckpt.relative_to(rdir)}: is it a finished run?")
    return rdir, ckpt


@dataclass
class LoadedRun:
    """A run record in memory. ``model`` is in eval mode; ``datamodule`` has been ``setup``."""

    run_dir: Path
    ckpt_path: Path
    cfg: DictConfig
    datamodule: Any
    model: nn.Module
    status: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.cfg.experiment_name} seed {self.cfg.seed} ({self.run_dir.name})"

    def val_batches(self, max_batches: int | None = None) -> Iterator[tuple[Tensor, ...]]:
        """The validation batches in loader order (no shuffling), at most ``max_batches``."""
        for i, batch in enumerate(self.datamodule.val_dataloader()):
            if max_batches is not None and i >= max_batches:
                return
            yield batch


def load_run(path: str | Path, *, require_ok: bool = True, datamodule: Any | None = None,
             data_overrides: Mapping[str, Any] | None = None, map_location: str | torch.device = "cpu"
             ) -> LoadedRun:
    """Rebuild a run's data module and model from its record, exactly as ``train`` builds them (data module first,
    for the model's dims), and load the trained weights strictly.

    ``require_ok``: refuse runs whose status is not ``ok`` (a diverged run's checkpoint is pre-divergence).
    ``datamodule``: reuse a set-up data module (runs evaluated on identical tokens). ``data_overrides``: entries
    of the run's ``data`` config to replace (loader settings such as ``batch_size``).
    """
    rdir, ckpt = resolve_run(path)
    record = RunRecord(rdir)
    status = record.status()
    if require_ok and status.get("status") != "ok":
        raise RunNotUsableError(f"run {rdir} has status {status.get('status', 'missing')!r}, not 'ok'")
    cfg = load_record_config(rdir)  # today's class paths (a class moved since: runs.record)
    if datamodule is None:
        datamodule = instantiate_data(OmegaConf.merge(cfg.data, dict(data_overrides or {})))[0]
        datamodule.setup("fit")
    model = instantiate(cfg.model, **model_dims(datamodule))
    model.load_state_dict(model_state_dict(ckpt, map_location))
    model.to(map_location).eval()
    return LoadedRun(rdir, ckpt, cfg, datamodule, model, status, record.metrics())

