"""The table CLI: build a paper table with the engine (:mod:`oscrepro.tables.build`: spec -> plan -> run the missing
runs -> aggregate -> render), then re-check the claims judged on it.

    python -m oscrepro.table fqo/table2 --budget cpu                    # in-process, one run after another
    python -m oscrepro.table fqo/table2 --budget paper --launcher joblib  # one pool of worker processes (1/core)
    python -m oscrepro.table fqo/table2 --budget cpu trainer=gpu          # extra Hydra overrides for every run
    python -m oscrepro.table fqo/table2 --budget cpu --explain            # what budget=cpu changes, and where
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
import logging
import shlex
import sys
from pathlib import Path

from hydra.errors import HydraException

from oscrepro.claims.scoreboard import refresh_table_claims
from oscrepro.runs.compose import compose_run, config_groups
from oscrepro.runs.record import results_root
from oscrepro.runs.validate import ConfigError
from oscrepro.tables import build as engine
from oscrepro.tables.explain import explain_budget
from oscrepro.tables.launch import LaunchConfig, LauncherUnavailableError, launcher_names, split_launcher_overrides
from oscrepro.tables.runs import MissingRunsError
from oscrepro.tables.spec import BUDGETS, SpecError, available_tables, load_spec
from oscrepro.utils.quiet import quiet_third_party
from oscrepro.utils.suggest import unknown_key_message

log = logging.getLogger("oscrepro.table")
BAD_INPUT_EXIT = 2  # config, spec and results-dir errors (argparse's own usage errors exit 2 too)


def build_table(key: str, budget: str = "cpu", launcher: str | LaunchConfig = "inprocess",
                extra: list[str] | None = None, results_dir: str | Path | None = None, workers: int | None = None,
                variant: str | None = None, render_only: bool = False, detach: bool = False,
                collect: bool = False) -> Path | None:
    """Build one table (:func:`oscrepro.tables.build.build_table`: same arguments), then re-check the claims judged
    on it and write its claims section, as ``make claims`` does; return the path of its markdown rendering (None
    when ``detach`` submitted the runs and returned at once: nothing is rendered yet)."""
    path = engine.build_table(key, budget, launcher, extra, results_dir, workers, variant, render_only, detach,
                              collect)
    if path is not None:
        refresh_table_claims(key, budget, results_root(results_dir), variant)
    return path


def one_line(text: str) -> str:
    """A multi-line message (a list of config problems, Hydra's options) as one line: a line ending in ``:`` runs
    on into the next, other lines are joined by ``; ``."""
    out = ""
    for line in (ln.strip() for ln in str(text).splitlines()):
        if line:
            out += ("" if not out else " " if out.endswith(":") else "; ") + line
    return out


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
    parser.add_argument("--detach", action="store_true",
                        help="SLURM launchers: submit the missing runs as one array and exit (then --collect)")
    parser.add_argument("--collect", action="store_true",
                        help="train nothing: render from finished runs, saying which SLURM jobs are queued, "
                             "running or failed (and how)")
    parser.add_argument("--results-dir", default=None)
    parser.add_argument("--variant", default=None,
                        help="render into <paper>[/<budget>]/<variant>/ (for builds whose overrides change the runs)")
    parser.add_argument("--workers", type=positive_int, default=None,
                        help="joblib: at most this many worker processes (default: one per core)")
    parser.add_argument("--render-only", action="store_true",
                        help="train nothing: render from the finished run records, flagging missing runs")
    parser.add_argument("--explain", action="store_true",
                        help="print what --budget changes for this table against the paper budget (every resolved "
                             "key, by the conf file that sets it; seeds; the spec's note) and exit: nothing is run")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides applied to every run")
    args = parser.parse_intermixed_args(argv)  # overrides may come before or after the options
    if args.explain:
        try:
            print(explain_budget(args.table, args.budget))
        except (SpecError, HydraException) as err:
            _refuse(args.table, str(err))
        return
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
    incomplete = engine.incomplete_cells(path.with_suffix(".csv"))
    if incomplete:  # the table is written (its cells say why), but the build did not give every number
        raise SystemExit(f"[table {args.table}] incomplete: {len(incomplete)} cell(s) with failed or missing runs, "
                         f"e.g. {incomplete[0]}; see {path} and each run's status.json")


def _refuse(table: str, message: str) -> None:
    """Print ``message`` as one line on stderr and exit with :data:`BAD_INPUT_EXIT`."""
    for prefix in (f"table {table}: ", f"{table}: "):  # the message names the table already: once is enough
        message = message[len(prefix):] if message.startswith(prefix) else message
    print(f"[table {table}] {one_line(message)}", file=sys.stderr, flush=True)
    raise SystemExit(BAD_INPUT_EXIT)


if __name__ == "__main__":
    main()
