"""``python -m oscrepro.leaderboard [--budget cpu] [--launcher joblib] [--render-only] [overrides...]``
(``make leaderboard``): train the leaderboard's missing runs, render each task's table and the board
(results/leaderboard.md + results/leaderboard.png). Finished runs are never redone: a killed build resumes.
``--figure-only`` redraws results/leaderboard.png from the task tables' csvs and touches nothing else."""

from __future__ import annotations

import argparse
import logging

from oscrepro.claims.scoreboard import refresh_table_claims
from oscrepro.leaderboard.board import TASKS, build_leaderboard, redraw_board
from oscrepro.runs.record import results_root
from oscrepro.tables.launch import launcher_names
from oscrepro.tables.spec import BUDGETS


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m oscrepro.leaderboard", description=__doc__)
    parser.add_argument("--budget", default="cpu", choices=BUDGETS)
    parser.add_argument("--launcher", default="joblib", choices=launcher_names(),
                        help="a pool or a Hydra launcher config (conf/hydra/launcher/); hydra.launcher.<key>=<value> "
                             "overrides configure it")
    parser.add_argument("--workers", type=int, default=None, help="joblib: at most this many worker processes")
    parser.add_argument("--results-dir", default=None)
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {','.join(TASKS)}")
    parser.add_argument("--render-only", action="store_true", help="train nothing: render from finished records")
    parser.add_argument("--figure-only", action="store_true",
                        help="redraw results/leaderboard.png from the task csvs (nothing trained or rendered)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    args = parser.parse_intermixed_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    tasks = tuple(t for t in args.tasks.split(",") if t)
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        raise SystemExit(f"[leaderboard] unknown task(s) {unknown}; valid: {', '.join(TASKS)}")
    if args.figure_only:
        print(f"[leaderboard] wrote {redraw_board(args.budget, results_root(args.results_dir), tasks)}", flush=True)
        return
    build_leaderboard(args.budget, args.launcher, args.workers, args.render_only, args.results_dir,
                      args.overrides, tasks)
    for task in tasks:  # the claims judged on each task's table, as the table CLI does after a build
        refresh_table_claims(f"leaderboard/{task}", args.budget, results_root(args.results_dir))


if __name__ == "__main__":
    main()
