"""Build a paper table: spec -> plan -> run the missing runs -> aggregate -> render.

    python -m oscrepro.table fqo/table2 --budget cpu                    # in-process, one run after another
    python -m oscrepro.table fqo/table2 --budget paper --launcher joblib  # one pool of worker processes (1/core)
    python -m oscrepro.table fqo/table2 --budget cpu trainer=gpu          # extra Hydra overrides for every run
    python -m oscrepro.table fqo/table2 --launcher slurm_cpu hydra.launcher.timeout_min=30 --detach  # SLURM array
    python -m oscrepro.table fqo/table2 --collect                          # later: render what the jobs finished

Finished runs (status ok or diverged) are never redone, so a killed build resumes where it stopped.

Bad input is refused before anything is written, in one line on stderr, exit status 2: an unknown table, a spec
that does not load, an override Hydra cannot compose or a value out of range (``model.d_model=-4``), an override of
what the spec sets (``seed=-3``: :func:`oscrepro.tables.spec.check_extra_overrides`), a results dir that cannot be
written. Any path works as ``--results-dir`` (spaces, non-ASCII letters: it is passed to Hydra quoted).
"""

from __future__ import annotations

import argparse
import csv
import inspect
import logging
import math
import os
import shlex
import sys
from collections import Counter
from pathlib import Path

from hydra.errors import HydraException
from hydra.utils import get_method

from oscrepro.tables.aggregate import aggregate, effective_status
from oscrepro.tables.compose import compose_run, path_override
from oscrepro.tables.launch import (
    LaunchConfig,
    LauncherUnavailableError,
    Progress,
    launch,
    launcher_names,
    resolve_launcher,
    split_launcher_overrides,
)
from oscrepro.tables.plan import plan, unique_runs
from oscrepro.tables.render import render_analysis_table, render_runs_table
from oscrepro.tables.runs import MissingRunsError, serve_from_variants
from oscrepro.tables.spec import (
    BUDGETS,
    SpecError,
    TableSpec,
    available_tables,
    check_extra_overrides,
    config_groups,
    load_spec,
)
from oscrepro.utils.provenance import git_commit
from oscrepro.utils.quiet import quiet_third_party
from oscrepro.utils.run_record import unwritable_dir
from oscrepro.utils.suggest import unknown_key_message
from oscrepro.utils.validate import ConfigError

log = logging.getLogger("oscrepro.table")
BAD_INPUT_EXIT = 2  # config, spec and results-dir errors (argparse's own usage errors exit 2 too)


class ResultsDirError(OSError):
    """The results dir cannot be created or written; raised before anything is written."""


def check_results_dir(results: Path) -> None:
    """Refuse a results dir that this process cannot create or write into, before anything is written
    (:func:`oscrepro.utils.run_record.unwritable_dir`)."""
    why = unwritable_dir(results)
    if why is not None:
        raise ResultsDirError(f"results dir {why}; pass --results-dir <a folder you can write>")


def one_line(text: str) -> str:
    """A multi-line message (a list of config problems, Hydra's options) as one line: a line ending in ``:`` runs
    on into the next, other lines are joined by ``; ``."""
    out = ""
    for line in (ln.strip() for ln in str(text).splitlines()):
        if line:
            out += ("" if not out else " " if out.endswith(":") else "; ") + line
    return out


def refresh_claims(key: str, budget: str, results: Path, variant: str | None = None) -> None:
    """Re-check the claims of the table just rendered that are judged at ``budget`` and write its claims section,
    as ``make claims`` does (which also rewrites results/CLAIMS.md; a variant's verdicts stay in its own .md)."""
    from oscrepro.claims.scoreboard import check_table, write_table_sections

    write_table_sections(check_table(key, budget, results, variant=variant), results / "CLAIMS.md")


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
    row's; ``oscrepro.leaderboard.match``) and the header notes that say so; the spec unchanged without ``match``."""
    notes = []
    if spec.budget_map.get(budget):
        notes.append(f"**Runs at budget `{spec.budget_map[budget]}`** when this table is built at `{budget}` "
                     f"(`budget_map` in {spec.path.name})")
    if not spec.match:
        return spec, notes
    from oscrepro.leaderboard.match import with_matched_rows

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
    results = Path(results_dir or os.environ.get("OSCREPRO_RESULTS_DIR", "results"))
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
        fn = get_method(spec.analysis["_target_"])
        kwargs = {k: v for k, v in spec.analysis.items() if k not in ("_target_", "budgets")}
        kwargs.update((spec.analysis.get("budgets") or {}).get(budget, {}))
        if "launcher" in kwargs and (pool.name != "inprocess" or pool.overrides):  # the one chosen here wins
            kwargs["launcher"] = pool
        if detach or collect:
            raise SpecError(f"table {key}: an analysis table trains inside its adapter; --detach and --collect "
                            f"are for runs tables")
        if extra:  # an analysis of a variant: its source runs are planned with the same overrides (same run ids)
            if "overrides" not in inspect.signature(fn).parameters:
                raise SpecError(f"table {key}: its analysis ({spec.analysis['_target_']}) reads fixed runs and takes "
                                f"no overrides; got {' '.join(extra)}")
            kwargs["overrides"] = list(extra)
        columns, rows, notes = fn(out_dir=out_dir, budget=budget, results_dir=results, **kwargs)
        if extra:
            notes = [_overrides_note("source run", extra, variant), *notes]
        path = render_analysis_table(spec, budget, columns, rows, out_dir, notes)
        refresh_claims(key, budget, results, variant)
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
    refresh_claims(key, budget, results, variant)
    print(f"[table {key}] wrote {path} and {path.with_suffix('.csv')}", flush=True)
    warn_if_dirty(key)
    return path


def positive_int(text: str) -> int:
    """argparse type of ``--workers``: an integer >= 1 (``--workers 0`` used to be accepted and ignored)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} < 1: a build needs at least one worker")
    return value


def main(argv: list[str] | None = None) -> None:
    """The CLI (module docstring): build one table; bad input is one line on stderr and exit status 2."""
    parser = argparse.ArgumentParser(prog="python -m oscrepro.table", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", help=f"<paper>/<table>; available: {', '.join(available_tables())}")
    parser.add_argument("--budget", default="cpu", choices=BUDGETS)
    parser.add_argument("--launcher", default="inprocess", choices=launcher_names(),
                        help="a pool or a Hydra launcher config (conf/hydra/launcher/), configured by "
                             "hydra.launcher.<key>=<value> overrides")
    parser.add_argument("--results-dir", default=None)
    parser.add_argument("--variant", default=None,
                        help="render into <paper>[/<budget>]/<variant>/ (for builds whose overrides change the runs)")
    parser.add_argument("--workers", type=positive_int, default=None,
                        help="joblib: at most this many worker processes (default: one per core)")
    parser.add_argument("--render-only", action="store_true",
                        help="train nothing: render from the finished run records, flagging missing runs")
    parser.add_argument("--detach", action="store_true",
                        help="SLURM launchers: submit the missing runs as one array and exit (then --collect)")
    parser.add_argument("--collect", action="store_true",
                        help="train nothing: render from finished runs, saying which SLURM jobs are queued, "
                             "running or failed (and how)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides applied to every run")
    args = parser.parse_intermixed_args(argv)  # overrides may come before or after the options
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    quiet_third_party()  # analysis tables load and run models without train(), which installs the filters for runs
    try:
        run_overrides = split_launcher_overrides(args.overrides)[0]  # hydra.launcher.*: checked by the launcher
        if run_overrides:  # a misspelled key: one line with the closest valid key, before anything is planned
            spec = load_spec(args.table)
            if spec.kind != "analysis" and spec.rows and spec.columns:
                first = spec.cell_overrides(0, spec.columns[0].name, args.budget, list(run_overrides))
                message = unknown_key_message(first, compose_run, config_groups())
                if message is not None:
                    _refuse(args.table, message)
        path = build_table(args.table, args.budget, args.launcher, args.overrides, args.results_dir, args.workers,
                           args.variant, args.render_only, args.detach, args.collect)
    except LauncherUnavailableError as err:
        raise SystemExit(f"[table {args.table}] {err}") from None
    except MissingRunsError as err:  # another table's runs to train first: its message ends with the command
        print(f"[table {args.table}] {err}", file=sys.stderr, flush=True)
        raise SystemExit(BAD_INPUT_EXIT) from None
    except (SpecError, ConfigError, HydraException, OSError) as err:  # OSError: the results dir (ResultsDirError)
        # or a write that failed in it (disk full, permissions changed during the build)
        _refuse(args.table, str(err))
    if path is None:  # detached: the jobs train on; the same command with --collect renders what they finished
        argv = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--detach"]
        print(f"[table {args.table}] collect with: python -m oscrepro.table {shlex.join([*argv, '--collect'])}",
              flush=True)
        return
    incomplete = incomplete_cells(path.with_suffix(".csv"))
    if incomplete:  # the table is written (its cells say why), but the build did not give every number
        raise SystemExit(f"[table {args.table}] incomplete: {len(incomplete)} cell(s) with failed or missing runs, "
                         f"e.g. {incomplete[0]}; see {path} and each run's status.json")


def _refuse(table: str, message: str) -> None:
    """Print ``message`` as one line on stderr and exit with :data:`BAD_INPUT_EXIT`."""
    for prefix in (f"table {table}: ", f"{table}: "):  # the message names the table already: once is enough
        message = message[len(prefix):] if message.startswith(prefix) else message
    print(f"[table {table}] {one_line(message)}", file=sys.stderr, flush=True)
    raise SystemExit(BAD_INPUT_EXIT)


def incomplete_cells(csv_path: Path) -> list[str]:
    """``row / column`` of each cell of a rendered runs table with failed or missing runs (none for analyses)."""
    if not csv_path.exists():
        return []
    with open(csv_path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [f"{r['row']} / {r['column']}" for r in rows
            if int(r.get("n_failed") or 0) + int(r.get("n_missing") or 0) > 0]


if __name__ == "__main__":
    main()
