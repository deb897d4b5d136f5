"""Spend seeds where they decide a claim: ``python -m oscrepro.claims.decide --budget cpu --core-hours H [--dry-run]``.

Most inconclusive verdicts are three seeds against a small effect. Adding seeds until a p-value looks good
inflates false positives; stopping at the paper's seed count leaves cheap decisions on the table. This planner does
neither:

1. **Candidates.** Every empirical claim judged at ``budget`` whose verdict is inconclusive and whose cells are
   seed runs of a runs table (``difference``, ``equivalent``, non-exact ``within``, ``ordering`` and ``trend``
   checks; analysis cells, exact checks, seed-spread ratios and claims the spec marks not answerable at this budget
   are listed with the reason they are left out). A claim whose cells have one seed (no spread, so no power) is a
   *pilot*: trained to its design's first look (3 seeds), ranked at :data:`oscrepro.claims.power.PILOT_POWER`.
2. **What deciding costs.** For each candidate and each per-cell seed count N up to the seed cap, the *predictive
   power* of the final look (Spiegelhalter, Freedman & Blackburn 1986): the probability, under a flat prior on the
   effect given the seeds so far, that the interval at N seeds — at the group-sequential level of that look
   (:mod:`oscrepro.claims.sequential`) — lies wholly on one side of the claim's boundary. It accounts for the
   uncertainty of the observed effect (its standard error enters the predictive variance), so a lucky 3-seed gap
   does not look cheaper than it is. The cost of N is the extra runs of every cell the claim reads (every run-backed
   column of a row when the claim reads them all, else only the claim's columns: a claim on Table 6's medium MQAR
   trains no hard runs) times their mean recorded run time (``wall_time_s`` × ``torch_threads`` in
   core-seconds), less the runs whose records already exist (seeds another claim or table trained: a look on
   them is free), plus, once, the retraining of source records whose weights the look loads and that were kept
   without them (Table 7 fine-tunes Table 1's LMs; priced by their records). Candidates are ranked by the smallest
   cost per expected decision, cost(N) / power(N). The power
   of each check kind: :mod:`oscrepro.claims.power` (closed forms; a seeded simulation for orderings).
3. **Looks.** Without ``--dry-run`` the cheapest candidates that fit the core-hours are extended to their *next
   planned look* (not straight to N: the design stops a claim at its first decisive look), their missing runs are
   trained in one pool (the table engine's launcher), their tables re-rendered, and the look's verdict is written
   to the ledger ``results/decide/<budget>.json``; then the ranking is redone, until every candidate is decided,
   capped, or the core-hours are spent. A claim in the ledger is judged by the sequential design from then on
   (:func:`oscrepro.claims.sequential.sequential_verdict`), in CLAIMS.md too.

The candidates and their prices: :mod:`oscrepro.claims.candidates`. Extra seeds are ordinary runs of the spec's
cells: the decided per-row (or per-cell) seed counts live in ``conf/decide/<budget>.yaml`` (``{<paper>/<table>:
{<row label> | "<row label> | <column>": n}}``), which :meth:`TableSpec.seeds_for` reads, so a plain table build
shows them and never retrains them. An analysis table whose cells are seeds of its own runs names the adapter
argument that counts them (``analysis.seeds_arg``: osciformer Figure 5's forecast seeds, coupledqk Table 7's
fine-tuning seeds); its decided count is kept under the pseudo row ``(analysis seeds)``
(:meth:`TableSpec.analysis_seeds`), its look is a full build of the table (the adapter trains the new seeds), and
its cost per seed is what its experiment's records took over its seed count. One that also names
``analysis.cell_seeds_arg`` (coupledqk Table 7) is raised per cell (``(analysis seeds) | <row> | <column>``), priced
as the mean cell's share of a seed. A timing analysis whose cells are repeated measurements names the adapter
argument that counts them (``analysis.trials_arg``: osciformer Figure 2's repeats, coupledqk Table 10's trials) and
the measured core-seconds of one trial (``analysis.trial_core_s``): its claims get the same design over trials
instead of seeds (pseudo row ``(analysis trials)``, cap :data:`~oscrepro.claims.reach.TRIAL_CAP_FACTOR` x the
spec's count, fixed before looking). A look re-measures every trial afresh, so the looks are not nested samples; the
union bound over looks needs only each look's own test to be valid, so the error guarantee holds as for seeds
(:mod:`oscrepro.claims.sequential`). An analysis table that reads every seed of another table's cells (fqo Table 6
reads Table 4's models; coupledqk Figure 3 and Table 12 read Table 1's LMs) is decided through its *source*: the
source rows behind the claim's rows get the seeds (priced as that table's runs), the source table is trained and
re-rendered, then the analysis is rebuilt and looked at. They are new cells x seeds, so the golden-config snapshot
gains them: after a decide run, regenerate it (``python tests/fixtures/make_golden_configs.py``; the run prints
this) and check that it only adds cells.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import yaml

from oscrepro.claims import sequential as S
from oscrepro.claims.candidates import (
    DEFAULT_CAP,
    MIN_POWER,
    Candidate,
    _claim_n,
    candidates,
    render_plan,
)
from oscrepro.claims.ledger import ledger_path, load_ledger
from oscrepro.claims.prices import experiment_records, in_units, records_core_s
from oscrepro.claims.scoreboard import read_cells, refresh_table_claims, table_csv
from oscrepro.runs.compose import CONF_DIR
from oscrepro.runs.record import atomic_write_text
from oscrepro.tables.spec import decided_seeds, decided_seeds_path, load_spec


def write_decided(budget: str, key: str, rows: list[str], n: int, conf_dir: Path = CONF_DIR) -> None:
    """Raise the seed count of ``rows`` of table ``key`` to ``n`` in ``conf/decide/<budget>.yaml`` (never lower)."""
    path = decided_seeds_path(conf_dir, budget)
    table = decided_seeds(conf_dir, budget)
    for row in rows:
        table.setdefault(key, {})[row] = max(n, int(table.get(key, {}).get(row, 0)))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "# Per-row seed counts raised by python -m oscrepro.claims.decide (do not edit by hand:\n"
                            "# the ledger results/decide/<budget>.json records the looks these seeds served).\n"
                      + yaml.safe_dump(table, sort_keys=True, allow_unicode=True))


def _row_runs(key: str, budget: str, rows: list[str], results: Path) -> set[Path]:
    """The run dirs a build of ``key`` reads for ``rows`` (every run-backed column, every seed)."""
    from oscrepro.tables.build import planned_cells

    spec, cells, _ = planned_cells(load_spec(key), budget, results, [])
    return {r.run_dir for (ri, col), reqs in cells.items() if in_units(spec.rows[ri].label, col, rows) for r in reqs}


def take_look(cand: Candidate, results: Path, budget: str, core_s: float | None = None) -> dict:
    """Judge ``cand``'s claim on its re-rendered table at the level of the look its seeds reached; append the look
    to the ledger and return it. ``core_s``: what the runs trained for this look's rows took (the closing note's
    per-claim cost; a run two claims read is counted in both)."""
    from oscrepro.claims.scoreboard import check_claim

    ledger = load_ledger(results, budget)
    entry = ledger.setdefault(cand.key, {"claim": cand.checked.claim.id, "table": cand.checked.claim.table,
                                         "schedule": cand.looks, "looks": []})
    cells = read_cells(table_csv(results, cand.checked.claim.table, budget))
    n = _claim_n(cand.checked, cells)
    looks = entry["schedule"]
    k = len(entry["looks"])  # the next planned look
    if k >= len(looks) or n != looks[k]:
        raise RuntimeError(f"{cand.key}: the table's cells have n = {n} seeds where look {k + 1} plans "
                           f"{looks[k] if k < len(looks) else '(none: the design is complete)'}; a failed or "
                           f"missing run? (see the table's .md); the look is not taken")
    level = S.look_levels(looks)[k]
    claim = cand.checked.claim
    verdict = check_claim(type(claim)(**{**claim.__dict__, "check": {**claim.check, "level": level}}), cells, results,
                          look=k + 1)
    look = {"look": k + 1, "n": n, "level": level, "status": verdict.status, "effect": verdict.effect,
            "ci": list(verdict.ci), "detail": verdict.detail}
    if core_s is not None:
        look["core_s"] = round(core_s, 1)
    entry["looks"].append(look)
    path = ledger_path(results, budget)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(ledger, indent=1, sort_keys=True, default=float) + "\n")
    return look


def run(budget: str, core_hours: float, results: Path, cap: int = DEFAULT_CAP, launcher: str = "joblib",
        workers: int | None = None, only: set[str] | None = None, rounds: int | None = None,
        min_power: float = MIN_POWER) -> list[dict]:
    """Extend, train, re-render and look until decided, capped or out of core-hours (module docstring). ``only``:
    extend just these claim ids (a researcher's pick; the design's guarantee is per claim, so it holds the same);
    ``rounds``: stop after this many rounds of looks (a look not taken now is taken by a later run, on schedule);
    ``min_power``: the price rule of :func:`~oscrepro.claims.candidates.candidates`."""
    from oscrepro.tables.build import build_table, planned_cells
    from oscrepro.tables.launch import Progress, launch
    from oscrepro.tables.plan import unique_runs

    spent, looks = 0.0, []
    failed: set[str] = set()  # claims whose look could not be taken (a diverged or missing run): not retried
    budget_s = core_hours * 3600
    done_rounds = 0
    while True:
        if rounds is not None and done_rounds >= rounds:
            print(f"[decide] stop: {rounds} round(s) of looks taken", flush=True)
            return looks
        done_rounds += 1
        live = [c for c in candidates(budget, results, cap, min_power) if not c.reason and c.key not in failed
                and (only is None or c.checked.claim.id in only)]
        chosen, cost = [], 0.0
        planned: set[str] = set()  # the new runs already paid for by a chosen claim (another claim's look shares them)
        for c in live:
            nxt = min(m for m in c.looks if m > c.n_now)
            runs = c.new_runs(nxt)
            step = c.cost_to(nxt) - sum(t for k, t in runs.items() if k in planned)
            if spent + cost + step <= budget_s:
                chosen.append(c)
                cost += step
                planned |= set(runs)
        if not chosen:
            print(f"[decide] stop: {len(live)} live candidates, none fits the {budget_s - spent:.0f} core-s left",
                  flush=True)
            if any(not look.get("trials") for look in looks):
                print("[decide] seeds were added: regenerate the golden configs (python "
                      "tests/fixtures/make_golden_configs.py) and commit conf/decide, the records and the tables",
                      flush=True)
            return looks
        for c in chosen:
            if c.key not in load_ledger(results, budget) and not c.pilot:  # look 1: the seeds it has, at the
                take_look(c, results, budget)                              # design's level (a pilot has no look yet)
            write_decided(budget, *c.target, min(m for m in c.looks if m > c.n_now))
        tables = sorted({c.target[0] for c in chosen if not c.analysis})
        own = sorted({c.checked.claim.table for c in chosen if c.analysis})  # analyses that train their own seeds
        readers = sorted({c.checked.claim.table for c in chosen if c.source})  # analyses of the source tables
        # planned as a build plans them (matched widths, device-only variants): the runs the tables will read
        runs = {r.run_dir: r for key in tables
                for r in unique_runs(planned_cells(load_spec(key), budget, results, [])[1])}
        missing = [r for r in runs.values() if not r.record.finished()]
        before = {key: set(experiment_records(load_spec(key), results)) for key in own}
        print(f"[decide] look for {len(chosen)} claims over {len(tables) + len(own)} tables: {len(missing)} runs to "
              f"train{f' and the own seeds of {own}' if own else ''} (≈ {cost / 60:.0f} core-min)", flush=True)
        t0 = time.time()
        launch(missing, launcher, Progress("decide", len(missing), 0), max_workers=workers)
        trained = {r.run_dir for r in missing}
        for key in tables:
            build_table(key, budget, results_dir=results, render_only=True)
        for key in readers:  # its source runs are trained: a full build reads them, recovering weights in the pool
            build_table(key, budget, launcher, results_dir=results, workers=workers)
        new_own: dict[str, list[Path]] = {}
        timed: dict[str, float] = {}  # a timed-trials table: the core-seconds its build took (it leaves no record)
        trial_tables = {c.checked.claim.table for c in chosen if c.trials}
        for key in own:  # a full build: the adapter trains its missing seeds (or measures its trials) afresh
            t_build = time.time()
            build_table(key, budget, launcher, results_dir=results, workers=workers)
            new_own[key] = sorted(set(experiment_records(load_spec(key), results)) - before[key])
            if key in trial_tables:
                timed[key] = time.time() - t_build
        spent += (records_core_s(sorted(trained)) + sum(records_core_s(d) for d in new_own.values())
                  + sum(timed.values()))
        for c in chosen:
            mine = (new_own[c.checked.claim.table] if c.analysis
                    else sorted(trained & _row_runs(c.target[0], budget, c.target[1], results)))
            try:
                look = take_look(c, results, budget,
                                 timed[c.checked.claim.table] if c.trials else records_core_s(mine))
            except RuntimeError as err:  # said and left for a person: one claim's failed run stops no other look
                print(f"[decide] {c.key}: look not taken: {err}", flush=True)
                failed.add(c.key)
                continue
            looks.append({"claim": c.key, "trials": c.trials, **look})
            print(f"[decide] {c.key}: look {look['look']} at n={look['n']} → {look['status']}", flush=True)
        for key in [*tables, *own, *readers]:  # after the looks: a table's claims section reads the ledger's verdicts
            refresh_table_claims(key, budget, results)
        print(f"[decide] spent {spent / 3600:.2f} of {core_hours:g} core-hours ({time.time() - t0:.0f} s wall)",
              flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m oscrepro.claims.decide", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", default="cpu", choices=("cpu", "paper"))
    parser.add_argument("--core-hours", type=float, required=True)
    parser.add_argument("--cap", type=int, default=DEFAULT_CAP, help="seeds per cell at most")
    parser.add_argument("--min-power", type=float, default=MIN_POWER,
                        help=f"leave out claims whose best look has less predictive power (default {MIN_POWER:g})")
    parser.add_argument("--dry-run", action="store_true", help="rank and cost only; train nothing")
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("--launcher", default="joblib")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--out", default=None, help="also write the plan markdown here")
    parser.add_argument("--only", nargs="+", default=None, metavar="CLAIM",
                        help="extend only these claim ids (the plan still ranks every claim)")
    parser.add_argument("--rounds", type=int, default=None, help="stop after this many rounds of looks")
    args = parser.parse_args(argv)
    results = Path(args.results_dir)
    from oscrepro.utils.quiet import quiet_third_party

    quiet_third_party()  # the looks build tables in this process (timing analyses call seed_everything per trial)
    if args.dry_run:
        text = render_plan(candidates(args.budget, results, args.cap, args.min_power), args.budget, args.core_hours)
        print(text, end="")
        if args.out:
            atomic_write_text(Path(args.out), text)
        return
    run(args.budget, args.core_hours, results, args.cap, args.launcher, args.workers,
        set(args.only) if args.only else None, args.rounds, args.min_power)


if __name__ == "__main__":
    main()
