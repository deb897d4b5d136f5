"""The per-paper reproduction report (oscrepro/claims/report.py) on a tiny fixture whose verdicts are known: the
scope by weight with the quotes, per claim its verdict and budget, what matched, what deviated with the verdict's
numbers or the spec's measured reason, what needs a larger budget, and the roll-up line."""

from __future__ import annotations

import csv
from pathlib import Path

import yaml

from oscrepro.claims.report import paper_title, render_report, rollup, write_reports
from oscrepro.claims.tally import collect


def _cell(row: str) -> dict:
    return {"row": row, "column": "acc"}


def _diff(cid: str, a: str, b: str, **extra) -> dict:
    return {"id": cid, "text": f"{a} beats {b}", "where": "§4.1, Table 1",
            "check": {"kind": "difference", "a": _cell(a), "b": _cell(b), "sign": ">"}, **extra}


REASON = "trained on 1,149 clips: every model far below the paper"
CLAIMS = [
    _diff("central-holds", "A", "B", weight="central", quote="A is better than B (Table 1)."),
    _diff("central-contradicted", "B", "A", weight="central"),
    _diff("supporting-na", "C", "B", not_answerable={"cpu": REASON}),
    _diff("detail-inconclusive", "C", "A", weight="detail"),
    {"id": "count", "text": "P has 100 parameters", "where": "Table 3", "kind_of_claim": "exact",
     "check": {"kind": "within", "a": _cell("P"), "target": 100, "tol": 0, "exact": True}},
]


def _fixture(tmp_path: Path) -> tuple[Path, Path, Path]:
    conf, results, papers = tmp_path / "conf", tmp_path / "results", tmp_path / "papers"
    (conf / "table" / "toy").mkdir(parents=True)
    spec = {"paper": "toy", "title": "Toy", "experiment": "x", "seeds": {"paper": 3, "cpu": 3, "smoke": 1},
            "budget_notes": {"cpu": "3 seeds, 10 % of the steps"},
            "rows": [{"label": r} for r in "ABCP"], "columns": [{"name": "acc", "label": "Acc", "metric": "m"}]}
    (conf / "table" / "toy" / "t.yaml").write_text(yaml.safe_dump({**spec, "claims": CLAIMS}, allow_unicode=True))
    (conf / "table" / "toy" / "u.yaml").write_text(yaml.safe_dump({**spec, "claims": [_diff("unbuilt", "A", "B")]}))
    path = results / "toy" / "cpu" / "t.csv"
    path.parent.mkdir(parents=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["row", "column", "ours_mean", "ours_std", "n", "paper_mean"])
        for row, m, s, n in (("A", 90.0, 0.2, 3), ("B", 80.0, 0.2, 3), ("C", 85.0, 30.0, 3), ("P", 100.0, 0.0, 1)):
            w.writerow([row, "acc", m, s, n, "nan"])
    (papers / "toy").mkdir(parents=True)
    (papers / "toy" / "README.md").write_text("# toy — A Toy Paper on Oscillators\n\nindex\n")
    return conf, results, papers


def test_report_on_a_tiny_fixture(tmp_path: Path) -> None:
    conf, results, papers = _fixture(tmp_path)
    states = collect(results, conf)
    assert {s.claim.id: s.status for s in states} == {
        "central-holds": "holds", "central-contradicted": "contradicted", "supporting-na": "not answerable",
        "detail-inconclusive": "inconclusive", "count": "holds", "unbuilt": "not built"}
    text = render_report("toy", states, results, conf, papers)
    assert text.startswith("# Reproduction report: A Toy Paper on Oscillators (`toy`)")
    assert paper_title("toy", papers) == "A Toy Paper on Oscillators" and paper_title("nope", papers) == "nope"
    # roll-up: per weight, holds of how many and where each stands; exact checks apart
    assert ("**Roll-up:** 1 of 2 central claims hold (1 holds at cpu, 1 contradicted at cpu); 0 of 2 supporting "
            "claims hold (1 not answerable at cpu, 1 not built); 0 of 1 detail claims hold (1 inconclusive at cpu); "
            "exact checks: 1 of 1 hold.") in text
    scope = text.split("## Scope of reproducibility")[1].split("## Results")[0]
    assert scope.index("### Central claims") < scope.index("### Supporting claims") < scope.index("### Detail claims")
    assert "  > A is better than B (Table 1)." in scope  # the paper's sentence under its claim
    assert "### Exact checks" in scope and "P has 100 parameters" in scope.split("### Exact checks")[1]
    results_table = text.split("## Results")[1].split("## What matched")[0]
    assert "| central | A beats B | `cpu` | ✅ holds | — | [toy/t](cpu/t.md) |" in results_table
    assert "| supporting | A beats B | — | not built | — | `toy/u` |" in results_table
    matched = text.split("## What matched")[1].split("## What deviated")[0]
    assert "A beats B" in matched and "claim a − b > 0: holds" in matched and "B beats A" not in matched
    deviated = text.split("## What deviated, and the measured reason")[1].split("## What needs")[0]
    assert "### Contradicted" in deviated and "claim a − b > 0: contradicted" in deviated
    assert f"**C beats B** (§4.1, Table 1; `toy/t`) at `cpu`: {REASON}" in deviated  # the measured reason
    assert "### Inconclusive" in deviated and "C beats A" in deviated.split("### Inconclusive")[1]
    needs = text.split("## What needs a GPU, a larger budget or missing data")[1]
    assert "**Judged below paper budget only** (5 claims)" in needs and "`toy/t`" in needs
    assert "`toy/u` (1 claims): committed at no budget; its cpu budget: 3 seeds, 10 % of the steps" in needs
    assert rollup(states).endswith("exact checks: 1 of 1 hold.")


def test_write_reports_writes_one_report_per_paper(tmp_path: Path) -> None:
    conf, results, papers = _fixture(tmp_path)
    paths = write_reports(collect(results, conf), results, conf, papers)
    assert paths == [results / "toy" / "REPORT.md"]
    assert "(../CLAIMS.md)" in paths[0].read_text()  # the scoreboard, relative to the report
