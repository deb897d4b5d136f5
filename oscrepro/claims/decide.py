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
   them is free). Candidates are ranked by the smallest cost per expected decision, cost(N) / power(N). The power
   of each check kind: :mod:`oscrepro.claims.power` (closed forms; a seeded simulation for orderings).
3. **Looks.** Without ``--dry-run`` the cheapest candidates that fit the core-hours are extended to their *next
   planned look* (not straight to N: the design stops a claim at its first decisive look), their missing runs are
   trained in one pool (the table engine's launcher), their tables re-rendered, and the look's verdict is written
   to the ledger ``results/decide/<budget>.json``; then the ranking is redone, until every candidate is decided,
   capped, or the core-hours are spent. A claim in the ledger is judged by the sequential design from then on
   (:func:`oscrepro.claims.sequential.sequential_verdict`), in CLAIMS.md too.

Extra seeds are ordinary runs of the spec's cells: the decided per-row (or per-cell) seed counts live in
``conf/decide/<budget>.yaml`` (``{<paper>/<table>: {<row label> | "<row label> | <column>": n}}``), which
:meth:`TableSpec.seeds_for` reads,
so a plain table build shows them and never retrains them. An analysis table whose cells are seeds of its own runs
names the adapter argument that counts them (``analysis.seeds_arg``: osciformer Figure 5's forecast seeds,
coupledqk Table 7's fine-tuning seeds); its decided count is kept under the pseudo row ``(analysis seeds)``
(:meth:`TableSpec.analysis_seeds`), its look is a full build of the table (the adapter trains the new seeds), and
its cost per seed is what its experiment's records took over its seed count. One that also names
``analysis.cell_seeds_arg`` (coupledqk Table 7) is raised per cell (``(analysis seeds) | <row> | <column>``), priced
as the mean cell's share of a seed. A timing analysis whose cells are
repeated measurements names the adapter argument that counts them (``analysis.trials_arg``: osciformer Figure 2's
repeats, coupledqk Table 10's trials) and the measured core-seconds of one trial (``analysis.trial_core_s``): its
claims get the same design over trials instead of seeds (pseudo row ``(analysis trials)``, cap
:data:`TRIAL_CAP_FACTOR` x the spec's count, fixed before looking). A look re-measures every trial afresh, so the
looks are not nested samples; the union bound over looks needs only each look's own test to be valid, so the error
guarantee holds as for seeds (:mod:`oscrepro.claims.sequential`). An analysis table that reads every
seed of another table's cells (fqo Table 6 reads Table 4's models; coupledqk Figure 3 and Table 12 read Table 1's
LMs) is decided through its *source*: the source rows behind the claim's rows get the seeds (priced as that
table's runs), the source table is trained and re-rendered, then the analysis is rebuilt and looked at. They are
new cells x seeds, so the
golden-config snapshot gains them: after a decide run, regenerate it (``python
tests/fixtures/make_golden_configs.py``; the run prints this) and check that it only adds cells.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from oscrepro.claims import sequential as S
from oscrepro.claims.ledger import ledger_path, load_ledger
from oscrepro.claims.power import PILOT_POWER, ordering_power, predictive_power, trend_power
from oscrepro.claims.scoreboard import (
    Checked,
    ClaimError,
    _cell,
    _float,
    _stats,
    check_table,
    read_cells,
    refresh_table_claims,
    table_csv,
)
from oscrepro.runs.compose import CONF_DIR
from oscrepro.runs.record import atomic_write_text
from oscrepro.tables.spec import (
    ANALYSIS_SEEDS,
    ANALYSIS_TRIALS,
    CELL_SEEDS_ARG,
    CELL_SEP,
    SEEDS_ARG,
    TRIAL_CORE_S,
    TRIALS_ARG,
    TableSpec,
    available_tables,
    cell_key,
    decided_seeds,
    decided_seeds_path,
    load_spec,
)

DEFAULT_CAP = 10  # seeds per cell at most: beyond it a claim's effect is too small for this budget to matter
KINDS = ("difference", "within", "equivalent", "ordering", "trend")
MIN_POWER = 0.1  # below it more seeds are not expected to decide the claim at a price worth paying: left out
PILOT_N = 3  # a pilot's first look: the smallest seed count with a spread worth judging (2 leaves 1 df per cell)
TRIAL_CAP_FACTOR = 4  # timed trials per cell at most: this many times the spec's own count (fixed before looking)


@dataclass
class Candidate:
    """One inconclusive claim and what deciding it would take."""

    checked: Checked
    rows: list[str]  # what a look raises: row labels, or cells (cell_key) where the claim reads some of a row's columns
    n_now: int
    run_s: float  # core-seconds of one more seed of every run-backed cell of those rows (nan: no record to time)
    best_n: int | None = None
    power: float = 0.0
    cost_s: float = math.nan
    reason: str = ""  # why it is left out (empty for a live candidate)
    looks: list[int] = field(default_factory=list)
    pilot: bool = False  # n = 1: no spread, so no power; trained to the design's first look (module docstring)
    analysis: bool = False  # an analysis table's own seed runs (analysis.seeds_arg): its build trains them
    trials: bool = False  # an analysis table's timed trials (analysis.trials_arg): its build measures them afresh
    have_s: dict[int, float] = field(default_factory=dict)  # seed -> core-seconds of its runs already recorded
    pending: dict[int, dict[str, float]] = field(default_factory=dict)  # seed -> {run config: core-s} to train
    source: tuple[str, list[str]] | None = None  # an analysis decided through its source table's rows (docstring)

    @property
    def target(self) -> tuple[str, list[str]]:
        """(table, rows) whose seeds a look raises: the claim's own, or its analysis's source rows."""
        return self.source or (self.checked.claim.table, self.rows)

    def cost_to(self, n_final: int) -> float:
        """Core-seconds of training seeds ``n_now`` .. ``n_final`` - 1 of the claim's rows: :attr:`run_s` per
        seed, less what finished records of that seed already cover (a look on existing seeds costs nothing). Timed
        trials are re-measured whole at every look: each planned look up to ``n_final`` costs all its trials."""
        if self.trials:
            return sum(m * self.run_s for m in self.looks if self.n_now < m <= n_final)
        return sum(max(self.run_s - self.have_s.get(s, 0.0), 0.0) for s in range(self.n_now, n_final))

    def new_runs(self, n_final: int) -> dict[str, float]:
        """The runs still to train for seeds ``n_now`` .. ``n_final`` - 1, by config, with their core-seconds (empty
        for an analysis's own seeds or trials, which are priced per seed or trial, not per run)."""
        return {k: t for s in range(self.n_now, n_final) for k, t in self.pending.get(s, {}).items()}

    @property
    def key(self) -> str:
        return f"{self.checked.claim.id}@{self.checked.budget}"

    @property
    def score(self) -> float:
        """Core-seconds per expected decision (lower is better); a pilot's power is :data:`PILOT_POWER`."""
        power = PILOT_POWER if self.pilot else self.power
        return self.cost_s / power if power > 0 else math.inf


def _cell_refs(checked: Checked) -> list[dict[str, str]]:
    c = checked.claim.check
    return list(c.get("cells") or [c[k] for k in ("a", "b") if k in c])


def _effect_spread(checked: Checked, cells: dict) -> tuple[float, float, int, float, float | None]:
    """(effect, one-seed spread, n per cell, boundary lo, band hi or None) of a claim from its table's cells, read
    as the scoreboard reads them (:func:`oscrepro.claims.scoreboard._stats`)."""
    c, claim = checked.claim.check, checked.claim
    if c["kind"] in ("difference", "equivalent"):
        a, b = _stats(cells, c["a"], claim), _stats(cells, c["b"], claim)
        spread, effect, n = math.sqrt(a.std**2 + b.std**2), a.mean - b.mean, min(a.n, b.n)
        if c["kind"] == "equivalent":  # |a − b| ≤ tol: decided inside the band or wholly outside it
            return effect, spread, n, -float(c["tol"]), float(c["tol"])
        return effect, spread, n, float(c.get("margin", 0.0)), None
    a = _stats(cells, c["a"], claim)
    target = _float(_cell(cells, c["a"], claim).get("paper_mean")) if c["target"] == "paper" else float(c["target"])
    tol = float(c["tol"])
    return a.mean - target, a.std, a.n, -tol, tol


def _claim_n(checked: Checked, cells: dict) -> int:
    """Seeds per cell the claim reads: the smallest n over its cells (a look's n)."""
    return min(_stats(cells, r, checked.claim).n for r in _cell_refs(checked))


def _power(checked: Checked, cells: dict, n_final: int, level: float) -> float:
    """Predictive power of the claim's look at ``n_final`` seeds per cell (:mod:`oscrepro.claims.power`)."""
    c, claim = checked.claim.check, checked.claim
    if c["kind"] == "ordering":
        return ordering_power([_stats(cells, r, claim) for r in c["cells"]], c["direction"], n_final, level)
    if c["kind"] == "trend":
        return trend_power([float(x) for x in c["x"]], [_stats(cells, r, claim) for r in c["cells"]], n_final, level)
    effect, spread, n, lo, hi = _effect_spread(checked, cells)
    return predictive_power(effect, spread, n, n_final, level, lo, hi)


def _no_spread(checked: Checked, cells: dict) -> str:
    """Why the claim's cells give no spread to plan from, or "" when they do."""
    refs = [_stats(cells, r, checked.claim) for r in _cell_refs(checked)]
    if any(s.n >= 2 and not math.isfinite(s.std) for s in refs):
        return "a cell without a seed spread (a delta column: judge its two source columns)"
    return ""


def _run_costs(key: str, budget: str, rows: list[str], results: Path, extra_seeds: range = range(0)
               ) -> tuple[float, dict[int, float], dict[int, dict[str, float]]]:
    """Core-seconds of one more seed of every run-backed cell of ``rows`` (mean recorded run time × threads; nan
    when no finished record of those cells carries a run time), and, for each seed of ``extra_seeds``, the part of
    that already covered by finished records of that seed (rows whose seeds another claim or table trained), and
    the runs still to train, keyed by their config (overrides and seed) with their price: two claims that need the
    same new run are charged for it once."""
    from oscrepro.runs.lookup import RunRequest, find_record
    from oscrepro.tables.build import planned_cells

    spec, cells, _ = planned_cells(load_spec(key), budget, results, [])  # exactly the runs a build reads
    per_run: dict[Path, tuple[float, list[str]]] = {}  # one entry per distinct run config (a run's metric columns)
    for (ri, _col), reqs in cells.items():
        if not _in_units(spec.rows[ri].label, _col, rows) or not reqs or reqs[0].run_dir in per_run:
            continue
        times = []
        for r in reqs:
            st = r.record.status()
            if st.get("status") == "ok" and st.get("wall_time_s"):
                times.append(_record_core_s(st))
        if not times:
            return math.nan, {}, {}
        per_run[reqs[0].run_dir] = (sum(times) / len(times),
                                    [o for o in reqs[0].overrides if not o.startswith("seed=")])
    if not per_run:  # no run-backed cell in those rows
        return math.nan, {}, {}
    have: dict[int, float] = {}
    pending: dict[int, dict[str, float]] = {}
    for seed in extra_seeds:  # the request a build would make for this seed: its record may exist already
        for t, base in per_run.values():
            overrides = [*base, f"seed={seed}"]
            if find_record(RunRequest.compose(overrides)):
                have[seed] = have.get(seed, 0.0) + t
            else:
                pending.setdefault(seed, {})[" ".join(sorted(overrides))] = t
    return sum(t for t, _ in per_run.values()), have, pending


def _in_units(label: str, column: str, units: list[str]) -> bool:
    """Whether cell (row ``label``, ``column``) is among ``units``: its whole row, or the cell itself."""
    return label in units or cell_key(label, column) in units


def _units(spec: TableSpec, checked: Checked) -> list[str]:
    """What a look at a runs-table claim raises: each row it reads, or only the cells it reads (:func:`cell_key`)
    where those are some, not all, of the row's run-backed columns (coupledqk Table 6's medium MQAR claim trains
    medium runs, not the hard ones that cost 5-17 x more)."""
    run_cols = [c.name for c in spec.columns if c.delta is None]
    units: list[str] = []
    for row in dict.fromkeys(str(r["row"]) for r in _cell_refs(checked)):
        cols = list(dict.fromkeys(str(r["column"]) for r in _cell_refs(checked) if str(r["row"]) == row))
        if set(cols) < set(run_cols):
            units += [cell_key(row, c) for c in cols]
        else:  # every run column, or a column that is not a run (a delta): the whole row
            units.append(row)
    return units


def _own_cells(cells: dict) -> int:
    """Cells of an analysis table with a seed spread (n ≥ 2; a one-value cell, such as a paper column, has n = 1):
    what one of its seeds is shared by. A cell's price is then the mean cell's, which errs high for a cheap task
    (Table 7: a QNLI run ~160 s against SST-2's ~375 s)."""
    return sum(1 for cell in cells.values() if _float(cell.get("n")) >= 2)


def source_rows(spec: TableSpec, budget: str, results: Path, rows: list[str]) -> tuple[str, list[str]] | None:
    """(source table, its rows) behind analysis rows ``rows`` when the analysis reads every seed of one other
    table's cells (its planning function's :class:`~oscrepro.tables.sources.RunNeeds`: cells only, all seeds, no
    variant overrides): raising those rows' seeds raises the analysis cells' n. Analysis rows named like their
    source cells map to them; otherwise every source row is extended. None when the analysis reads no such cells."""
    from hydra.utils import get_method

    from oscrepro.tables.build import ENGINE_KWARGS, analysis_kwargs
    from oscrepro.tables.sources import PLAN_ATTR

    plan = getattr(get_method(spec.analysis["_target_"]), PLAN_ATTR, None)
    if plan is None:
        return None
    kwargs = {k: v for k, v in analysis_kwargs(spec, budget).items() if k not in ENGINE_KWARGS}
    needs = plan(budget=budget, results_dir=results, **kwargs)
    cells = needs.cells
    if needs.own is not None or needs.then is not None or not cells or len({c.table for c in cells.values()}) != 1 \
            or any(c.seeds is not None or c.overrides for c in cells.values()):
        return None
    mine = [cells[r].row for r in rows if r in cells] or [c.row for c in cells.values()]
    return next(iter(cells.values())).table, list(dict.fromkeys(mine))


def _experiment_records(spec: TableSpec, results: Path) -> list[Path]:
    """The run records under ``results/runs/<analysis.experiment>/`` (an analysis table's own seed runs)."""
    exp = spec.analysis.get("experiment")
    root = Path(results) / "runs" / str(exp) if exp else None
    return sorted(d for d in root.iterdir() if (d / "status.json").exists()) if root and root.is_dir() else []


def _analysis_seed_cost(spec: TableSpec, budget: str, results: Path) -> float:
    """Core-seconds of one more seed of an analysis table's own runs: what its finished records under
    ``results/runs/<analysis.experiment>/`` took, over its current seed count (records of that experiment that
    another table trained count too, so this errs high); nan when there are none."""
    total = _core_s(_experiment_records(spec, results), ok_only=True)
    return total / spec.analysis_seeds(budget) if total > 0 else math.nan


def _trial_cost(spec: TableSpec, budget: str) -> float:
    """Core-seconds of one more timed trial of an analysis table (``analysis.trial_core_s.<budget>``, measured and
    cited in its spec: a timing build leaves no run record to price it from); nan when the spec gives none."""
    value = (spec.analysis.get(TRIAL_CORE_S) or {}).get(budget)
    return float(value) if isinstance(value, int | float) and value > 0 else math.nan


def best_look(options: list[tuple[int, float, float]]) -> tuple[int, float, float] | None:
    """The look to rank a claim by, from its later looks' (N, predictive power, core-seconds): the cheapest per
    expected decision among those with power ≥ :data:`MIN_POWER`; None when none reaches it. A free look with
    little power (seeds another table trained) must not hide a dearer look that can decide the claim."""
    worth = [o for o in options if o[1] >= MIN_POWER]
    return min(worth, key=lambda o: (o[2] / o[1], o[0])) if worth else None


def candidates(budget: str, results: Path, cap: int = DEFAULT_CAP) -> list[Candidate]:
    """Every inconclusive claim at ``budget`` with what deciding it would take (module docstring), ranked; claims
    left out carry their ``reason``."""
    ledger = load_ledger(results, budget)
    out: list[Candidate] = []
    for key in available_tables():
        try:
            judged = check_table(key, budget, results)
        except ClaimError as err:  # a table whose claims cannot be read: said, not skipped silently
            print(f"[decide] {key}: its claims cannot be judged ({err})", flush=True)
            continue
        for checked in judged:
            if checked.verdict.status != "inconclusive":
                continue
            c = checked.claim.check
            cand = Candidate(checked, list(dict.fromkeys(str(r["row"]) for r in _cell_refs(checked))), 0, math.nan)
            out.append(cand)
            if c["kind"] not in KINDS or (c["kind"] == "within" and c.get("exact")):
                cand.reason = f"{c['kind']}{' (exact)' if c.get('exact') else ''} checks are not decided by seeds"
                continue
            if getattr(checked.claim, "not_answerable", None) and budget in checked.claim.not_answerable:
                cand.reason = "not answerable at this budget: " + checked.claim.not_answerable[budget]
                continue
            spec = load_spec(key)
            own = spec.kind != "runs" and (spec.analysis.get(SEEDS_ARG) or spec.analysis.get(TRIALS_ARG))
            if spec.kind != "runs" and not own:
                cand.source = source_rows(spec, budget, results, cand.rows)
            if spec.kind != "runs" and not own and cand.source is None:
                cells = read_cells(table_csv(results, key, budget))
                ns = [_float(cells.get((str(r["row"]), str(r["column"])), {}).get("n")) for r in _cell_refs(checked)]
                repeated = int(max((n for n in ns if math.isfinite(n)), default=0))
                source = spec.analysis.get("source_table") or spec.analysis.get("source")
                cand.reason = ("analysis table: its cells are computed from other tables' runs, not seeds of its own"
                               + ("" if repeated <= 1 else
                                  f"; its n = {repeated} are the seeds of {source} it reads: more come from seeds of "
                                  "that table" if source else
                                  f"; its n = {repeated} are repeated measurements of its own protocol (timed "
                                  f"trials) whose spec names no analysis.{TRIALS_ARG} to raise them by"))
                continue
            claim_cap = cap
            if spec.kind == "runs":  # a claim on some columns of a row raises those cells only
                cand.rows = _units(spec, checked)
            if own and spec.analysis.get(SEEDS_ARG):  # the analysis's own seed runs (analysis.seeds_arg)
                cand.analysis, cand.rows = True, [ANALYSIS_SEEDS]
                if spec.analysis.get(CELL_SEEDS_ARG):  # ... raised for the claim's cells only
                    cand.rows = [ANALYSIS_SEEDS + CELL_SEP + cell_key(str(r["row"]), str(r["column"]))
                                 for r in _cell_refs(checked)]
            elif own:  # its timed trials (analysis.trials_arg): looks over trials, capped from the spec's count
                cand.analysis, cand.trials, cand.rows = True, True, [ANALYSIS_TRIALS]
                claim_cap = TRIAL_CAP_FACTOR * spec.analysis_trials(budget, decided=False)
            cells = read_cells(table_csv(results, key, budget))
            n = cand.n_now = _claim_n(checked, cells)
            cand.reason = _no_spread(checked, cells)
            if cand.reason:
                continue
            entry = ledger.get(cand.key)
            cand.pilot = n < 2 and not entry
            cand.looks = (list(entry["schedule"]) if entry
                          else S.plan_looks(PILOT_N if cand.pilot else n, max(claim_cap, n, PILOT_N)))
            if n >= claim_cap or not cand.looks or n >= cand.looks[-1]:
                cand.reason = f"at the {'trial' if cand.trials else 'seed'} cap ({n} ≥ {claim_cap})"
                continue
            if cand.trials:
                cand.run_s = _trial_cost(spec, budget)
            elif cand.analysis:
                cand.run_s = _analysis_seed_cost(spec, budget, results)
                if cand.rows != [ANALYSIS_SEEDS]:  # per cell: the mean cell's share of a seed
                    cand.run_s *= len(cand.rows) / max(_own_cells(cells), 1)
            else:
                table, rows = cand.target
                cand.run_s, cand.have_s, cand.pending = _run_costs(table, budget, rows, results,
                                                                   range(n, cand.looks[-1]))
            if not math.isfinite(cand.run_s):
                cand.reason = (f"no measured trial cost (analysis.{TRIAL_CORE_S}.{budget}) to price it"
                               if cand.trials else "no finished record with a run time to cost it")
                continue
            if cand.pilot:  # no spread: the first look is the price of the first interval
                cand.best_n, cand.power, cand.cost_s = cand.looks[0], math.nan, cand.cost_to(cand.looks[0])
                continue
            levels = S.look_levels(cand.looks)
            # (N, power, cost) of each later look; the best is the cheapest per expected decision among looks with
            # power ≥ MIN_POWER (a free look with little power must not hide a dearer one that can decide)
            options = [(m, _power(checked, cells, m, level), cand.cost_to(m))
                       for m, level in zip(cand.looks, levels, strict=True) if m > n]
            chosen = best_look(options)
            if chosen:
                cand.best_n, cand.power, cand.cost_s = chosen
            else:
                top = max(options, key=lambda o: o[1], default=None)
                best = f"{top[1]:.2f} at N = {top[0]}" if top and top[1] > 0 else "0"
                cand.reason = (f"predictive power below {MIN_POWER:g} up to {claim_cap} "
                               f"{'trials' if cand.trials else 'seeds'} (best {best}"
                               + ("; the lack-of-fit reading of the slope does not narrow with seeds"
                                  if c["kind"] == "trend" else "")
                               + f"): more {'trials' if cand.trials else 'seeds'} are not expected to decide it")
    return sorted(out, key=lambda c: (bool(c.reason), c.score, c.key))


def render_plan(cands: list[Candidate], budget: str, core_hours: float) -> str:
    """The dry-run plan as markdown (committed before and after a decide run)."""
    live = [c for c in cands if not c.reason]
    lines = [f"# Decide plan at `{budget}` ({core_hours:g} core-hours)", "",
             "Inconclusive empirical claims ranked by core-seconds per expected decision (predictive power at the "
             "group-sequential level of the look; `python -m oscrepro.claims.decide`). A *pilot* has one seed per "
             f"cell, so no spread and no power: it is trained to its first look, ranked as if its power were "
             f"{PILOT_POWER:g}.", "",
             "| rank | claim | table | rows | n now | looks | best N | power | cost (core-min) | per decision |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for i, c in enumerate(live, 1):
        rows = ('; '.join(c.rows) + (f" (seeds of {c.source[0]}: {'; '.join(c.source[1])})" if c.source else "")
                ).replace("|", "\\|")  # a cell key's separator inside a markdown cell
        lines.append(f"| {i} | {c.checked.claim.id} | {c.checked.claim.table} | {rows} | {c.n_now} | "
                     f"{', '.join(map(str, c.looks))} | {c.best_n} | {'pilot' if c.pilot else f'{c.power:.2f}'} | "
                     f"{c.cost_s / 60:.1f} | "
                     f"{c.score / 60:.1f} |")
    lines += ["", f"Left out ({len(cands) - len(live)}):", ""]
    lines += [f"- {c.checked.claim.id} ({c.checked.claim.table}): {c.reason}" for c in cands if c.reason]
    return "\n".join(lines) + "\n"


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


def _record_core_s(status: dict) -> float:
    """Core-seconds one record took: ``wall_time_s`` × ``torch_threads`` of its ``status.json``."""
    return float(status.get("wall_time_s") or 0) * float(status.get("torch_threads") or 1)


def _core_s(record_dirs: list[Path], ok_only: bool = False) -> float:
    """Core-seconds the records in ``record_dirs`` took (``ok_only``: finished ones only), each status read once."""
    total = 0.0
    for d in record_dirs:
        path = Path(d) / "status.json"
        st = json.loads(path.read_text()) if path.exists() else {}
        if not ok_only or st.get("status") == "ok":
            total += _record_core_s(st)
    return total


def _row_runs(key: str, budget: str, rows: list[str], results: Path) -> set[Path]:
    """The run dirs a build of ``key`` reads for ``rows`` (every run-backed column, every seed)."""
    from oscrepro.tables.build import planned_cells

    spec, cells, _ = planned_cells(load_spec(key), budget, results, [])
    return {r.run_dir for (ri, col), reqs in cells.items() if _in_units(spec.rows[ri].label, col, rows) for r in reqs}


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
    verdict = check_claim(type(claim)(**{**claim.__dict__, "check": {**claim.check, "level": level}}), cells)
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
        workers: int | None = None, only: set[str] | None = None, rounds: int | None = None) -> list[dict]:
    """Extend, train, re-render and look until decided, capped or out of core-hours (module docstring). ``only``:
    extend just these claim ids (a researcher's pick; the design's guarantee is per claim, so it holds the same);
    ``rounds``: stop after this many rounds of looks (a look not taken now is taken by a later run, on schedule)."""
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
        live = [c for c in candidates(budget, results, cap) if not c.reason and c.key not in failed
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
        before = {key: set(_experiment_records(load_spec(key), results)) for key in own}
        print(f"[decide] look for {len(chosen)} claims over {len(tables) + len(own)} tables: {len(missing)} runs to "
              f"train{f' and the own seeds of {own}' if own else ''} (≈ {cost / 60:.0f} core-min)", flush=True)
        t0 = time.time()
        launch(missing, launcher, Progress("decide", len(missing), 0), max_workers=workers)
        trained = {r.run_dir for r in missing}
        for key in tables:
            build_table(key, budget, results_dir=results, render_only=True)
        for key in readers:  # its source runs are trained: a full build reads them (and recovers no weights)
            build_table(key, budget, results_dir=results, workers=workers)
        new_own: dict[str, list[Path]] = {}
        timed: dict[str, float] = {}  # a timed-trials table: the core-seconds its build took (it leaves no record)
        trial_tables = {c.checked.claim.table for c in chosen if c.trials}
        for key in own:  # a full build: the adapter trains its missing seeds (or measures its trials) afresh
            t_build = time.time()
            build_table(key, budget, results_dir=results, workers=workers)
            new_own[key] = sorted(set(_experiment_records(load_spec(key), results)) - before[key])
            if key in trial_tables:
                timed[key] = time.time() - t_build
        spent += _core_s(sorted(trained)) + sum(_core_s(d) for d in new_own.values()) + sum(timed.values())
        for c in chosen:
            mine = (new_own[c.checked.claim.table] if c.analysis
                    else sorted(trained & _row_runs(c.target[0], budget, c.target[1], results)))
            try:
                look = take_look(c, results, budget,
                                 timed[c.checked.claim.table] if c.trials else _core_s(mine))
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
        text = render_plan(candidates(args.budget, results, args.cap), args.budget, args.core_hours)
        print(text, end="")
        if args.out:
            atomic_write_text(Path(args.out), text)
        return
    run(args.budget, args.core_hours, results, args.cap, args.launcher, args.workers,
        set(args.only) if args.only else None, args.rounds)


if __name__ == "__main__":
    main()
