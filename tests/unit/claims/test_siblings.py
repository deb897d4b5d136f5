"""A sibling claim (its cells gained seeds for another claim's look) is judged at the design's level for the look its
seed count reached, never at the fixed level again (oscrepro.claims.siblings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oscrepro.claims import sequential as S
from oscrepro.claims.scoreboard import check_claim, check_sibling, load_claims
from oscrepro.claims.siblings import sibling_level

TABLE = "coupledqk/table1"  # cpu: 3 seeds per row in its spec
CLAIM = "cqk-t1-hamiltonian-below-mlp-only"  # Hamiltonian (coupled) vs MLP-Only, ppl


def _cells(n: int, gap: float) -> dict:
    """Two cells whose difference (gap, one-seed sd 10) lies near the edge of a 95 % interval."""
    line = lambda mean: {"ours_mean": str(mean), "ours_std": "10", "n": str(n)}  # noqa: E731
    return {("Hamiltonian (coupled)", "ppl"): line(500.0 - gap), ("MLP-Only", "ppl"): line(500.0)}


def _claim():
    return next(c for c in load_claims(TABLE) if c.id == CLAIM)


def test_level_follows_the_look_its_seeds_reached(tmp_path: Path):
    levels = S.look_levels(S.plan_looks(3, 10))  # [3, 5, 8, 10]
    assert sibling_level(TABLE, "cpu", ["Hamiltonian (coupled)", "MLP-Only"], 3, tmp_path) is None  # the spec's n
    for n, k in ((5, 1), (7, 1), (8, 2), (10, 3)):
        level, why = sibling_level(TABLE, "cpu", ["Hamiltonian (coupled)", "MLP-Only"], n, tmp_path)
        assert level == pytest.approx(levels[k]) and level > 0.95
        assert f"look {k + 1} of the design [3, 5, 8, 10]" in why and f"up to n = {n}, above the spec's 3" in why


def test_a_sibling_on_more_seeds_is_judged_at_the_stricter_level(tmp_path: Path):
    """A gap whose 95 % interval just excludes 0 at n = 5 holds at the fixed level and is inconclusive at look 2's
    level (0.9898): the sibling rule reads the latter. At the spec's n the fixed level stands."""
    claim = _claim()
    fixed, sib = check_claim(claim, _cells(5, 16.0)), check_sibling(claim, _cells(5, 16.0), "cpu", tmp_path)
    assert fixed.status == "holds" and sib.status == "inconclusive"
    assert sib.ci[0] < fixed.ci[0] and sib.effect == pytest.approx(fixed.effect)
    assert "judged at level 0.9898" in sib.detail
    at_spec = check_sibling(claim, _cells(3, 40.0), "cpu", tmp_path)
    assert at_spec == check_claim(claim, _cells(3, 40.0))


def test_base_count_of_each_table_kind(tmp_path: Path):
    """The spec's own count, never the planner's raise: a runs table's rows (Table 6's medium cells were raised to
    5), an analysis's own seeds (Table 7: fine-tuning seeds, raised per cell), its timed trials (Table 10: 15, raised
    to 35), and an analysis read from another table's seeds (Table 12 reads Table 1's LMs: 3 at cpu)."""
    from oscrepro.claims.siblings import base_count
    from oscrepro.tables.spec import load_spec

    assert base_count(load_spec("coupledqk/table6"), "cpu", ["Standard", "Coupled QK (Hamiltonian)"],
                      tmp_path) == (3, False)
    t7 = load_spec("coupledqk/table7")
    assert base_count(t7, "cpu", ["Standard"], tmp_path) == (t7.analysis_seeds("cpu", decided=False), False)
    assert base_count(load_spec("coupledqk/table10"), "cpu", ["Euler"], tmp_path) == (15, True)
    assert base_count(load_spec("coupledqk/table12"), "cpu", ["Standard | ours"], Path("results")) == (3, False)
    assert base_count(load_spec("coupledqk/table1"), "cpu", ["no such row"], tmp_path) is None


def test_one_raised_cell_makes_a_sibling(tmp_path: Path):
    """A claim whose cells read n 5/3 (one row raised for another claim's look) has been looked at again: it is
    judged at look 2's level (0.9898), not at the fixed 95 % that its smaller cell alone would give."""
    claim = _claim()
    cells = _cells(5, 16.0)
    cells[("MLP-Only", "ppl")]["n"] = "3"
    fixed, sib = check_claim(claim, cells), check_sibling(claim, cells, "cpu", tmp_path)
    assert "level 0.95," in fixed.detail and "judged at level 0.9898" in sib.detail
    assert "up to n = 5, above the spec's 3" in sib.detail and sib.ci[0] < fixed.ci[0]
