"""What one more seed (or trial) of a claim's cells costs, from the run records: the prices of
:mod:`oscrepro.claims.candidates`. A record's cost is its ``cpu_time_s`` (the process's CPU time while it trained),
or, in a record written before that field existed, ``wall_time_s`` x ``torch_threads``; weights a look loads from
records kept without them are priced at those records' cost (:func:`recover_s`).

A cell's price comes from its records trained on this machine's CPU kind when it has any (:func:`here_or_all`): the
same bf16 run costs several times more on a CPU without native bf16 (coupledqk Table 1's Euler seeds 3-4, priced at
16 core-min from AMD EPYC records, took 83 on an Intel Xeon without it, 2026-11-28). A cell with records of other
kinds only is priced from them and named (``elsewhere``), so the plan can say that its price may be far off here."""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path
from typing import NamedTuple

from oscrepro.claims.scoreboard import _float
from oscrepro.tables.spec import TRIAL_CORE_S, TableSpec, cell_key, load_spec


class RunCosts(NamedTuple):
    """What one more seed of a claim's run-backed cells costs (:func:`run_costs`)."""

    run_s: float  # core-seconds of one more seed of every cell (nan when a cell has no finished, timed record)
    have: dict[int, float]  # seed -> the part of run_s its finished records already cover
    pending: dict[int, dict[str, float]]  # seed -> {run config (overrides and seed): core-s} still to train
    elsewhere: frozenset[str]  # CPU kinds that priced a cell without a record of this machine's kind (empty: none)


def cpu_kind(device: str) -> str:
    """The CPU model of a record's ``device`` (``cpu: Intel(R) Xeon(R) Processor @ 2.50GHz (2 cores)`` ->
    ``Intel(R) Xeon(R) Processor``): records name it with or without the clock and with their core count."""
    kind = re.sub(r"^cpu:\s*", "", device.strip())
    return re.sub(r"\s*\(\d+ cores\)$|\s*@\s*[\d.]+\s*GHz", "", kind).strip()


@functools.cache
def here_kind() -> str:
    """This machine's CPU kind (:func:`cpu_kind` of the device a CPU run here records; read once: every claim's
    price asks for it)."""
    from oscrepro.utils.provenance import device_name

    return cpu_kind(device_name("cpu"))


def here_or_all(times: list[tuple[str, float]], here: str) -> tuple[float, frozenset[str]]:
    """The mean of ``(cpu kind, core-s)`` over the records of kind ``here`` when there are any, else over all,
    with the kinds that priced it then (nan and no kinds when ``times`` is empty)."""
    mine = [t for kind, t in times if kind == here]
    if mine:
        return sum(mine) / len(mine), frozenset()
    if not times:
        return math.nan, frozenset()
    return sum(t for _, t in times) / len(times), frozenset(kind for kind, _ in times)


def run_costs(key: str, budget: str, rows: list[str], results: Path, extra_seeds: range = range(0),
              here: str | None = None) -> RunCosts:
    """Core-seconds of one more seed of every run-backed cell of ``rows`` (each cell's mean recorded run time,
    from its records of CPU kind ``here`` (default: this machine's) where it has any: :func:`here_or_all`), and,
    for each seed of ``extra_seeds``, the part of that already covered by finished records of that seed (rows whose
    seeds another claim or table trained), and the runs still to train, keyed by their config (overrides and seed)
    with their price: two claims that need the same new run are charged for it once."""
    from oscrepro.runs.lookup import RunRequest, find_record
    from oscrepro.tables.build import planned_cells

    here = here_kind() if here is None else here
    none = RunCosts(math.nan, {}, {}, frozenset())
    spec, cells, _ = planned_cells(load_spec(key), budget, results, [])  # exactly the runs a build reads
    per_run: dict[Path, tuple[float, list[str]]] = {}  # one entry per distinct run config (a run's metric columns)
    elsewhere: set[str] = set()
    for (ri, _col), reqs in cells.items():
        if not in_units(spec.rows[ri].label, _col, rows) or not reqs or reqs[0].run_dir in per_run:
            continue
        times = []
        for r in reqs:
            st = r.record.status()
            if st.get("status") == "ok" and st.get("wall_time_s"):
                times.append((cpu_kind(str(st.get("device", ""))), status_core_s(st)))
        price, kinds = here_or_all(times, here)
        if not math.isfinite(price):
            return none
        elsewhere |= kinds
        per_run[reqs[0].run_dir] = (price, [o for o in reqs[0].overrides if not o.startswith("seed=")])
    if not per_run:  # no run-backed cell in those rows
        return none
    have: dict[int, float] = {}
    pending: dict[int, dict[str, float]] = {}
    for seed in extra_seeds:  # the request a build would make for this seed: its record may exist already
        for t, base in per_run.values():
            overrides = [*base, f"seed={seed}"]
            if find_record(RunRequest.compose(overrides)):
                have[seed] = have.get(seed, 0.0) + t
            else:
                pending.setdefault(seed, {})[" ".join(sorted(overrides))] = t
    return RunCosts(sum(t for t, _ in per_run.values()), have, pending, frozenset(elsewhere))


def in_units(label: str, column: str, units: list[str]) -> bool:
    """Whether cell (row ``label``, ``column``) is among ``units``: its whole row, or the cell itself."""
    return label in units or cell_key(label, column) in units


def own_cells(cells: dict) -> int:
    """Cells of an analysis table with a seed spread (n ≥ 2; a one-value cell, such as a paper column, has n = 1):
    what one of its seeds is shared by. A cell's price is then the mean cell's, which errs high for a cheap task
    (Table 7: a QNLI run ~160 s against SST-2's ~375 s)."""
    return sum(1 for cell in cells.values() if _float(cell.get("n")) >= 2)


def recover_s(spec: TableSpec, budget: str, results: Path, rows: list[str]) -> float:
    """Core-seconds of retraining the source records whose weights a look at analysis ``spec`` loads and that are
    kept without them (records are in git, checkpoints are not: :mod:`oscrepro.tables.recover`): the cells its
    planning function reads with ``checkpoints`` (coupledqk Table 12: Table 1's LMs), or every cell when a later
    stage trains runs on them (Table 7 fine-tunes Table 1's LMs), of the claim's ``rows`` (matched by label or source
    row; all cells when none match), priced by their records. A record trained on another CPU kind may retrain much
    slower here (bf16 without native support): this errs low then."""
    from oscrepro.runs.lookup import find_record
    from oscrepro.tables.build import analysis_needs
    from oscrepro.tables.recover import weightless
    from oscrepro.tables.sources import RunNeeds, planned_requests

    needs = analysis_needs(spec, budget, results)
    if needs is None:
        return 0.0
    loads = {k: c for k, c in needs.cells.items() if c.checkpoints or needs.then is not None}
    mine = {k: c for k, c in loads.items() if k in rows or c.row in rows} or loads
    reqs = planned_requests(RunNeeds(needs.table, mine), budget, results)
    found = [d for rs in reqs.values() for r in rs if (d := find_record(r)) is not None]
    return records_core_s(weightless(found), ok_only=True)


def experiment_records(spec: TableSpec, results: Path) -> list[Path]:
    """The run records under ``results/runs/<analysis.experiment>/`` (an analysis table's own seed runs)."""
    exp = spec.analysis.get("experiment")
    root = Path(results) / "runs" / str(exp) if exp else None
    return sorted(d for d in root.iterdir() if (d / "status.json").exists()) if root and root.is_dir() else []


def analysis_seed_cost(spec: TableSpec, budget: str, results: Path) -> float:
    """Core-seconds of one more seed of an analysis table's own runs: what its finished records under
    ``results/runs/<analysis.experiment>/`` took, over its current seed count (records of that experiment that
    another table trained count too, so this errs high); nan when there are none."""
    total = records_core_s(experiment_records(spec, results), ok_only=True)
    return total / spec.analysis_seeds(budget) if total > 0 else math.nan


def trial_cost(spec: TableSpec, budget: str) -> float:
    """Core-seconds of one more timed trial of an analysis table (``analysis.trial_core_s.<budget>``, measured and
    cited in its spec: a timing build leaves no run record to price it from); nan when the spec gives none."""
    value = (spec.analysis.get(TRIAL_CORE_S) or {}).get(budget)
    return float(value) if isinstance(value, int | float) and value > 0 else math.nan


def status_core_s(status: dict) -> float:
    """Core-seconds one record took: its ``cpu_time_s`` (the process's CPU time while it trained), or, in a record
    written before that field existed, ``wall_time_s`` × ``torch_threads`` of its ``status.json`` (which overstates the
    cost of a run trained beside other work: its threads waited for cores)."""
    if status.get("cpu_time_s") is not None:
        return float(status["cpu_time_s"])
    return float(status.get("wall_time_s") or 0) * float(status.get("torch_threads") or 1)


def records_core_s(record_dirs: list[Path], ok_only: bool = False) -> float:
    """Core-seconds the records in ``record_dirs`` took (``ok_only``: finished ones only), each status read once."""
    total = 0.0
    for d in record_dirs:
        path = Path(d) / "status.json"
        st = json.loads(path.read_text()) if path.exists() else {}
        if not ok_only or st.get("status") == "ok":
            total += status_core_s(st)
    return total
