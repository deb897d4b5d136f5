"""Every table builds at budget=smoke, with the paper's values only in the paper columns."""

from __future__ import annotations

import csv
import math

import pytest

from oscrepro.table import build_table
from oscrepro.tables.plan import plan
from oscrepro.tables.spec import available_tables, load_spec
from oscrepro.utils.provenance import provenance

# Smoke builds that train many LM models (vocabularies of 8-10K) take minutes on 2 cores: they run in
# `make test-all`; the fast suite still plans every cell of them (test_every_table_plans).
HEAVY = {"fqo/table4", "fqo/table5", "fqo/table6", "fqo/appc", "fqo/ode_inference", "leaderboard/wt2"}
TABLES = [pytest.param(k, marks=pytest.mark.slow) if k in HEAVY else k for k in available_tables()]


RUNS_TABLES = [k for k in available_tables() if load_spec(k).kind == "runs"]


@pytest.mark.parametrize("key", RUNS_TABLES)
def test_every_runs_table_plans(key):
    """Every runs-table cell composes to a config with a run id (cheap; no training)."""
    spec = load_spec(key)
    cells = plan(spec, "smoke")
    assert len(cells) == len(spec.rows) * len([c for c in spec.columns if c.delta is None])
    assert all(len(reqs) == spec.seeds["smoke"] for reqs in cells.values())


@pytest.mark.parametrize("key", TABLES)
def test_table_builds_at_smoke(key, results_dir):
    spec = load_spec(key)
    md = build_table(key, budget="smoke", results_dir=results_dir)
    assert md.parent == results_dir / spec.paper / "smoke"  # never over a paper-budget table
    text = md.read_text()
    paper_protocol = spec.kind == "analysis" and "smoke" not in spec.analysis.get("budgets", {})
    assert ("BELOW PAPER BUDGET" in text) != paper_protocol and "**commit**" in text  # flagged iff scaled down
    assert md.with_suffix(".csv").exists()
    if spec.kind != "runs":
        return
    assert f"**Trained on:** {provenance()['device']} (" in text  # the machine that trained the runs, with the count
    rows = list(csv.DictReader(open(md.with_suffix(".csv"))))
    assert len(rows) == len(spec.rows) * len(spec.columns)
    for r in rows:
        assert int(r["n_failed"]) == 0 and int(r["n_missing"]) == 0, r
    # reproduced numbers never equal the paper's (a copied number would): smoke runs are far from them
    for row in spec.rows:
        for col, value in row.paper.items():
            ours = next(r for r in rows if r["row"] == row.label and r["column"] == col)
            paper = value[0] if isinstance(value, list) else value
            if ours["ours_mean"] and not math.isnan(float(ours["ours_mean"])):
                assert float(ours["ours_mean"]) != pytest.approx(float(paper), abs=1e-9)


def test_table_reuses_runs_of_other_tables(results_dir, capsys):
    build_table("fqo/table2", budget="smoke", results_dir=results_dir)
    capsys.readouterr()
    build_table("fqo/table3", budget="smoke", results_dir=results_dir)
    assert "0 to train" in capsys.readouterr().out
