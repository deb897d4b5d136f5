"""osciformer Sec. 5 complexity (oscrepro.papers.osciformer.complexity): the log-log fit, the sweep cells of the
spec, and the smoke build. Timings are measured, never asserted."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from oscrepro.papers.osciformer import complexity
from oscrepro.papers.osciformer.complexity import (
    AXES,
    exponents,
    loglog_slope,
    measure,
    paired_ratio,
    sweep_cells,
    table_rows,
)
from oscrepro.table import build_table
from oscrepro.tables.spec import load_spec

KEY = "osciformer/sec5_complexity"


def _kwargs(budget: str) -> dict:
    """The analysis kwargs of ``budget`` as the table engine merges them (top level, then ``budgets``)."""
    spec = load_spec(KEY)
    kwargs = {k: v for k, v in spec.analysis.items() if k not in ("_target_", "budgets")}
    kwargs.update(spec.analysis["budgets"].get(budget, {}))
    return kwargs


def test_loglog_slope_recovers_a_known_exponent():
    """Exact power laws give their exponent; 5 % multiplicative noise over two decades moves it by < 0.05."""
    x = np.array([8.0, 16, 32, 64, 128, 256, 512])
    for p in (0.0, 1.0, 1.7, 2.0):
        assert loglog_slope(x, 3.0 * x ** p) == pytest.approx(p, abs=1e-9)
    noise = np.exp(np.random.default_rng(0).normal(0, 0.05, x.size))
    assert loglog_slope(x, 3.0 * x ** 2 * noise) == pytest.approx(2.0, abs=0.05)
    assert np.isnan(loglog_slope([4], [1.0]))


def test_exponents_per_sweep_on_synthetic_costs():
    """Measurements built from Sec. 5's laws (T_cf = N^2 J d, T_num = 80 N^2 d^2, M_cf = N^2 d, M_num = 80 N^2 d)
    give back the paper's exponents for each sweep, on the whole sweep and on its last segment."""
    base = {"seq_len": 32, "d_model": 64, "n_modes": 8}
    cells = sweep_cells(base, {"seq_len": [8, 16, 32], "d_model": [16, 64], "n_modes": [1, 2, 4, 8]})
    meas = {}
    for _, c in cells:
        n, d, j = c["seq_len"], c["d_model"], c["n_modes"]
        meas[(n, d, j)] = {"cf f+b ms": n * n * j * d, "cf fwd ms": 0.5 * n * n * j * d, "cf f+b MB": n * n * d,
                           "num f+b ms": 80 * n * n * d * d, "num fwd ms": 20 * n * n * d * d,
                           "num f+b MB": 80 * n * n * d}
    fits = exponents(cells, meas)
    expected = {"seq_len": (2, 2, 2, 2), "d_model": (1, 2, 1, 1), "n_modes": (1, 0, 0, 0)}
    for axis, (t_cf, t_num, m_cf, m_num) in expected.items():
        got = fits[axis]
        for key, p in (("cf f+b ms", t_cf), ("cf fwd ms", t_cf), ("num f+b ms", t_num), ("num fwd ms", t_num),
                       ("cf f+b MB", m_cf), ("num f+b MB", m_num)):
            assert got[key] == pytest.approx((p, p), abs=1e-9), (axis, key)


@pytest.mark.parametrize("budget", ["smoke", "cpu", "paper"])
def test_sweep_cells_are_the_spec(budget):
    """One row per listed value of each sweep, in the spec's order, each the base cell with only that axis moved."""
    kwargs = _kwargs(budget)
    base, sweeps = kwargs["base"], kwargs["sweeps"]
    cells = sweep_cells(base, sweeps)
    assert [a for a, _ in cells] == [a for a in AXES for _ in sweeps[a]]
    for axis in AXES:
        row = [c for a, c in cells if a == axis]
        assert [c[axis] for c in row] == list(sweeps[axis])
        assert all({k: v for k, v in c.items() if k != axis} == {k: v for k, v in base.items() if k != axis}
                   for c in row)
    assert budget == "paper" or kwargs["threads"] == 1  # scaled budgets time one thread


def test_smoke_build(tmp_path):
    """The spec builds at smoke: one row per sweep cell with the counted S = 80 (RK4 at step 0.1), positive times
    and memories, an exponent note per sweep and the figure beside the table."""
    md = build_table(KEY, budget="smoke", results_dir=tmp_path)
    kwargs = _kwargs("smoke")
    rows = list(csv.DictReader(open(md.with_suffix(".csv"))))
    cells = sweep_cells(kwargs["base"], kwargs["sweeps"])
    assert [(r["N"], r["d"], r["J"]) for r in rows] == [
        (str(c["seq_len"]), str(c["d_model"]), str(c["n_modes"])) for _, c in cells]
    for r in rows:
        assert r["paper 1/S"] == "1/80"
        trials = kwargs["rounds"] * kwargs["trials"]
        for lay in ("OsciFormer", "ContiFormer"):
            for q, n in (("f+b ms", trials), ("fwd ms", trials), ("f+b MB", kwargs["rounds"])):
                col = f"{lay} {q}"  # the claims read the mean, its std over the repeated measurements and their n
                assert float(r[col]) > 0 and int(r[f"{col}__n"]) == n >= 2, col
                assert math.isfinite(float(r[f"{col}__std"])) and float(r[f"{col}__std"]) >= 0, col
    text = md.read_text()
    assert all(f"**Exponent in {s}**" in text for s in ("N", "d", "J"))
    assert (md.parent / kwargs["figure"]).exists()


def _fake_samples(cf: list[float], num: list[float]) -> dict:
    """One cell's samples with the given closed-form and ODE trials for every quantity, S = 80."""
    return {"S": 80.0, **{f"cf {q}": list(cf) for q in complexity.QUANTITIES},
            **{f"num {q}": list(num) for q in complexity.QUANTITIES}}


def test_cells_carry_every_trial_and_ratios_pair_them():
    """A cell is mean ± std over all its trials (n shown), and cf/num is the mean of the per-trial ratios: trial i
    of one layer over trial i of the other. First the closed form is exactly 1/4 of the ODE layer in every trial
    while the machine slows 4x from trial to trial: the paired ratio is exactly 1/4. Then two trials whose
    paired ratios are 1 and 1/16: their mean, 17/32, is not the ratio of the means (2.5 / 10 = 1/4)."""
    cell = {"seq_len": 64, "d_model": 64, "n_modes": 8}
    cells = [("seq_len", cell)]
    cf, num = [1.0, 4.0, 16.0], [4.0, 16.0, 64.0]
    columns, (row,) = table_rows(cells, {(64, 64, 8): _fake_samples(cf, num)})
    stat = row["OsciFormer f+b ms"]
    assert (stat.mean, stat.n, stat.show_n) == (7.0, 3, True) and stat.std == pytest.approx(np.std(cf, ddof=1))
    assert row["ContiFormer f+b MB"].mean == 28.0 and row["ContiFormer f+b MB"].digits == 2
    assert str(row["f+b cf/num"]) == "1/4.0" and str(row["mem cf/num"]) == "1/4.0"
    assert str(row["paper J/(S d)"]) == "1/640" and str(row["paper 1/S"]) == "1/80"
    assert set(columns) <= set(row)
    _, (row,) = table_rows(cells, {(64, 64, 8): _fake_samples([4.0, 1.0], [4.0, 16.0])})
    assert float(row["f+b cf/num"]) == pytest.approx(1 / ((4 / 4 + 1 / 16) / 2))  # mean of 1 and 1/16, as 1/x
    with pytest.raises(ValueError, match="trial counts differ"):
        paired_ratio([1.0], [1.0, 2.0])


def test_measure_keeps_every_trial_in_round_order(monkeypatch):
    """``measure`` keeps each round's trials (not one median): injected timings come back concatenated in round
    order for both layers, index by index, and memory once per round; S must not change between rounds."""
    calls = {"time": 0, "mem": 0}

    def fake_time(cell, batch, n_heads, warmup, trials):
        calls["time"] += 1
        base = 100.0 * calls["time"]
        return {f"{lay} {q}": [base + i for i in range(trials)] for lay in ("cf", "num") for q in ("fwd ms", "f+b ms")}

    def fake_mem(cell, batch, n_heads):
        calls["mem"] += 1
        return {"S": 80.0, "cf f+b MB": 1.0, "num f+b MB": 10.0 + calls["mem"]}

    monkeypatch.setattr(complexity, "time_cell", fake_time)
    monkeypatch.setattr(complexity, "memory_cell", fake_mem)
    cells = sweep_cells({"seq_len": 8, "d_model": 8, "n_modes": 2}, {"seq_len": [8], "d_model": [8], "n_modes": [2]})
    samples = measure(cells, batch=1, n_heads=1, warmup=0, trials=2, rounds=3)
    assert list(samples) == [(8, 8, 2)]  # the base cell, shared by the three sweeps, measured once per round
    s = samples[(8, 8, 2)]
    assert s["cf f+b ms"] == s["num f+b ms"] == [100.0, 101.0, 200.0, 201.0, 300.0, 301.0]
    assert s["num f+b MB"] == [11.0, 12.0, 13.0] and s["cf f+b MB"] == [1.0] * 3 and s["S"] == 80.0
    _, rows = table_rows(cells, samples)
    assert {r["ContiFormer fwd ms"].n for r in rows} == {6} and {r["ContiFormer f+b MB"].n for r in rows} == {3}
    monkeypatch.setattr(complexity, "memory_cell", lambda cell, b, h: {"S": 80.0 + calls["time"], "cf f+b MB": 1.0,
                                                                       "num f+b MB": 1.0})
    with pytest.raises(RuntimeError, match="S changed"):
        measure(cells, batch=1, n_heads=1, warmup=0, trials=1, rounds=2)
