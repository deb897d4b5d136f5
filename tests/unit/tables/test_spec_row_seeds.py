"""A row's own ``seeds`` lower its seed count at a budget (a costly row), never raise it; the plan follows."""

from __future__ import annotations

from oscrepro.tables.plan import plan
from oscrepro.tables.spec import load_spec


def test_row_seeds_lower_only_that_row() -> None:
    spec = load_spec("leaderboard/wt2")
    osc = [r.label for r in spec.rows].index("osciformer")
    assert spec.rows[osc].seeds == {"cpu": 1}
    assert spec.seeds_for("cpu") == [0, 1, 2] and spec.seeds_for("cpu", 0) == [0, 1, 2]
    assert spec.seeds_for("cpu", osc) == [0]
    assert spec.seeds_for("smoke", osc) == [0]  # no row entry for smoke: the table's count
    spec.rows[0].seeds = {"cpu": 9}
    assert spec.seeds_for("cpu", 0) == [0, 1, 2]  # a row cannot ask for more than the table
    cells = plan(load_spec("leaderboard/wt2"), "cpu")
    assert len(cells[(osc, "ppl")]) == 1 and len(cells[(0, "ppl")]) == 3
