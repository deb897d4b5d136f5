"""The decide planner: predictive power against a simulation, extra seeds reaching the spec, the ledger's verdict."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from oscrepro.claims.decide import write_decided
from oscrepro.claims.ledger import ledger_verdict
from oscrepro.claims.power import predictive_power
from oscrepro.claims.sequential import look_levels
from oscrepro.runs.compose import CONF_DIR
from oscrepro.tables.spec import load_spec


def _simulated_power(effect: float, spread: float, n: int, big_n: int, level: float, lo: float,
                     hi: float | None, draws: int = 200_000, seed: int = 0) -> float:
    """Monte Carlo of the predictive distribution: true effect ~ N(effect, spread²/n) (flat prior), then the
    mean of N − n new seeds, the final estimate and its interval (known spread), decided as the planner defines."""
    rng = np.random.default_rng(seed)
    delta = rng.normal(effect, spread / math.sqrt(n), draws)
    new = rng.normal(delta, spread / math.sqrt(big_n - n))
    final = (n * effect + (big_n - n) * new) / big_n
    half = stats.t.ppf(0.5 + level / 2, big_n - 1) * spread / math.sqrt(big_n)
    if hi is None:
        return float(np.mean((final - half > lo) | (final + half < lo)))
    inside = (final - half >= lo) & (final + half <= hi)
    outside = (final - half > hi) | (final + half < lo)
    return float(np.mean(inside | outside))


@pytest.mark.parametrize(("effect", "spread", "n", "big_n", "lo", "hi"), [
    (1.0, 2.0, 3, 8, 0.0, None),    # a difference: moderate effect
    (0.1, 2.0, 3, 10, 0.0, None),   # effect near the boundary: little power
    (-1.2, 1.0, 3, 5, 0.0, None),   # the other side (contradiction) decides too
    (0.2, 0.5, 3, 10, -1.0, 1.0),   # within a band: inside
    (1.5, 0.6, 3, 8, -1.0, 1.0),    # within: outside the band
])
def test_predictive_power_matches_simulation(effect, spread, n, big_n, lo, hi):
    ours = predictive_power(effect, spread, n, big_n, 0.95, lo, hi)
    assert ours == pytest.approx(_simulated_power(effect, spread, n, big_n, 0.95, lo, hi), abs=0.01)


def test_predictive_power_nothing_to_gain():
    assert predictive_power(1.0, 1.0, 5, 5, 0.95, 0.0) == 0.0  # no new seeds
    assert predictive_power(1.0, math.nan, 3, 8, 0.95, 0.0) == 0.0  # no spread estimate
    # a clear effect becomes near-certain with many seeds; an estimate at the boundary is worth less
    assert predictive_power(2.0, 1.0, 3, 40, 0.95, 0.0) > 0.95
    assert predictive_power(0.0, 1.0, 3, 40, 0.95, 0.0) < predictive_power(1.0, 1.0, 3, 40, 0.95, 0.0)


def test_decided_seeds_raise_only_the_named_rows(tmp_path: Path):
    conf = tmp_path / "conf"
    (conf / "table" / "fqo").mkdir(parents=True)
    shutil.copy(CONF_DIR / "table" / "fqo" / "table2.yaml", conf / "table" / "fqo" / "table2.yaml")
    before = load_spec("fqo/table2", conf)
    rows = [r.label for r in before.rows]
    base = [len(before.seeds_for("cpu", i)) for i in range(len(rows))]
    write_decided("cpu", "fqo/table2", [rows[0]], base[0] + 2, conf)
    write_decided("cpu", "fqo/table2", [rows[0]], base[0] + 1, conf)  # never lowers
    after = load_spec("fqo/table2", conf)
    assert len(after.seeds_for("cpu", 0)) == base[0] + 2
    assert [len(after.seeds_for("cpu", i)) for i in range(1, len(rows))] == base[1:]
    assert len(after.seeds_for("paper", 0)) == len(before.seeds_for("paper", 0))  # other budgets untouched


def _look(k: int, n: int, status: str, level: float) -> dict:
    return {"look": k, "n": n, "level": level, "status": status, "effect": 0.5, "ci": [0.1, 0.9], "detail": "d"}


def test_ledger_verdict_first_decisive_look_wins():
    lv = look_levels([3, 5, 8])
    entry = {"schedule": [3, 5, 8], "looks": [_look(1, 3, "inconclusive", lv[0]), _look(2, 5, "holds", lv[1]),
                                               _look(3, 8, "contradicted", lv[2])]}
    v = ledger_verdict(entry)
    assert v.status == "holds" and "decided at look 2 of 3 (n = 5)" in v.detail
    pending = ledger_verdict({"schedule": [3, 5, 8], "looks": [_look(1, 3, "inconclusive", lv[0])]})
    assert pending.status == "inconclusive" and "next look at n = 5" in pending.detail
    with pytest.raises(ValueError, match="judged at level 0.95"):  # a look judged at the fixed 95 % is refused
        ledger_verdict({"schedule": [3, 5, 8], "looks": [_look(1, 3, "holds", 0.95)]})


def test_core_seconds_of_trained_records(tmp_path: Path):
    """A look's cost: wall time × threads of each finished record; a record without a status counts nothing."""
    import json

    from oscrepro.claims.prices import records_core_s

    for name, wall, threads in (("a", 100.0, 1), ("b", 50.0, 2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "status.json").write_text(json.dumps({"wall_time_s": wall, "torch_threads": threads}))
    (tmp_path / "c").mkdir()
    assert records_core_s([tmp_path / "a", tmp_path / "b", tmp_path / "c"]) == pytest.approx(200.0)
    # a record with its CPU time is priced by it, not by wall x threads (a run that waited for cores)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "status.json").write_text(json.dumps({"wall_time_s": 400.0, "torch_threads": 2,
                                                            "cpu_time_s": 150.0}))
    assert records_core_s([tmp_path / "a", tmp_path / "d"]) == pytest.approx(250.0)


def test_ledger_look_with_cost_still_judged():
    lv = look_levels([3, 5])
    entry = {"schedule": [3, 5], "looks": [{**_look(1, 3, "holds", lv[0]), "core_s": 1234.5}]}
    assert ledger_verdict(entry).status == "holds"


def test_a_failed_look_is_said_and_not_retried(monkeypatch, tmp_path: Path, capsys):
    """A look that cannot be taken (a seed diverged, so the cells have fewer seeds than the look plans) stops
    neither the round nor the run, and the claim is not extended again in the same run (no endless loop)."""
    import oscrepro.tables.build as build
    import oscrepro.tables.launch as launch_mod
    from oscrepro.claims import decide

    class _Claim:
        id, table = "x-claim", "osciformer/fig5_forecast"

    class _Checked:
        claim, budget = _Claim(), "cpu"

    calls = {"candidates": 0, "builds": 0}

    def fake_candidates(*_a, **_k):
        calls["candidates"] += 1
        return [decide.Candidate(_Checked(), ["(analysis seeds)"], 3, 10.0, best_n=5, power=0.9, cost_s=20.0,
                                 looks=[3, 5, 8, 10], analysis=True)]

    def failing_look(*_a, **_k):
        raise RuntimeError("the table's cells have n = 4 seeds where look 2 plans 5")

    monkeypatch.setattr(decide, "candidates", fake_candidates)
    monkeypatch.setattr(decide, "write_decided", lambda *a, **k: None)
    monkeypatch.setattr(decide, "take_look", failing_look)
    monkeypatch.setattr(decide, "refresh_table_claims", lambda *a, **k: None)
    monkeypatch.setattr(decide, "load_ledger", lambda *a, **k: {"x-claim@cpu": {}})
    pools: list[object] = []

    def fake_build(key, budget, launcher="inprocess", **_k):
        calls["builds"] += 1
        pools.append(launcher)

    monkeypatch.setattr(build, "build_table", fake_build)
    monkeypatch.setattr(launch_mod, "launch", lambda *a, **k: None)
    assert decide.run("cpu", 1.0, tmp_path, launcher="joblib", workers=2) == []
    assert calls == {"candidates": 2, "builds": 1}
    # the analysis table is built in the look's pool: the weights it recovers retrain 2 at a time, not one by one
    assert pools == ["joblib"]
    assert "x-claim@cpu: look not taken: the table's cells have n = 4" in capsys.readouterr().out


def test_existing_seeds_cost_nothing():
    """Seeds whose records exist (compute-matched's 1 x steps rows are Table 1's runs, whose seeds 3-4 the planner
    trained for another claim) are priced at zero; a seed without records costs the full per-seed time."""
    from oscrepro.claims.candidates import Candidate
    from oscrepro.claims.prices import run_costs

    rows = ["Hamiltonian (coupled, 1 x steps)", "Standard (1 x steps)"]
    # seed 11 is past every committed seed of these rows (the planner's cap is 10 seeds: 0-9)
    run_s, have, *_ = run_costs("coupledqk/compute_matched", "cpu", rows, Path("results"), range(3, 12), AMD)
    assert math.isfinite(run_s) and run_s > 100
    assert have.get(3) == pytest.approx(run_s) and have.get(4) == pytest.approx(run_s)
    assert 11 not in have
    cand = Candidate(None, rows, 3, run_s, have_s=have)  # type: ignore[arg-type]
    assert cand.cost_to(5) == pytest.approx(0.0)
    assert cand.cost_to(12) - cand.cost_to(11) == pytest.approx(run_s)


def test_analysis_of_every_source_seed_is_decided_through_its_source():
    """fqo Table 6 reads every seed of Table 4's TinyStories oscillator cells: its claims are extended through those
    rows. osciformer Figure 5 trains seeds of its own (no source rows); fqo's ODE-inference table reads one fixed
    seed (more source seeds would not change it)."""
    from oscrepro.claims.reach import source_rows

    results = Path("results")
    table, rows = source_rows(load_spec("fqo/table6"), "cpu", results, ["2", "8"])
    assert table == "fqo/table4"
    assert rows == ["TinyStories, d_osc=2", "TinyStories, d_osc=8", "TinyStories, d_osc=32"]
    assert source_rows(load_spec("osciformer/fig5_forecast"), "cpu", results, ["x"]) is None
    assert source_rows(load_spec("fqo/ode_inference"), "cpu", results, ["x"]) is None


def test_timed_trials_are_remeasured_whole_at_each_look():
    """A timing claim's look re-measures all its trials (they are not nested like seeds): reaching look 3 of
    [8, 12, 18, ...] from 8 costs 12 + 18 trials, not 10."""
    from oscrepro.claims.candidates import Candidate

    cand = Candidate(None, ["(analysis trials)"], 8, 10.0, looks=[8, 12, 18, 27, 32], trials=True)  # type: ignore[arg-type]
    assert cand.cost_to(12) == pytest.approx(120.0)
    assert cand.cost_to(18) == pytest.approx(300.0)
    seeds = Candidate(None, ["x"], 8, 10.0, looks=[8, 12, 18, 27, 32])  # type: ignore[arg-type]
    assert seeds.cost_to(18) == pytest.approx(100.0)


def test_only_extends_the_named_claims(monkeypatch, tmp_path: Path):
    """``--only``: the other live candidates are ranked but not extended (no seeds written, no look taken)."""
    import oscrepro.tables.build as build
    import oscrepro.tables.launch as launch_mod
    from oscrepro.claims import decide

    def checked(cid):
        claim = type("C", (), {"id": cid, "table": "osciformer/fig5_forecast"})()
        return type("K", (), {"claim": claim, "budget": "cpu"})()

    rounds = []

    def live():
        return [decide.Candidate(checked(cid), ["(analysis seeds)"], 3, 10.0, best_n=5, power=0.9, cost_s=20.0,
                                 looks=[3, 5, 8, 10], analysis=True) for cid in ("a-claim", "b-claim")]

    def fake_candidates(*_a, **_k):  # the second round finds both decided (the fakes leave no records to count)
        rounds.append(1)
        return [] if len(rounds) > 1 else live()

    written, looked = [], []
    monkeypatch.setattr(decide, "candidates", fake_candidates)
    monkeypatch.setattr(decide, "write_decided", lambda *a, **k: written.append(a))
    monkeypatch.setattr(decide, "take_look", lambda c, *a, **k: looked.append(c.key) or {"look": 2, "n": 5,
                                                                                           "status": "holds"})
    monkeypatch.setattr(decide, "refresh_table_claims", lambda *a, **k: None)
    monkeypatch.setattr(decide, "load_ledger", lambda *a, **k: {"a-claim@cpu": {}, "b-claim@cpu": {}})
    monkeypatch.setattr(build, "build_table", lambda *a, **k: None)
    monkeypatch.setattr(launch_mod, "launch", lambda *a, **k: None)
    monkeypatch.setattr(decide, "experiment_records", lambda *a, **k: [])
    decide.run("cpu", 1.0, tmp_path, only={"b-claim"})
    assert looked == ["b-claim@cpu"] and len(written) == 1
    looked.clear()
    monkeypatch.setattr(decide, "candidates", lambda *a, **k: live())  # live every round
    decide.run("cpu", 1.0, tmp_path, only={"b-claim"}, rounds=1)  # would loop (the fakes record no spend) without
    assert looked == ["b-claim@cpu"]


def test_claims_sharing_new_runs_pay_for_them_once(monkeypatch, tmp_path: Path):
    """Fig. 3's dip and Table 1's MLP-Only claim both need Table 1's Standard seeds 5-7: with room for those runs
    once, both looks are taken in the same round (priced per claim, the second would not fit)."""
    import oscrepro.tables.build as build
    import oscrepro.tables.launch as launch_mod
    from oscrepro.claims import decide

    def checked(cid):
        claim = type("C", (), {"id": cid, "table": "coupledqk/table1"})()
        return type("K", (), {"claim": claim, "budget": "cpu"})()

    rounds, looked = [], []
    shared = {3: {"attention=softmax seed=3": 100.0}, 4: {"attention=softmax seed=4": 100.0}}

    def fake_candidates(*_a, **_k):
        rounds.append(1)
        return [] if len(rounds) > 1 else [
            decide.Candidate(checked(cid), ["Standard"], 3, 100.0, best_n=5, power=0.9, cost_s=200.0,
                             looks=[3, 5, 8, 10], pending=shared) for cid in ("a-claim", "b-claim")]

    monkeypatch.setattr(decide, "candidates", fake_candidates)
    monkeypatch.setattr(decide, "write_decided", lambda *a, **k: None)
    monkeypatch.setattr(decide, "take_look", lambda c, *a, **k: looked.append(c.key) or {"look": 2, "n": 5,
                                                                                           "status": "holds"})
    monkeypatch.setattr(decide, "refresh_table_claims", lambda *a, **k: None)
    monkeypatch.setattr(decide, "load_ledger", lambda *a, **k: {"a-claim@cpu": {}, "b-claim@cpu": {}})
    monkeypatch.setattr(build, "build_table", lambda *a, **k: None)
    monkeypatch.setattr(build, "planned_cells", lambda *a, **k: (None, {}, None))
    monkeypatch.setattr(launch_mod, "launch", lambda *a, **k: None)
    monkeypatch.setattr(decide, "_row_runs", lambda *a, **k: set())
    decide.run("cpu", 250 / 3600, tmp_path)
    assert looked == ["a-claim@cpu", "b-claim@cpu"]


def test_a_free_look_with_little_power_does_not_hide_one_that_can_decide():
    """Table 1's MLP-Only claim after the MLP-Only table trained its seeds: the look at 5 is free but has power 0.02;
    the look at 8 (power 0.13) is the one to rank by, and the claim stays live."""
    from oscrepro.claims.candidates import best_look

    assert best_look([(5, 0.02, 0.0), (8, 0.13, 100.0), (10, 0.2, 300.0)]) == (8, 0.13, 100.0)
    assert best_look([(5, 0.5, 0.0), (8, 0.9, 100.0)]) == (5, 0.5, 0.0)  # free and able to decide: best
    # nothing reaches MIN_POWER: the free look is still taken (it trains nothing; its α is fixed by the schedule,
    # and every later look passes through it), the dearer ones are not
    assert best_look([(5, 0.02, 0.0), (8, 0.05, 100.0)]) == (5, 0.02, 0.0)
    assert best_look([(5, 0.02, 10.0), (8, 0.05, 100.0)]) is None  # no free look, none with power: left out
    assert best_look([(8, 0.01, 0.0), (10, 0.02, 0.0)]) == (8, 0.01, 0.0)  # the earliest free look
    assert best_look([(5, 0.02, 0.0), (8, 0.05, 100.0)], min_power=0.04) == (8, 0.05, 100.0)  # --min-power
    # --min-power 0: a look with no power is never ranked by cost per decision (it used to divide by zero)
    assert best_look([(5, 0.0, 0.0), (8, 0.0, 100.0), (10, 0.01, 300.0)], min_power=0) == (10, 0.01, 300.0)
    assert best_look([(5, 0.0, 0.0), (8, 0.0, 100.0)], min_power=0) == (5, 0.0, 0.0)  # the earliest free look


def test_a_claim_on_one_column_raises_that_column_only(tmp_path: Path):
    """coupledqk Table 6's medium-MQAR claim reads the medium cells of two rows: a look raises those cells
    (``row | medium`` in conf/decide), plans the extra seeds in that column only, and is priced at the medium runs,
    not at the rows' hard runs that cost 3-17 x more."""
    from oscrepro.claims.candidates import _units
    from oscrepro.claims.prices import run_costs
    from oscrepro.claims.scoreboard import check_table
    from oscrepro.tables.plan import plan
    from oscrepro.tables.spec import cell_key

    key = "coupledqk/table6"
    checked = next(c for c in check_table(key, "cpu", Path("results")) if c.claim.id == "cqk-t6-medium-above-standard")
    units = _units(load_spec(key), checked)
    assert units == [cell_key("Coupled QK (Hamiltonian)", "medium"), cell_key("Standard", "medium")]
    # priced as on the Intel Xeon that trained most of these records (two AMD records of Standard | medium are
    # wall-time priced at 4,132 and 7,478 core-s: trained beside other work)
    cell_s = run_costs(key, "cpu", units, Path("results"), here=INTEL).run_s
    row_s = run_costs(key, "cpu", ["Coupled QK (Hamiltonian)", "Standard"], Path("results"), here=INTEL).run_s
    assert 0 < cell_s < row_s / 3  # the medium runs only (≈ 1,060 s of ≈ 7,700 s per seed of both rows)

    conf = tmp_path / "conf"
    (conf / "table" / "coupledqk").mkdir(parents=True)
    shutil.copy(CONF_DIR / "table" / f"{key}.yaml", conf / "table" / f"{key}.yaml")
    write_decided("cpu", key, units, 5, conf)
    spec = load_spec(key, conf)
    std = [r.label for r in spec.rows].index("Standard")
    assert len(spec.seeds_for("cpu", std, "medium")) == 5
    assert len(spec.seeds_for("cpu", std, "hard")) == len(spec.seeds_for("cpu", std)) == 3
    cells = plan(spec, "cpu")
    assert [len(cells[(std, c)]) for c in ("easy", "medium", "hard")] == [3, 5, 3]
    assert spec.own_counts("cpu") == {"Standard | medium": 5, "Coupled QK (Hamiltonian) | medium": 5}


def test_a_look_that_loads_weightless_records_pays_for_their_retraining(tmp_path: Path):
    """coupledqk Table 7 fine-tunes Table 1's seed-0 LMs: a look on its Diff/Standard QNLI cells must first retrain
    those two LMs where their records were kept without weights (a fresh checkout): their recorded core-seconds are
    in the price, once; with the checkpoints present, nothing."""
    from oscrepro.claims.candidates import Candidate
    from oscrepro.claims.prices import records_core_s, recover_s
    from oscrepro.runs.compose import CKPT_NAME
    from oscrepro.tables.spec import load_spec

    src = Path("results/runs/coupledqk/lm")
    dst = tmp_path / "runs" / "coupledqk" / "lm"
    for d in src.iterdir():  # the records only (a few KB each), never a checkpoint
        if (d / "status.json").exists():
            (dst / d.name).mkdir(parents=True)
            for f in ("config.yaml", "status.json", "metrics.json"):
                if (d / f).exists():
                    shutil.copy(d / f, dst / d.name / f)
    spec = load_spec("coupledqk/table7")
    price = recover_s(spec, "cpu", tmp_path, ["Diff Attention", "Standard"])
    assert 0 < price < records_core_s(list(dst.iterdir()), ok_only=True)  # some of the LMs, not all
    one = recover_s(spec, "cpu", tmp_path, ["Standard"])
    assert 0 < one < price  # one LM, not two
    cand = Candidate(None, ["x"], 3, 100.0, recover_s=price, looks=[3, 5, 8])  # type: ignore[arg-type]
    assert cand.cost_to(5) == pytest.approx(price + 200.0) and cand.cost_to(3) == 0.0
    for d in dst.iterdir():  # with every checkpoint present the look loads them: nothing to retrain
        (d / "checkpoints").mkdir()
        (d / "checkpoints" / CKPT_NAME).write_bytes(b"0")
    assert recover_s(spec, "cpu", tmp_path, ["Diff Attention", "Standard"]) == 0.0


def test_a_table_older_than_its_last_look_is_not_planned():
    """A table left at n = 5 after a look at n = 8 (its rebuild not kept) would re-plan the n = 8 look: no runs to
    train, an analysis rebuilt for nothing, then the look refused. The planner says so instead."""
    from oscrepro.claims.candidates import stale_table

    entry = {"looks": [{"look": 1, "n": 5}, {"look": 2, "n": 8}]}
    assert "n = 5 seeds but look 2 was taken at n = 8" in stale_table(entry, 5)
    assert stale_table(entry, 8) is None and stale_table(entry, 10) is None
    assert stale_table(None, 3) is None and stale_table({"looks": []}, 3) is None


AMD, INTEL = "AMD EPYC", "Intel(R) Xeon(R) Processor"  # the CPU kinds of the committed records


def test_a_cell_is_priced_from_records_of_this_machines_cpu_kind_where_it_has_any():
    """coupledqk Table 1's Euler row: 3 records trained on AMD EPYC (bf16 native) and 2 on an Intel Xeon without
    native bf16 (the planner's look 2, 2026-11-28). Priced on each kind from that kind's records alone; on a kind
    with no record, from all of them, and the plan names the kinds that priced it."""
    from oscrepro.claims.prices import cpu_kind, here_or_all, run_costs

    assert cpu_kind("cpu: Intel(R) Xeon(R) Processor @ 2.50GHz (2 cores)") == INTEL
    assert cpu_kind("cpu: Intel(R) Xeon(R) Processor (2 cores)") == INTEL and cpu_kind("cpu: AMD EPYC (2 cores)") == AMD
    assert here_or_all([(AMD, 1.0), (INTEL, 5.0), (INTEL, 7.0)], INTEL) == (6.0, frozenset())
    assert here_or_all([(AMD, 1.0), (INTEL, 5.0)], "Other") == (3.0, frozenset({AMD, INTEL}))
    row = ["Euler (coupled)"]
    amd = run_costs("coupledqk/table1", "cpu", row, Path("results"), here=AMD)
    intel = run_costs("coupledqk/table1", "cpu", row, Path("results"), here=INTEL)
    other = run_costs("coupledqk/table1", "cpu", row, Path("results"), here="Other CPU")
    assert amd.elsewhere == intel.elsewhere == frozenset() and other.elsewhere == frozenset({AMD, INTEL})
    assert intel.run_s > 3 * amd.run_s  # measured: ≈ 2,490 core-s per run against ≈ 480
    assert amd.run_s < other.run_s < intel.run_s
