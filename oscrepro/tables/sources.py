"""The runs an analysis table reads, owned by the engine: declared by the adapter, planned, trained and resolved
here, handed to the adapter as finished run dirs.

An analysis adapter (``kind: analysis`` spec, ``analysis._target_``) that reads trained runs declares them with
:func:`reads_runs`: a small *planning* function, called with the spec's analysis kwargs (and ``budget``,
``results_dir``, the variant's ``overrides``), returns a :class:`RunNeeds` naming

* cells of other tables (:class:`SourceCell`: table, row, column, seeds), planned exactly as that table's build
  plans them (:func:`oscrepro.tables.runs.cell_requests`: same overrides, same run ids), and
* the analysis's own runs (:class:`OwnRuns`: run requests it composes itself, e.g. osciformer's spiral runs).

The engine (:func:`oscrepro.tables.build.build_table`) trains the missing ones in one pool with the table's
launcher and the runs tables' progress line (:func:`train_needs`), unless ``--render-only`` or the spec's
``train_missing: false`` (a costly source table is built on its own first), then resolves them
(:func:`resolve_needs`) and calls the adapter with ``runs=`` a :class:`SourceRuns`: finished-ok run dirs per
label plus the notes (diverged runs excluded, weights recovered) that :func:`oscrepro.tables.runs.source_runs`
always wrote. A run still missing raises :class:`~oscrepro.tables.runs.MissingRunsError` naming the command that
trains it, as before.

Why a planning function rather than a ``sources:`` block in the spec: the specs already name their sources in the
shapes their analyses need (fsn Table 4's reference and families, osciformer Table 10's variants, fqo Table 6's
d_osc rows), and the golden config fixture pins those analysis kwargs; the planner derives the cells from them, so
nothing is said twice and no spec changes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from oscrepro.runs.lookup import RunRequest, find_record
from oscrepro.runs.record import RunRecord
from oscrepro.tables.launch import LaunchConfig, Progress, cores, launch, resolve_launcher
from oscrepro.tables.recover import recover_in_pool
from oscrepro.tables.runs import MissingRunsError, cell_requests, finished_cell_runs

F = TypeVar("F", bound=Callable[..., Any])
PLAN_ATTR = "run_needs"  # the attribute :func:`reads_runs` sets on an adapter: its planning function


@dataclass(frozen=True)
class SourceCell:
    """The runs of cell (``row``, ``column``; default the first run-backed column) of table ``table``.
    ``seeds``: only these (default all of the budget's); ``checkpoints``: the adapter loads their weights (a
    record kept without them gets them back); ``overrides``: a variant's extra overrides (part of the run ids)."""

    table: str
    row: str
    column: str | None = None
    seeds: tuple[int, ...] | None = None
    checkpoints: bool = True
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class OwnRuns:
    """Runs an analysis composes itself (not another table's cells): ``requests`` per label, in the order the
    adapter reads them; ``command`` trains them outside the build (the message of a missing run); ``what`` names
    them in messages; ``excluded`` the note of a diverged run, formatted with ``label``, ``seed`` and ``run_dir``."""

    requests: Mapping[str, list[RunRequest]]
    command: str = ""
    what: str = "runs"
    excluded: str = "**Excluded:** {label} seed {seed} diverged ({run_dir})."
    optional: bool = False  # the adapter reads each request's outcome itself (a missing run is a flagged cell)
    context: Any = None  # what the planner composed alongside (the adapter reads it: SourceRuns.context)
    weights: tuple[Path, ...] = ()  # source runs whose weights these runs load when trained (recovered first)


@dataclass
class RunNeeds:
    """What an analysis reads: cells of other tables per label (one source table per build: the message of a
    missing run names the command that builds it) and its own runs."""

    table: str
    cells: dict[str, SourceCell] = field(default_factory=dict)
    own: OwnRuns | None = None
    # runs composed from the finished cells (coupledqk Table 7 fine-tunes Table 1's LMs): called with them once
    # they are resolved; its runs are trained unless --render-only (the spec's train_missing is about the cells)
    then: Callable[[SourceRuns], OwnRuns] | None = None


@dataclass
class SourceRuns:
    """What the adapter gets: finished-ok run dirs per label (cells and own runs) and the notes on them."""

    runs: dict[str, list[Path]]
    notes: list[str]
    context: Any = None  # OwnRuns.context of the runs' planner

    def __getitem__(self, label: str) -> list[Path]:
        return self.runs[label]


def reads_runs(plan: Callable[..., RunNeeds]) -> Callable[[F], F]:
    """Declare the runs an analysis adapter reads: ``plan(budget=, results_dir=, **analysis kwargs)`` returns
    its :class:`RunNeeds`; the engine trains and resolves them and passes ``runs=`` (:class:`SourceRuns`)."""

    def mark(fn: F) -> F:
        setattr(fn, PLAN_ATTR, plan)
        return fn

    return mark


def call_adapter(fn: Callable[..., Any], key: str, budget: str, results_dir: Path, out_dir: Path,
                 pool: str | LaunchConfig = "inprocess", workers: int | None = None, train_missing: bool = True,
                 render_only: bool = False, **kwargs: Any) -> Any:
    """Call an analysis adapter that declares its runs (:func:`reads_runs`) as the engine does: plan its runs with
    ``kwargs``, train the missing ones with ``pool`` (unless ``render_only``; the cells only if ``train_missing``),
    resolve them and call ``fn(out_dir=, budget=, results_dir=, runs=, **kwargs)``. ``kwargs["overrides"]`` (a
    variant's) goes to the planner, and to the adapter only where it takes it."""
    plan = getattr(fn, PLAN_ATTR)
    needs = plan(budget=budget, results_dir=results_dir, **kwargs)
    runs = gather_runs(key, budget, needs, results_dir, resolve_launcher(pool), workers, train_missing, render_only)
    if "overrides" not in inspect.signature(fn).parameters:  # the planner's alone (the run ids of the sources)
        kwargs.pop("overrides", None)
    return fn(out_dir=out_dir, budget=budget, results_dir=results_dir, runs=runs, **kwargs)


def planned_requests(needs: RunNeeds, budget: str, results_dir: Path) -> dict[str, list[RunRequest]]:
    """Every run request of ``needs`` per label (a cell's seeds filtered as it asks)."""
    out: dict[str, list[RunRequest]] = {}
    for label, cell in needs.cells.items():
        out[label] = [r for r in cell_requests(cell.table, budget, cell.row, cell.column, results_dir,
                                               list(cell.overrides))
                      if cell.seeds is None or int(r.cfg.seed) in cell.seeds]
    if needs.own is not None:
        out.update({label: list(rs) for label, rs in needs.own.requests.items()})
    return out


def gather_runs(key: str, budget: str, needs: RunNeeds, results_dir: Path, pool: LaunchConfig,
                workers: int | None, train_cells: bool, render_only: bool) -> SourceRuns:
    """Plan, train (``train_cells``: the cells and own runs, unless ``render_only``) and resolve the runs of
    ``needs``, then those its ``then`` composes from them: what the adapter gets as ``runs``."""
    reqs = planned_requests(needs, budget, results_dir)
    train_needs(key, budget, reqs, pool, workers, train_cells and not render_only,
                needs.own.what if needs.own is not None and not needs.cells else "source runs")
    # weights the adapter loads: recovered in the build's pool, not one after another while resolving
    recover_in_pool((found for label, cell in needs.cells.items() if cell.checkpoints
                     for r in reqs[label] if (found := find_record(r)) is not None),
                    pool.kind, workers or cores(), key)
    runs = resolve_needs(needs, budget, results_dir, reqs)
    if needs.then is None:
        return runs
    stage = RunNeeds(needs.table, own=needs.then(runs))
    stage_reqs = planned_requests(stage, budget, results_dir)
    if not render_only and stage.own.weights and any(find_record(r) is None for rs in stage_reqs.values()
                                                     for r in rs):
        recover_in_pool(stage.own.weights, pool.kind, workers or cores(), key)  # the runs to train load them
    train_needs(key, budget, stage_reqs, pool, workers, not render_only, stage.own.what)
    more = resolve_needs(stage, budget, results_dir, stage_reqs)
    return SourceRuns({**runs.runs, **more.runs}, [*runs.notes, *more.notes], stage.own.context)


def train_needs(key: str, budget: str, reqs: Mapping[str, list[RunRequest]], pool: LaunchConfig,
                workers: int | None, train: bool, what: str = "source runs") -> None:
    """Train the missing runs of ``reqs`` (each run once) with ``pool`` and the runs tables' progress line, or,
    with ``train`` False (``--render-only``, or the spec's ``train_missing: false``), say how many are missing."""
    unique = list({r.run_dir: r for rs in reqs.values() for r in rs}.values())
    missing = [r for r in unique if find_record(r) is None]
    if not train:
        if missing:
            print(f"[table {key}] budget={budget}: {len(unique)} {what}, {len(missing)} missing (not trained)",
                  flush=True)
        return
    print(f"[table {key}] budget={budget}: {len(unique)} {what}, {len(missing)} to train ({pool})", flush=True)
    if missing:
        launch(missing, pool, Progress(key, len(unique), len(unique) - len(missing)), max_workers=workers)


def resolve_needs(needs: RunNeeds, budget: str, results_dir: Path, reqs: Mapping[str, list[RunRequest]]
                  ) -> SourceRuns:
    """The finished runs of ``needs`` (after :func:`train_needs`): cells as
    :func:`oscrepro.tables.runs.source_runs` resolves them (diverged excluded with a note, weights recovered),
    own runs in request order with their diverged ones left out; a missing run raises
    :class:`~oscrepro.tables.runs.MissingRunsError` naming the command that trains it."""
    runs: dict[str, list[Path]] = {}
    notes: list[str] = []
    if needs.cells:
        sources = {c.table for c in needs.cells.values()}
        # one source table: one resolution (one message listing every missing run); several (osciformer Table
        # 10's variants): one per label, in order, each with its own message and notes
        groups = [list(needs.cells)] if len(sources) == 1 else [[k] for k in needs.cells]
        for labels in groups:
            found, more = finished_cell_runs(needs.table, needs.cells[labels[0]].table, budget,
                                             {k: reqs[k] for k in labels}, {k: needs.cells[k].row for k in labels},
                                             results_dir, list(needs.cells[labels[0]].overrides),
                                             {k: needs.cells[k].checkpoints for k in labels})
            runs.update(found)
            notes += more
    if needs.own is not None and needs.own.optional:  # the adapter reads each request's outcome
        return SourceRuns(runs, notes, needs.own.context)
    if needs.own is not None:
        own = needs.own
        flat = [(label, r) for label, rs in own.requests.items() for r in rs]
        missing = [r for _, r in flat if find_record(r) is None]
        if missing:
            raise MissingRunsError(
                f"table {needs.table} at budget={budget} reads {len(missing)} {own.what} that are missing or "
                f"unfinished, e.g. {missing[0].run_dir}.\nTrain them first:\n{own.command}")
        for label, r in flat:
            found = find_record(r)
            runs.setdefault(label, [])
            if RunRecord(found).status()["status"] == "ok":
                runs[label].append(found)
            else:
                notes.append(own.excluded.format(label=label, seed=r.cfg.seed, run_dir=r.run_dir))
    return SourceRuns(runs, notes, needs.own.context if needs.own is not None else None)
