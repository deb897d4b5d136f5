"""What deciding each inconclusive claim would take: the candidates of :mod:`oscrepro.claims.decide`.

For every inconclusive empirical claim at a budget: the cells a look raises (whole rows, or only the claim's cells
of a row: :func:`_units`; an analysis's own seeds or trials; the source rows of an analysis that reads another
table's seeds), what one more seed of them costs from the recorded run times (less the records that already
exist), the predictive power of each planned look (:mod:`oscrepro.claims.power`) at its group-sequential level
(:mod:`oscrepro.claims.sequential`), and the look to rank the claim by (:func:`best_look`); claims left out carry
the reason. :func:`render_plan` writes the dry-run plan. The method is the planner's module docstring."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from oscrepro.claims import seed_pairs
from oscrepro.claims import sequential as S
from oscrepro.claims.ledger import load_ledger
from oscrepro.claims.power import PILOT_POWER, ordering_power, predictive_power, spread_power, trend_power
from oscrepro.claims.prices import (
    analysis_seed_cost,
    here_kind,
    own_cells,
    recover_s,
    run_costs,
    trial_cost,
)
from oscrepro.claims.reach import DEFAULT_CAP, TRIAL_CAP_FACTOR, source_rows
from oscrepro.claims.scoreboard import (
    Checked,
    ClaimError,
    _cell,
    _float,
    _stats,
    check_table,
    claim_refs,
    read_cells,
    table_csv,
)
from oscrepro.claims.verdict import paired_differences
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
    load_spec,
)

KINDS = ("difference", "within", "equivalent", "ordering", "trend", "spread_ratio")
MIN_POWER = 0.1  # below it more seeds are not expected to decide the claim at a price worth paying: left out
PILOT_N = 3  # a pilot's first look: the smallest seed count with a spread worth judging (2 leaves 1 df per cell)


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
    recover_s: float = 0.0  # core-s of retraining source records kept without the weights a look loads (once)
    priced_on: frozenset[str] = frozenset()  # other CPU kinds that priced it: no record of this machine's kind

    @property
    def target(self) -> tuple[str, list[str]]:
        """(table, rows) whose seeds a look raises: the claim's own, or its analysis's source rows."""
        return self.source or (self.checked.claim.table, self.rows)

    def cost_to(self, n_final: int) -> float:
        """Core-seconds of training seeds ``n_now`` .. ``n_final`` - 1 of the claim's rows: :attr:`run_s` per
        seed, less what finished records of that seed already cover (a look on existing seeds costs nothing). Timed
        trials are re-measured whole at every look: each planned look up to ``n_final`` costs all its trials."""
        once = self.recover_s if n_final > self.n_now else 0.0  # weights a look loads, retrained once
        if self.trials:
            return once + sum(m * self.run_s for m in self.looks if self.n_now < m <= n_final)
        return once + sum(max(self.run_s - self.have_s.get(s, 0.0), 0.0) for s in range(self.n_now, n_final))

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


def _effect_spread(checked: Checked, cells: dict, results: Path | None = None
                   ) -> tuple[float, float, int, float, float | None]:
    """(effect, one-seed spread, n per cell, boundary lo, band hi or None) of a claim from its table's cells, read
    as the scoreboard reads them (:func:`oscrepro.claims.scoreboard._stats`). A difference declaring seed-matched
    runs (``pair_seeds``, :mod:`oscrepro.claims.seed_pairs`) is planned by its per-seed difference (with
    ``results``, where the runs' seeds are): the looks the planner prices are the design's next ones, which the
    pairing judges once its ``from_look`` is reached."""
    c, claim = checked.claim.check, checked.claim
    if c["kind"] in ("difference", "equivalent"):
        a, b = _stats(cells, c["a"], claim), _stats(cells, c["b"], claim)
        if results is not None and seed_pairs.declared(c):
            matched = seed_pairs.seed_matched(a, b, results)
            a, b = matched if not isinstance(matched, str) else (a, b)
        spread, effect, n = math.sqrt(a.std**2 + b.std**2), a.mean - b.mean, min(a.n, b.n)
        diffs = paired_differences(a, b)
        if diffs is not None:  # the same runs: one seed's spread is the spread of the per-run difference
            spread, n = statistics.stdev(diffs), len(diffs)
        if c["kind"] == "equivalent":  # |a − b| ≤ tol: decided inside the band or wholly outside it
            return effect, spread, n, -float(c["tol"]), float(c["tol"])
        return effect, spread, n, float(c.get("margin", 0.0)), None
    a = _stats(cells, c["a"], claim)
    target = _float(_cell(cells, c["a"], claim).get("paper_mean")) if c["target"] == "paper" else float(c["target"])
    tol = float(c["tol"])
    return a.mean - target, a.std, a.n, -tol, tol


def _claim_n(checked: Checked, cells: dict) -> int:
    """Seeds per cell the claim reads: the smallest n over its cells (a look's n)."""
    return min(_stats(cells, r, checked.claim).n for r in claim_refs(checked.claim))


def _power(checked: Checked, cells: dict, n_final: int, level: float, results: Path | None = None) -> float:
    """Predictive power of the claim's look at ``n_final`` seeds per cell (:mod:`oscrepro.claims.power`;
    ``results``: :func:`_effect_spread`)."""
    c, claim = checked.claim.check, checked.claim
    if c["kind"] == "ordering":
        return ordering_power([_stats(cells, r, claim) for r in c["cells"]], c["direction"], n_final, level)
    if c["kind"] == "trend":
        return trend_power([float(x) for x in c["x"]], [_stats(cells, r, claim) for r in c["cells"]], n_final, level)
    if c["kind"] == "spread_ratio":
        return spread_power(_stats(cells, c["a"], claim), _stats(cells, c["b"], claim), n_final, level)
    effect, spread, n, lo, hi = _effect_spread(checked, cells, results)
    return predictive_power(effect, spread, n, n_final, level, lo, hi)


def _no_spread(checked: Checked, cells: dict) -> str:
    """Why the claim's cells give no spread to plan from, or "" when they do."""
    refs = [_stats(cells, r, checked.claim) for r in claim_refs(checked.claim)]
    if any(s.n >= 2 and not math.isfinite(s.std) for s in refs):
        return "a cell without a seed spread (a delta column: judge its two source columns)"
    return ""


def _units(spec: TableSpec, checked: Checked) -> list[str]:
    """What a look at a runs-table claim raises: each row it reads, or only the cells it reads (:func:`cell_key`)
    where those are some, not all, of the row's run-backed columns (coupledqk Table 6's medium MQAR claim trains
    medium runs, not the hard ones that cost 5-17 x more)."""
    run_cols = [c.name for c in spec.columns if c.delta is None]
    units: list[str] = []
    for row in dict.fromkeys(str(r["row"]) for r in claim_refs(checked.claim)):
        cols = list(dict.fromkeys(str(r["column"]) for r in claim_refs(checked.claim) if str(r["row"]) == row))
        if set(cols) < set(run_cols):
            units += [cell_key(row, c) for c in cols]
        else:  # every run column, or a column that is not a run (a delta): the whole row
            units.append(row)
    return units


def stale_table(entry: dict | None, n: int) -> str | None:
    """Why a claim cannot be planned when its table holds fewer seeds (``n``) than the ledger's last look of it
    (``entry``) was taken at, else None. The table was not rebuilt (or not kept) after that look: planning from it
    would train nothing new and retake a look already in the ledger, which the look then refuses after the build."""
    last = (entry or {}).get("looks") or []
    if last and n < int(last[-1]["n"]):
        return (f"its table holds n = {n} seeds but look {last[-1]['look']} was taken at n = {last[-1]['n']} "
                "(results/decide ledger): rebuild the table from its records first")
    return None


def best_look(options: list[tuple[int, float, float]], min_power: float = MIN_POWER
              ) -> tuple[int, float, float] | None:
    """The look to rank a claim by, from its later looks' (N, predictive power, core-seconds): the cheapest per
    expected decision among those with power ≥ ``min_power``. A free look with little power (seeds another table
    trained) must not hide a dearer look that can decide the claim; but when none reaches ``min_power``, the
    earliest free look is still chosen: it trains nothing, its α is fixed by the design's schedule, and the design
    takes its looks in order (:func:`oscrepro.claims.sequential.sequential_verdict`), so any later look passes
    through it anyway. None otherwise. A look with no power at all is never worth its cost (``--min-power 0`` ranks
    every look with some power, not a division by zero)."""
    worth = [o for o in options if o[1] >= min_power and o[1] > 0]
    if worth:
        return min(worth, key=lambda o: (o[2] / o[1], o[0]))
    free = [o for o in options if o[2] == 0]
    return min(free) if free else None


def candidates(budget: str, results: Path, cap: int = DEFAULT_CAP, min_power: float = MIN_POWER
               ) -> list[Candidate]:
    """Every inconclusive claim at ``budget`` with what deciding it would take (module docstring), ranked; claims
    left out carry their ``reason``. ``min_power``: the predictive power below which a claim is left out as not worth
    its seeds (a price rule, not part of the test: the sequential design's error rate holds whichever claims are
    extended, since each claim's looks follow its own fixed schedule)."""
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
            c, refs = checked.claim.check, claim_refs(checked.claim)
            cand = Candidate(checked, list(dict.fromkeys(str(r["row"]) for r in refs)), 0, math.nan)
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
                ns = [_float(cells.get((str(r["row"]), str(r["column"])), {}).get("n")) for r in refs]
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
                                 for r in refs]
            elif own:  # its timed trials (analysis.trials_arg): looks over trials, capped from the spec's count
                cand.analysis, cand.trials, cand.rows = True, True, [ANALYSIS_TRIALS]
                claim_cap = TRIAL_CAP_FACTOR * spec.analysis_trials(budget, decided=False)
            cells = read_cells(table_csv(results, key, budget))
            n = cand.n_now = _claim_n(checked, cells)
            cand.reason = _no_spread(checked, cells)
            if cand.reason:
                continue
            entry = ledger.get(cand.key)
            cand.reason = stale_table(entry, n)
            if cand.reason:
                continue
            cand.pilot = n < 2 and not entry
            cand.looks = (list(entry["schedule"]) if entry
                          else S.plan_looks(PILOT_N if cand.pilot else n, max(claim_cap, n, PILOT_N)))
            if n >= claim_cap or not cand.looks or n >= cand.looks[-1]:
                cand.reason = f"at the {'trial' if cand.trials else 'seed'} cap ({n} ≥ {claim_cap})"
                continue
            if cand.trials:
                cand.run_s = trial_cost(spec, budget)
            elif cand.analysis:
                cand.run_s = analysis_seed_cost(spec, budget, results)
                if cand.rows != [ANALYSIS_SEEDS]:  # per cell: the mean cell's share of a seed
                    cand.run_s *= len(cand.rows) / max(own_cells(cells), 1)
            else:
                table, rows = cand.target
                cand.run_s, cand.have_s, cand.pending, cand.priced_on = run_costs(table, budget, rows, results,
                                                                                   range(n, cand.looks[-1]))
            if spec.kind != "runs":  # weights the look loads, kept without them: their retraining is part of the price
                cand.recover_s = recover_s(spec, budget, results, (cand.source[1] if cand.source else
                                                                    [str(r["row"]) for r in refs]))
            if not math.isfinite(cand.run_s):
                cand.reason = (f"no measured trial cost (analysis.{TRIAL_CORE_S}.{budget}) to price it"
                               if cand.trials else "no finished record with a run time to cost it")
                continue
            if cand.pilot:  # no spread: the first look is the price of the first interval
                cand.best_n, cand.power, cand.cost_s = cand.looks[0], math.nan, cand.cost_to(cand.looks[0])
                continue
            levels = S.look_levels(cand.looks)
            # (N, power, cost) of each later look; the best is the cheapest per expected decision among looks with
            # power ≥ min_power (a free look with little power must not hide a dearer one that can decide)
            options = [(m, _power(checked, cells, m, level, results), cand.cost_to(m))
                       for m, level in zip(cand.looks, levels, strict=True) if m > n]
            chosen = best_look(options, min_power)
            if chosen:
                cand.best_n, cand.power, cand.cost_s = chosen
            else:
                top = max(options, key=lambda o: o[1], default=None)
                best = f"{top[1]:.2f} at N = {top[0]}" if top and top[1] > 0 else "0"
                cand.reason = (f"predictive power below {min_power:g} up to {claim_cap} "
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
             f"{PILOT_POWER:g}. The cost includes retraining the source records whose weights a look loads and that "
             "were kept without them (\"incl. weights\"), priced by their records.", "",
             "| rank | claim | table | rows | n now | looks | best N | power | cost (core-min) | per decision |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for i, c in enumerate(live, 1):
        rows = ('; '.join(c.rows) + (f" (seeds of {c.source[0]}: {'; '.join(c.source[1])})" if c.source else "")
                ).replace("|", "\\|")  # a cell key's separator inside a markdown cell
        lines.append(f"| {i} | {c.checked.claim.id} | {c.checked.claim.table} | {rows} | {c.n_now} | "
                     f"{', '.join(map(str, c.looks))} | {c.best_n} | {'pilot' if c.pilot else f'{c.power:.2f}'} | "
                     f"{c.cost_s / 60:.1f}{f' (incl. weights {c.recover_s / 60:.0f})' if c.recover_s else ''}"
                     f"{' †' if c.priced_on else ''} | {c.score / 60:.1f} |")
    elsewhere = sorted({kind for c in live for kind in c.priced_on})
    if elsewhere:
        lines += ["", f"† Priced only from records trained on another CPU kind ({'; '.join(elsewhere)}); this "
                  f"machine is {here_kind()}. The same run can cost several times more or less here (bf16 on a CPU "
                  "without native bf16 support): the other prices come from records of this kind."]
    lines += ["", f"Left out ({len(cands) - len(live)}):", ""]
    lines += [f"- {c.checked.claim.id} ({c.checked.claim.table}): {c.reason}" for c in cands if c.reason]
    return "\n".join(lines) + "\n"
