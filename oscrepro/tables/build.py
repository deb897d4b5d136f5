"""The table engine: spec -> plan -> run the missing runs -> aggregate -> render (:func:`build_table`).

Everything a table build does lives in :mod:`oscrepro.tables`; this module is its entry point, called by the CLI
(:mod:`oscrepro.table`, which also refreshes the table's claims), the leaderboard and the claims planner. Finished
runs (status ok or diverged) are never redone, so a killed build resumes where it stopped.
"""

from __future__ import annotations

import csv
import inspect
import logging
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from hydra.utils import get_method

from oscrepro.runs.compose import path_override
from oscrepro.runs.lookup import serve_from_variants
from oscrepro.runs.record import results_root, unwritable_dir
from oscrepro.tables.aggregate import aggregate, effective_status
from oscrepro.tables.launch import (
    LaunchConfig,
    LauncherUnavailableError,
    Progress,
    launch,
    resolve_launcher,
    split_launcher_overrides,
)
from oscrepro.tables.match import with_matched_rows
from oscrepro.tables.plan import plan, unique_runs
from oscrepro.tables.render import render_analysis_table, render_runs_table
from oscrepro.tables.sources import PLAN_ATTR, RunNeeds, call_adapter
from oscrepro.tables.spec import (
    BUDGETS,
    CELL_SEEDS_ARG,
    SEEDS_ARG,
    TRIAL_CORE_S,
    TRIALS_ARG,
    SpecError,
    TableSpec,
    check_extra_overrides,
    load_spec,
)
from oscrepro.utils.provenance import git_commit

log = logging.getLogger("oscrepro.table")


class ResultsDirError(OSError):
    """The results dir cannot be created or written; raised before anything is written."""


def check_results_dir(results: Path) -> None:
    """Refuse a results dir that this process cannot create or write into, before anything is written
    (:func:`oscrepro.runs.record.unwritable_dir`)."""
    why = unwritable_dir(results)
    if why is not None:
        raise ResultsDirError(f"results dir {why}; pass --results-dir <a folder you can write>")


def warn_if_dirty(key: str) -> None:
    """Say loudly (stderr) that a table was built from uncommitted code: its header names ``<sha>+dirty``, which no
    one can check out, so a table meant to be committed is rebuilt after the commit (``make claims`` lists every
    committed table whose header names such a commit)."""
    commit = git_commit()
    if commit.endswith("+dirty"):
        print(f"[table {key}] WARNING: built from uncommitted code (commit {commit}): its header cannot be traced "
              f"to a commit; commit the code, then rebuild this table before committing it", file=sys.stderr,
              flush=True)


def _overrides_note(what: str, extra: list[str], variant: str | None) -> str:
    """The header line naming the extra overrides a build applied to every (source) run."""
    label = f" (variant `{variant}`)" if variant else ""
    return f"**Overrides of every {what}{label}:** `{' '.join(extra)}`"


def matched_widths(spec: TableSpec, budget: str, extra: list[str]) -> tuple[TableSpec, list[str]]:
    """The spec with each row's knob set by its ``match`` (parameter counts within the tolerance of the reference
    row's; ``oscrepro.tables.match``) and the header notes that say so; the spec unchanged without ``match``."""
    notes = []
    if spec.budget_map.get(budget):
        notes.append(f"**Runs at budget `{spec.budget_map[budget]}`** when this table is built at `{budget}` "
                     f"(`budget_map` in {spec.path.name})")
    if not spec.match:
        return spec, notes
    spec, matched = with_matched_rows(spec, budget, extra)
    knob = spec.match["knob"]
    notes.append(f"**Matched parameters:** `{knob}` set per row so that each model is within "
                 f"{100 * float(spec.match.get('tolerance', 0.01)):.0f} % of the `{spec.match['reference']}` "
                 f"model's {matched[0].target:,} parameters (counted on the built model): "
                 + "; ".join(f"{m.attention} {knob.split('.')[-1]}={m.d_ff} ({m.params:,}, {100 * m.rel_error:+.2f} %)"
                             for m in matched))
    return spec, notes


def planned_cells(spec: TableSpec, budget: str, results: Path, user_extra: list[str]
                  ) -> tuple[TableSpec, dict, list[str]]:
    """(spec with matched widths, its cells' run requests, the width notes): what a build trains and aggregates,
    with a finished device-only variant serving its cell. One place, so that a recomputation from the records
    (:func:`recompute_mismatches`) reads exactly the runs a build reads."""
    spec, width_notes = matched_widths(spec, budget, user_extra)
    # one sweep-level progress line instead of a progress bar per run (the bar does not change the run id)
    extra = [path_override("paths.results_dir", results), "trainer.enable_progress_bar=false", *user_extra]
    cells = plan(spec, budget, extra)
    serve_from_variants(r for reqs in cells.values() for r in reqs)  # a finished device-only variant serves its cell
    return spec, cells, width_notes


def recompute_mismatches(key: str, budget: str, results: Path, rel_tol: float = 1e-9) -> list[str]:
    """Every cell of the committed runs table ``key`` at ``budget`` whose mean, std or n differs from what its run
    records give now (the engine's own planning and aggregation, nothing trained): ``row / column: csv ... vs
    records ...``. Empty when the committed table is recomputable from the committed records."""
    spec = load_spec(key)
    out_dir = results / spec.paper if budget == "paper" else results / spec.paper / budget
    csv_path = out_dir / f"{spec.key.split('/')[-1]}.csv"
    with open(csv_path, newline="") as fh:
        committed = {(r["row"], r["column"]): r for r in csv.DictReader(ln for ln in fh if not ln.startswith("#"))}
    spec, cells, _ = planned_cells(spec, budget, results, [])
    out = []
    for (ri, col), cell in aggregate(spec, cells).items():
        row = committed.get((spec.rows[ri].label, col))
        if row is None:
            out.append(f"{spec.rows[ri].label} / {col}: not in {csv_path}")
            continue
        for name, ours, theirs in (("mean", cell.mean, row["ours_mean"]), ("std", cell.std, row["ours_std"]),
                                   ("n", float(cell.n), row["n"])):
            theirs = float(theirs) if theirs not in ("", None) else math.nan
            same = (math.isnan(ours) and math.isnan(theirs)) or math.isclose(ours, theirs, rel_tol=rel_tol,
                                                                                 abs_tol=1e-12)
            if not same:
                out.append(f"{spec.rows[ri].label} / {col}: {name} {theirs!r} in the csv, {ours!r} from the records "
                           f"(n = {cell.n}, missing {cell.n_missing})")
    return out


ENGINE_KWARGS = ("train_missing", "launcher", "workers")  # analysis keys the engine reads, not the adapter


def analysis_kwargs(spec: TableSpec, budget: str) -> dict[str, Any]:
    """The analysis adapter's keyword arguments at ``budget``: the spec's ``analysis`` block with the budget's
    entries of ``analysis.budgets`` over it, and the seed count the claims planner decided for the table's own seed
    runs (:meth:`TableSpec.analysis_seeds`; per cell: :meth:`TableSpec.analysis_cell_seeds`) and of its timed trials
    (:meth:`TableSpec.analysis_trials`) over that."""
    kwargs = {k: v for k, v in spec.analysis.items()
              if k not in ("_target_", "budgets", SEEDS_ARG, CELL_SEEDS_ARG, TRIALS_ARG, TRIAL_CORE_S)}
    kwargs.update((spec.analysis.get("budgets") or {}).get(budget, {}))
    if spec.analysis.get(SEEDS_ARG):
        kwargs[str(spec.analysis[SEEDS_ARG])] = spec.analysis_seeds(budget)
    if spec.analysis.get(CELL_SEEDS_ARG):  # per-cell raises of its own seeds (a claim on one column pays for it)
        kwargs[str(spec.analysis[CELL_SEEDS_ARG])] = spec.analysis_cell_seeds(budget)
    if spec.analysis.get(TRIALS_ARG):
        kwargs[str(spec.analysis[TRIALS_ARG])] = spec.analysis_trials(budget)
    return kwargs


def analysis_needs(spec: TableSpec, budget: str, results: Path) -> RunNeeds | None:
    """The runs an analysis adapter that declares them (:func:`oscrepro.tables.sources.reads_runs`) reads at
    ``budget``: its planning function called as a build calls it (:func:`analysis_kwargs`, the engine's own keys
    aside); None when the adapter declares none. What the claims planner reads to find the source rows and the
    weights behind an analysis claim."""
    planner = getattr(get_method(spec.analysis["_target_"]), PLAN_ATTR, None)
    if planner is None:
        return None
    kwargs = {k: v for k, v in analysis_kwargs(spec, budget).items() if k not in ENGINE_KWARGS}
    return planner(budget=budget, results_dir=results, **kwargs)


def run_analysis(spec: TableSpec, budget: str, pool: LaunchConfig, extra: list[str], results: Path, out_dir: Path,
                 workers: int | None, render_only: bool) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """Compute an analysis table's ``(columns, rows, notes)``.

    An adapter that declares the runs it reads (:func:`oscrepro.tables.sources.reads_runs`) gets them from here:
    planned, the missing ones trained with ``pool`` (the spec's ``launcher`` where the build chose none) unless
    ``render_only`` or the spec's ``train_missing: false``, and passed as ``runs=``; one that declares none reads
    no runs (:func:`_run_free_call`)."""
    fn = get_method(spec.analysis["_target_"])
    kwargs = analysis_kwargs(spec, budget)
    plan_runs = getattr(fn, PLAN_ATTR, None)
    if plan_runs is None:
        return _run_free_call(spec, fn, kwargs, budget, extra, results, out_dir)
    train_missing = bool(kwargs.pop("train_missing", True))  # the ENGINE_KWARGS
    spec_launcher = kwargs.pop("launcher", None)
    spec_workers = kwargs.pop("workers", None)
    workers = workers if workers is not None else spec_workers
    if spec_launcher is not None and pool.name == "inprocess" and not pool.overrides:  # the build chose none
        pool = resolve_launcher(spec_launcher)
    if extra:  # an analysis of a variant: its source runs are planned with the same overrides (same run ids)
        if "overrides" not in inspect.signature(plan_runs).parameters:
            raise SpecError(f"table {spec.key}: its analysis ({spec.analysis['_target_']}) reads fixed runs and "
                            f"takes no overrides; got {' '.join(extra)}")
        kwargs["overrides"] = list(extra)
    return call_adapter(fn, spec.key, budget, results, out_dir, pool, workers, train_missing, render_only, **kwargs)


def _run_free_call(spec: TableSpec, fn: Any, kwargs: dict[str, Any], budget: str, extra: list[str], results: Path,
                   out_dir: Path) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """An adapter that reads no runs (a Monte Carlo check, a benchmark, a parameter count): called with its
    kwargs; a variant's overrides only where it takes them."""
    if extra:
        if "overrides" not in inspect.signature(fn).parameters:
            raise SpecError(f"table {spec.key}: its analysis ({spec.analysis['_target_']}) reads fixed runs and "
                            f"takes no overrides; got {' '.join(extra)}")
        kwargs["overrides"] = list(extra)
    return fn(out_dir=out_dir, budget=budget, results_dir=results, **kwargs)


def build_table(key: str, budget: str = "cpu", launcher: str | LaunchConfig = "inprocess",
                extra: list[str] | None = None, results_dir: str | Path | None = None, workers: int | None = None,
                variant: str | None = None, render_only: bool = False, detach: bool = False,
                collect: bool = False) -> Path | None:
    """Build one table and return the path of its markdown rendering.

    ``launcher``: a pool or Hydra launcher config (oscrepro.tables.launch); ``hydra.launcher.<key>=<value>`` in
    ``extra`` configure it. ``detach``: submit the missing runs as one SLURM array and return None at once;
    ``collect``: train nothing, record the SLURM state of every ended job, and render (oscrepro.tables.slurm).

    ``render_only``: train nothing; render from the finished records (a build still in progress, or one split over
    sessions), every cell flagging its missing runs.

    ``variant``: a name for a build whose ``extra`` overrides change the runs (e.g. ``bf16`` with
    ``trainer.precision=bf16-mixed``); it renders into ``<paper>[/<budget>]/<variant>/`` beside the plain table,
    and the header lists the overrides.
    """
    if budget not in BUDGETS:
        raise ValueError(f"budget={budget!r}; valid: {', '.join(BUDGETS)}")
    extra, launcher_overrides = split_launcher_overrides(list(extra or []))
    pool = resolve_launcher(launcher, launcher_overrides)
    spec: TableSpec = load_spec(key)
    check_extra_overrides(spec, list(extra or []))  # seed=..., or a key a row sets: refused, never replaced
    results = results_root(results_dir)
    check_results_dir(results)
    # paper-budget artifacts live in results/<paper>/, scaled-down ones in results/<paper>/<budget>/, so a cpu
    # build can never overwrite a paper-budget table
    out_dir = results / spec.paper if budget == "paper" else results / spec.paper / budget
    if variant:
        out_dir = out_dir / variant
    # said once the overrides are known to compose (a refused build prints its one line alone)
    over_plain = (not variant and any(not o.startswith(("paths.", "trainer.enable_progress_bar")) for o in extra or [])
                  and f"extra overrides {extra} without --variant: the table renders over the plain one")
    if spec.kind == "analysis":
        if over_plain:
            log.warning(over_plain)
        if detach or collect:
            raise SpecError(f"table {key}: an analysis table's runs are trained by its build; --detach and "
                            f"--collect are for runs tables")
        columns, rows, notes = run_analysis(spec, budget, pool, list(extra or []), results, out_dir, workers,
                                            render_only)
        if extra:
            notes = [_overrides_note("source run", extra, variant), *notes]
        path = render_analysis_table(spec, budget, columns, rows, out_dir, notes)
        print(f"[table {key}] wrote {path} and {path.with_suffix('.csv')}", flush=True)
        warn_if_dirty(key)
        return path

    user_extra = list(extra or [])
    spec, cells, width_notes = planned_cells(spec, budget, results, user_extra)
    if over_plain:
        log.warning(over_plain)
    runs = unique_runs(cells)
    missing = [r for r in runs if not r.record.finished()]
    if pool.kind in ("inprocess", "joblib") and any("ddp" in str(r.cfg.trainer.get("strategy", "")) for r in missing):
        # Lightning's DDP launcher re-runs this process's command line once per extra rank: here, the table build
        raise LauncherUnavailableError("trainer=ddp runs start one process per device by re-running the command "
                                       "line; train them with `python -m oscrepro.train ... trainer=ddp`, then build "
                                       "the table, which reads their records")
    if collect:  # the SLURM state of each unfinished run's job; ended failures recorded in the runs
        from oscrepro.tables.slurm import collect as collect_jobs

        collect_jobs(key, runs)
    if render_only or collect:
        print(f"[table {key}] budget={budget}: {len(runs)} runs, {len(missing)} missing (render only: not trained)",
              flush=True)
    else:
        progress = Progress(key, len(runs), len(runs) - len(missing))
        print(f"[table {key}] budget={budget}: {len(runs)} runs, {len(missing)} to train ({pool})", flush=True)
        launch(missing, pool, progress, max_workers=workers, detach=detach)
        if detach:
            return None

    run_statuses = [r.record.status() for r in runs]  # read each status.json once
    # an ok record with a non-finite final metric counts as diverged (oscrepro.tables.aggregate), here too
    counted = [effective_status(s, r.record.metrics() if s.get("status") == "ok" else {})
               for r, s in zip(runs, run_statuses, strict=True)]
    statuses = Counter(counted)
    data = sorted({f"{s.get('data_source')} (fingerprint {s.get('data_fingerprint')})"
                   for s in run_statuses if s.get("data_source")})
    agg = aggregate(spec, cells)
    # records outlive sessions (they are kept in git), so one table's runs may come from several machines
    devices = Counter(s.get("device", "unknown") for s, c in zip(run_statuses, counted, strict=True) if c == "ok")
    notes: list[str] = [("**Trained on:** " + "; ".join(f"{d} ({n} runs)" for d, n in devices.most_common())
                         + ("; mixed machines: times compare only within one" if len(devices) > 1 else ""))
                        ] if devices else []
    if spec.post:
        post = get_method(spec.post["_target_"])
        notes += post(spec=spec, cells=agg, out_dir=out_dir, budget=budget, results_dir=results,
                      **{k: v for k, v in spec.post.items() if k != "_target_"})
    notes = [*width_notes, *notes]
    if user_extra:
        notes = [_overrides_note("run", user_extra, variant), *notes]
    path = render_runs_table(spec, budget, agg, out_dir, data, dict(statuses), notes)
    print(f"[table {key}] wrote {path} and {path.with_suffix('.csv')}", flush=True)
    warn_if_dirty(key)
    return path


def incomplete_cells(csv_path: Path) -> list[str]:
    """``row / column`` of each cell of a rendered runs table with failed or missing runs (none for analyses)."""
    if not csv_path.exists():
        return []
    with open(csv_path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [f"{r['row']} / {r['column']}" for r in rows
            if int(r.get("n_failed") or 0) + int(r.get("n_missing") or 0) > 0]
