"""The one place that finds and loads run records: compose a run's config, its run dir, the runs of another
table's cells, and a finished run back in memory (config, data module, trained model).

Analysis tables read the runs of other tables (fqo Table 6 reads Table 4's TinyStories models, fsn Tables 2, 4, 5
and Figure 2 read Table 1 and the ladder). They locate a cell's runs exactly as the engine plans them (same
overrides, same run ids) with :func:`source_runs`; a missing run is a :class:`MissingRunsError` naming the command
that trains it, unless ``train_missing`` (set by smoke budgets, where those runs take seconds).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from oscrepro.data.base import model_dims
from oscrepro.data.integrity import instantiate_data
from oscrepro.tables.compose import CKPT_NAME, RunNotUsableError, compose_run, path_override
from oscrepro.tables.recover import recover_checkpoint, recovered_note
from oscrepro.tables.spec import CONF_DIR, SpecError, load_spec
from oscrepro.utils.run_record import RunRecord, _drop, hashed_payload, run_dir

MODEL_PREFIX = "model."  # BaseTask stores the backbone as ``self.model``
# Keys that change where a run trains, not what it computes: a record trained with ``trainer=gpu`` serves a cell.
DEVICE_KEYS = ("trainer.accelerator", "trainer.devices", "trainer.deterministic", "trainer.strategy")


class MissingRunsError(FileNotFoundError):
    """A table needs finished runs (of itself or of another table) that are not in the results directory."""


@dataclass
class RunRequest:
    """One training run a table needs: its overrides (seed included), composed config and record dir."""

    overrides: list[str]
    cfg: DictConfig
    run_dir: Path

    @classmethod
    def compose(cls, overrides: list[str], conf_dir: Path = CONF_DIR) -> RunRequest:
        cfg = compose_run(list(overrides), conf_dir)
        return cls(list(overrides), cfg, run_dir(cfg))

    @property
    def record(self) -> RunRecord:
        return RunRecord(self.run_dir)


# ------------------------------------------------------------------------------------ runs of table cells
def _normalised(cfg: DictConfig) -> str:
    """The run-id payload (:func:`hashed_payload`) without :data:`DEVICE_KEYS`, as comparable text."""
    payload = hashed_payload(cfg)
    for dotted in DEVICE_KEYS:
        _drop(payload, dotted)
    return json.dumps(payload, sort_keys=True, default=str)


def find_record(req: RunRequest) -> Path | None:
    """The finished record of ``req``: its exact run dir, else a device-only variant (latest first)."""
    if req.record.finished():
        return req.run_dir
    if not req.run_dir.parent.is_dir():
        return None
    want = _normalised(req.cfg)
    hits = []
    for cfg_path in req.run_dir.parent.glob("*/config.yaml"):
        if RunRecord(cfg_path.parent).finished():
            if _normalised(OmegaConf.load(cfg_path)) == want:
                hits.append(cfg_path.parent)
    return max(hits, key=lambda p: p.stat().st_mtime) if hits else None


def serve_from_variants(reqs: Iterable[RunRequest]) -> None:
    """Point every request whose exact record is not finished at its finished device-only variant
    (:func:`find_record`), so that training skips it and aggregation and headers read the record that serves the
    cell (a run trained with ``trainer=gpu`` serves the plain table; the header's *Trained on* line names its
    machine). Requests left unfinished keep their own dir, where their training writes."""
    found: dict[Path, Path | None] = {}
    for r in reqs:
        if r.run_dir not in found:
            found[r.run_dir] = find_record(r)
        if (hit := found[r.run_dir]) is not None:
            r.run_dir = hit


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
    return [RunRequest.compose([*base, f"seed={s}"]) for s in spec.seeds_for(budget, labels.index(row))]


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
    if train_missing:
        from oscrepro.train import train

        for rs in reqs.values():
            for r in rs:
                if find_record(r) is None:
                    train(r.cfg)
    out: dict[str, list[Path]] = {}
    notes: list[str] = []
    missing: list[str] = []
    recovered: list[str] = []
    for name, rs in reqs.items():
        out[name] = []
        for r in rs:
            found = find_record(r)
            if found is None:
                status = r.record.status().get("status", "missing")
                missing.append(f"{cells[name][0]} / {r.cfg.experiment_name} seed {r.cfg.seed}: {r.run_dir} [{status}]")
            elif RunRecord(found).status()["status"] == "ok":
                out[name].append(found)
                if checkpoints:
                    resolve_run(found)  # recovers the weights of a record kept without them
                    if (note := recovered_note(found)) is not None:
                        recovered.append(note)
            else:
                notes.append(f"**Excluded:** {name} seed {r.cfg.seed} diverged ({found}).")
    if missing:
        shown = "\n  ".join(missing[:8]) + (f"\n  ... and {len(missing) - 8} more" if len(missing) > 8 else "")
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


def model_state_dict(ckpt_path: Path, map_location: str | torch.device = "cpu") -> dict[str, Tensor]:
    """The backbone's parameters from a Lightning task checkpoint (``model.`` prefix stripped)."""
    ckpt = torch.load(ckpt_path, map_location=map_location, weights_only=True)
    state = ckpt.get("state_dict", ckpt)
    out = {k[len(MODEL_PREFIX):]: v for k, v in state.items() if k.startswith(MODEL_PREFIX)}
    if not out:
        raise RunNotUsableError(f"{ckpt_path}: no '{MODEL_PREFIX}*' entries in the checkpoint's state_dict")
    return out


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
    cfg = OmegaConf.load(rdir / "config.yaml")
    if datamodule is None:
        datamodule = instantiate_data(OmegaConf.merge(cfg.data, dict(data_overrides or {})))[0]
        datamodule.setup("fit")
    model = instantiate(cfg.model, **model_dims(datamodule))
    model.load_state_dict(model_state_dict(ckpt, map_location))
    model.to(map_location).eval()
    return LoadedRun(rdir, ckpt, cfg, datamodule, model, status, record.metrics())

