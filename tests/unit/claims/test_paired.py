"""Paired verdicts: two cells measured on the same runs are judged by the paired t on per-run differences.

Welch's interval assumes independent cells. On the same runs Var(a − b) = Var a + Var b − 2 Cov: under negative
correlation Welch is too narrow and decides false claims above its nominal rate, which the null simulation below
shows and the paired rule does not do; under positive correlation Welch is too wide. The per-run values travel
from the aggregator (runs tables) or an analysis adapter (:class:`SeedStat` units) through the csv to the claims.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from oscrepro.claims.scoreboard import _stats, read_cells
from oscrepro.claims.verdict import CellStats, difference, ordering, paired_differences
from oscrepro.tables.aggregate import Cell, delta_cell
from oscrepro.tables.render import analysis_csv, write_csv
from oscrepro.tables.values import SeedStat, decode_units, encode_units

NOMINAL, SIMS = 0.025, 4000


def cell(values: list[float], units: list[str] | None) -> CellStats:
    v = np.asarray(values, dtype=float)
    keyed = tuple(zip(units, map(float, v), strict=True)) if units else ()
    return CellStats(float(v.mean()), float(v.std(ddof=1)), len(v), keyed)


def test_paired_interval_is_scipys_matched_pairs_interval() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(1.0, 1.0, 6), rng.normal(0.0, 1.0, 6)
    runs = [f"r{i}" for i in range(6)]
    v = difference(cell(list(a), runs), cell(list(b), runs), ">", 0.9)
    ref = stats.ttest_rel(a, b).confidence_interval(0.9)
    assert v.test == "paired t" and "n 6 pairs" in v.detail
    assert v.ci == pytest.approx((ref.low, ref.high), rel=1e-10)
    assert v.effect == pytest.approx(float(np.mean(a - b)))


def test_units_pair_by_run_id_not_by_order() -> None:
    a = cell([1.0, 2.0, 3.0], ["x", "y", "z"])
    b = CellStats(2.0, 1.0, 3, (("z", 2.5), ("x", 0.5), ("y", 1.5)))
    assert paired_differences(a, b) == [0.5, 0.5, 0.5]


@pytest.mark.parametrize("b_units", [None, ["r0", "r1", "q2"]])
def test_cells_of_other_runs_stay_welch(b_units: list[str] | None) -> None:
    a, b = cell([1.0, 2.0, 3.5], ["r0", "r1", "r2"]), cell([0.0, 0.5, 1.0], b_units)
    assert paired_differences(a, b) is None
    assert difference(a, b, ">").test == "Welch t"


def test_null_simulation_welch_breaks_on_same_runs_paired_does_not() -> None:
    """The same runs, negatively correlated cells, true difference exactly 0: Welch's false "holds" rate is far
    above nominal; the paired one stays within its binomial tolerance. A real effect on positively correlated cells
    is decided by the paired t, and mostly not by Welch."""
    rng = np.random.default_rng(7)
    n, rho = 5, -0.8
    cov = [[1.0, rho], [rho, 1.0]]
    draws = rng.multivariate_normal([0.0, 0.0], cov, size=(SIMS, n))  # (sims, n runs, 2 cells)
    runs = [f"run{i}" for i in range(n)]
    tol = float(stats.binom.ppf(1 - 1e-3, SIMS, NOMINAL)) / SIMS

    def rate(shift: float, paired: bool) -> float:
        units = runs if paired else None
        out = [difference(cell(list(d[:, 0] + shift), units), cell(list(d[:, 1]), units), ">").status
               for d in draws]
        return out.count("holds") / SIMS

    assert rate(0.0, paired=True) <= tol
    assert rate(0.0, paired=False) > tol  # Welch reads the anti-correlated cells as independent: anti-conservative
    pos = rng.multivariate_normal([0.0, 0.0], [[1.0, 0.9], [0.9, 1.0]], size=(500, n))
    real = [difference(cell(list(d[:, 0] + 0.8), runs), cell(list(d[:, 1]), runs), ">").status for d in pos]
    welch = [difference(cell(list(d[:, 0] + 0.8), None), cell(list(d[:, 1]), None), ">").status for d in pos]
    assert real.count("holds") / 500 >= 0.8 > 0.3 >= welch.count("holds") / 500  # too wide when correlated


def test_ordering_pairs_each_link_over_the_same_runs() -> None:
    runs = ["a", "b", "c", "d"]
    cells = [cell([1.0, 2.0, 3.0, 4.0], runs), cell([1.5, 2.4, 3.6, 4.5], runs), cell([2.0, 3.0, 4.1, 5.0], runs)]
    v = ordering(cells, "increasing")
    assert v.status == "holds" and "paired t per pair" in v.detail
    assert ordering([CellStats(c.mean, c.std, c.n) for c in cells], "increasing").status == "inconclusive"


def test_delta_column_is_per_run_on_the_same_runs_and_a_mean_difference_otherwise() -> None:
    a = Cell(mean=2.0, n=3, values=[1.0, 2.0, 3.0], units=[("r0", 1.0), ("r1", 2.0), ("r2", 3.0)])
    b = Cell(mean=1.0, n=3, values=[0.5, 1.0, 1.5], units=[("r1", 1.0), ("r0", 0.5), ("r2", 1.5)])
    d = delta_cell(a, b)
    assert d.mean == pytest.approx(1.0) and d.n == 3 and d.std == pytest.approx(0.5)
    assert dict(d.units) == {"r0": 0.5, "r1": 1.0, "r2": 1.5}
    other = Cell(mean=1.0, n=3, values=[0.5, 1.0, 1.5], units=[("s0", 0.5), ("s1", 1.0), ("s2", 1.5)])
    d = delta_cell(a, other)
    assert d.mean == pytest.approx(1.0) and math.isnan(d.std) and not d.units


def test_units_travel_through_the_analysis_csv_to_the_claims(tmp_path: Path) -> None:
    runs = ["12f578348b82", "4bee31ce1641", "5159686cd063"]
    rows = [{"d_osc": 2, "random": SeedStat.of([3.0, 2.0, 4.0], 2, units=runs),
             "sequential": SeedStat.of([2.5, 1.9, 3.4], 2, units=runs), "note": "x"}]
    fields, lines = analysis_csv(["d_osc", "random", "sequential", "note"], rows)
    assert "random__units" in fields
    write_csv(tmp_path / "t.csv", fields, lines)
    cells = read_cells(tmp_path / "t.csv")
    assert ("2", "random__units") not in cells  # a numeric column, not a cell of its own
    claim = type("C", (), {"table": "toy/t", "id": "c"})()
    seq, rnd = (_stats(cells, {"row": "2", "column": c}, claim) for c in ("sequential", "random"))
    assert paired_differences(seq, rnd) == pytest.approx([-0.5, -0.1, -0.6])
    assert difference(seq, rnd, "<").test == "paired t"


def test_unit_encoding_round_trips_exactly_and_refuses_separators() -> None:
    units = (("a1", 0.1 + 0.2), ("b2", -3e-12))
    assert decode_units(encode_units(units)) == units and decode_units("") == ()
    with pytest.raises(ValueError, match="holds"):
        encode_units((("a;b", 1.0),))


def test_the_planner_prices_a_paired_claim_by_the_spread_of_its_per_run_differences() -> None:
    """Two cells of the same runs whose values move together: each cell's spread is large, the per-run difference's
    is small, and the planner's one-seed spread (hence its power) is the latter's, with n the pairs."""
    from oscrepro.claims.candidates import _effect_spread
    from oscrepro.claims.scoreboard import Checked, Claim
    from oscrepro.claims.verdict import Verdict

    runs = ["r0", "r1", "r2", "r3", "r4"]
    base = [1.0, 3.0, 5.0, 7.0, 9.0]
    line = {"row": "2", "budget": "cpu"}

    def csv_cell(values: list[float], units: list[str] | None) -> dict[str, str]:
        v = np.asarray(values)
        keyed = encode_units(list(zip(units, values, strict=True))) if units else ""
        return {**line, "ours_mean": str(v.mean()), "ours_std": str(v.std(ddof=1)), "n": "5", "units": keyed}

    claim = Claim(id="c", table="fqo/table6", text="t", where="w", weight="detail", check={
        "kind": "difference", "a": {"row": "2", "column": "seq"}, "b": {"row": "2", "column": "rnd"}, "sign": "<"})
    checked = Checked(claim, "cpu", Verdict("inconclusive", "paired t", math.nan, (math.nan, math.nan), ""), Path("t"))
    seq = [b - 0.5 + 0.01 * i for i, b in enumerate(base)]
    paired = {("2", "seq"): csv_cell(seq, runs), ("2", "rnd"): csv_cell(base, runs)}
    effect, spread, n, lo, _ = _effect_spread(checked, paired)
    assert effect == pytest.approx(-0.48) and n == 5 and lo == 0.0
    assert spread == pytest.approx(float(np.std(np.subtract(seq, base), ddof=1)))  # 0.0158, not √(s_a² + s_b²)
    unpaired = {("2", "seq"): csv_cell(seq, None), ("2", "rnd"): csv_cell(base, None)}
    assert _effect_spread(checked, unpaired)[1] == pytest.approx(math.hypot(np.std(seq, ddof=1), np.std(base, ddof=1)))
