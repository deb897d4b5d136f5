"""osciformer Sec. 5 complexity (oscrepro.papers.osciformer.complexity): the log-log fit, the sweep cells of the
spec, and the smoke build. Timings are measured, never asserted."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from oscrepro.papers.osciformer.complexity import AXES, exponents, loglog_slope, sweep_cells
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
        assert all(float(r[f"{lay} {q}"]) > 0 for lay in ("OsciFormer", "ContiFormer")
                   for q in ("f+b ms", "fwd ms", "f+b MB"))
    text = md.read_text()
    assert all(f"**Exponent in {s}**" in text for s in ("N", "d", "J"))
    assert (md.parent / kwargs["figure"]).exists()
