"""Claims scoreboard (oscrepro/claims/scoreboard.py, __main__.py) on a synthetic spec and committed tables whose
verdicts are known: holds, contradicted, inconclusive (thin evidence, straddling interval), not built, and the
errors a malformed claim gives."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from oscrepro.claims.__main__ import main
from oscrepro.claims.scoreboard import ClaimError, check_all, check_variants, load_claims, unchecked


def _cell(row: str) -> dict:
    return {"row": row, "column": "acc"}


def _diff(cid: str, a: str, b: str) -> dict:
    return {"id": cid, "text": f"{a} beats {b}", "where": "T1",
            "check": {"kind": "difference", "a": _cell(a), "b": _cell(b), "sign": ">"}}


SPEC = yaml.safe_dump({
    "paper": "toy", "title": "Toy", "experiment": "x", "seeds": {"paper": 3, "cpu": 3, "smoke": 1},
    "rows": [{"label": "A"}, {"label": "B"}, {"label": "C"}],
    "columns": [{"name": "acc", "label": "Acc", "metric": "test/acc"}],
    "claims": [_diff("a-above-b", "A", "B"), _diff("b-above-a", "B", "A"), _diff("c-above-b", "C", "B"),
               {"id": "a-is-paper", "text": "A as in the paper", "where": "T1",
                "check": {"kind": "within", "a": _cell("A"), "target": "paper", "tol": 1.0}},
               {"id": "trend", "text": "B < A < C", "where": "T1",
                "check": {"kind": "ordering", "cells": [_cell("B"), _cell("A"), _cell("C")],
                          "direction": "increasing"}}]}, sort_keys=False, allow_unicode=True)


def write_table(path: Path, cells: dict[str, tuple[float, float, int]], paper: dict[str, float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["row", "column", "ours_mean", "ours_std", "ours_count", "n", "n_diverged", "n_failed",
                    "n_missing", "paper_mean", "paper_std", "budget"])
        for row, (m, s, n) in cells.items():
            w.writerow([row, "acc", m, s, "", n, 0, 0, 0, paper.get(row, "nan"), "nan", "cpu"])


@pytest.fixture()
def tree(tmp_path: Path) -> tuple[Path, Path]:
    conf, results = tmp_path / "conf", tmp_path / "results"
    (conf / "table" / "toy").mkdir(parents=True)
    (conf / "table" / "toy" / "t.yaml").write_text(SPEC)
    return conf, results


def verdicts(results: Path, conf: Path) -> dict[tuple[str, str], str]:
    return {(c.claim.id, c.budget): c.verdict.status for c in check_all(results, conf)}


def test_known_verdicts_per_budget(tree: tuple[Path, Path]) -> None:
    conf, results = tree
    # cpu: A clearly above B, C straddles B, A matches the paper's 90 within its interval
    write_table(results / "toy" / "cpu" / "t.csv", {"A": (90.0, 0.2, 3), "B": (80.0, 0.2, 3), "C": (80.5, 2.0, 3)},
                {"A": 90.1})
    # paper budget: one seed each -> every claim inconclusive (no interval)
    write_table(results / "toy" / "t.csv", {"A": (90.0, float("nan"), 1), "B": (80.0, float("nan"), 1),
                                            "C": (95.0, float("nan"), 1)}, {"A": 90.1})
    v = verdicts(results, conf)
    assert v[("a-above-b", "cpu")] == "holds"
    assert v[("b-above-a", "cpu")] == "contradicted"
    assert v[("c-above-b", "cpu")] == "inconclusive"  # interval spans zero
    assert v[("a-is-paper", "cpu")] == "holds"
    assert v[("trend", "cpu")] == "contradicted"  # C (80.5) is clearly below A (90): one reversed link
    assert all(s == "inconclusive" for (cid, b), s in v.items() if b == "paper"), v


def test_ordering_inconclusive_when_a_link_overlaps_and_paper_target_needs_a_value(tree: tuple[Path, Path]) -> None:
    conf, results = tree
    table = results / "toy" / "cpu" / "t.csv"
    write_table(table, {"A": (90.0, 0.2, 3), "B": (80.0, 0.2, 3), "C": (90.5, 2.0, 3)}, {"A": 90.0})
    assert verdicts(results, conf)[("trend", "cpu")] == "inconclusive"
    write_table(table, {"A": (90.0, 0.2, 3), "B": (80.0, 0.2, 3), "C": (90.5, 2.0, 3)}, {})
    with pytest.raises(ClaimError, match="target: paper, but row 'A' has no paper value"):
        check_all(results, conf)


def test_unbuilt_table_is_listed_not_dropped_and_scoreboard_counts(tree: tuple[Path, Path], capsys) -> None:
    conf, results = tree
    assert check_all(results, conf) == []
    assert [c.id for c in unchecked(results, conf)] == ["a-above-b", "b-above-a", "c-above-b", "a-is-paper", "trend"]
    write_table(results / "toy" / "cpu" / "t.csv", {"A": (90.0, 0.2, 3), "B": (80.0, 0.2, 3), "C": (95.0, 0.2, 3)},
                {"A": 90.1})
    (results / "toy" / "cpu" / "t.md").write_text("# toy table\n\n| A | B |\n")
    main(["--results-dir", str(results), "--conf-dir", str(conf)])
    main(["--results-dir", str(results), "--conf-dir", str(conf)])  # the section is replaced, not appended again
    text = (results / "CLAIMS.md").read_text()
    assert "**Summary:** empirical claims (5 judged): 4 holds, 1 contradicted, 0 inconclusive" in text
    assert "[toy/t](toy/cpu/t.md)" in text and "✅ holds" in text and "❌ contradicted" in text
    assert "4 holds, 1 contradicted, 0 inconclusive" in capsys.readouterr().out
    table_md = (results / "toy" / "cpu" / "t.md").read_text()
    assert table_md.startswith("# toy table") and table_md.count("## Claims") == 1
    assert "[CLAIMS.md](../../CLAIMS.md)" in table_md and table_md.count("❌ contradicted") == 1


def test_malformed_claims_are_one_clear_error(tree: tuple[Path, Path]) -> None:
    conf, results = tree
    path = conf / "table" / "toy" / "t.yaml"
    path.write_text(SPEC.replace("kind: ordering", "kind: monotone"))
    assert "kind: monotone" in path.read_text()
    with pytest.raises(ClaimError, match="kind='monotone'; valid: difference, ordering"):
        load_claims("toy/t", conf)
    path.write_text(SPEC.replace("row: C", "row: D"))
    write_table(results / "toy" / "cpu" / "t.csv", {"A": (90.0, 0.2, 3), "B": (80.0, 0.2, 3), "C": (95.0, 0.2, 3)}, {})
    with pytest.raises(ClaimError, match=r"names cell \('D', 'acc'\), not in the table"):
        check_all(results, conf)
    path.write_text(SPEC.replace("  where: T1\n", "  where: T1\n  was: 7\n", 1))
    with pytest.raises(ClaimError, match="was=7; write it as a list of the claim's earlier texts"):
        load_claims("toy/t", conf)


def test_analysis_tables_are_read_by_first_column_and_rendered_numbers(tmp_path: Path) -> None:
    """An analysis table's csv: the first column names the row ("first | second" where it repeats), rendered
    numbers ("1,011,834", "+0", "−3.2") parse, and each cell has n = 1 (only exact claims can be decided)."""
    from oscrepro.claims.scoreboard import _float, read_cells

    path = tmp_path / "t.csv"
    path.write_text('Model,Corpus,Params,Δ\nFSN,enwik8,"1,011,834",+0\nFSN,code,"973,818",−3.2\nMF,enwik8,5,1\n')
    cells = read_cells(path)
    assert _float(cells[("FSN | enwik8", "Params")]["ours_mean"]) == 1011834
    assert _float(cells[("FSN | code", "Δ")]["ours_mean"]) == -3.2
    assert cells[("MF | enwik8", "Δ")]["n"] == "1" and _float("—") != _float("—")  # a dash is not a number


def test_budgets_restrict_where_a_claim_is_judged(tree: tuple[Path, Path]) -> None:
    """budgets: [paper] -> a committed cpu table does not judge the claim; it is listed as not built until the
    paper-budget table exists. Comment lines of a csv and non-numbers ("not reached (0/1)") are no data."""
    from oscrepro.claims.scoreboard import _float

    conf, results = tree
    path = conf / "table" / "toy" / "t.yaml"
    path.write_text(SPEC.replace("  where: T1\n", "  where: T1\n  budgets: [paper]\n", 1))
    assert load_claims("toy/t", conf)[0].budgets == ("paper",)
    write_table(results / "toy" / "cpu" / "t.csv", {"A": (90.0, 0.2, 3), "B": (80.0, 0.2, 3), "C": (95.0, 0.2, 3)},
                {"A": 90.1})
    assert ("a-above-b", "cpu") not in verdicts(results, conf)
    assert [c.id for c in unchecked(results, conf)] == ["a-above-b"]
    paper_csv = results / "toy" / "t.csv"
    write_table(paper_csv, {"A": (90.0, 0.2, 3), "B": (80.0, 0.2, 3), "C": (95.0, 0.2, 3)}, {"A": 90.1})
    paper_csv.write_text("# git_commit: abc\n" + paper_csv.read_text())
    assert verdicts(results, conf)[("a-above-b", "paper")] == "holds"
    assert _float("not reached (0/1)") != _float("not reached (0/1)")
    path.write_text(SPEC.replace("  where: T1\n", "  where: T1\n  budgets: [smoke]\n", 1))
    with pytest.raises(ClaimError, match="budgets=\\['smoke'\\]; valid: cpu, paper"):
        load_claims("toy/t", conf)


def test_a_paper_only_claim_is_not_judged_at_cpu_by_a_table_build_either(tmp_path: Path) -> None:
    """check_table is what a table build (oscrepro.claims.scoreboard.refresh_table_claims) and `make claims` both
    use: a claim with budgets [paper] gets no verdict on the cpu table."""
    from oscrepro.claims.scoreboard import check_table

    spec = yaml.safe_load(SPEC)
    spec["claims"] = [dict(_diff("a-above-b", "A", "B"), budgets=["paper"]), _diff("b-above-a", "B", "A")]
    conf, results = tmp_path / "conf", tmp_path / "results"
    (conf / "table" / "toy").mkdir(parents=True)
    (conf / "table" / "toy" / "t.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    cells = {"A": (90.0, 0.2, 3), "B": (80.0, 0.2, 3), "C": (80.5, 2.0, 3)}
    write_table(results / "toy" / "cpu" / "t.csv", cells, {})
    write_table(results / "toy" / "t.csv", cells, {})
    assert [c.claim.id for c in check_table("toy/t", "cpu", results, conf)] == ["b-above-a"]
    assert [c.claim.id for c in check_table("toy/t", "paper", results, conf)] == ["a-above-b", "b-above-a"]


def test_a_variant_build_gets_its_own_verdicts_outside_the_scoreboard(tree: tuple[Path, Path]) -> None:
    """``--variant`` builds (results/<paper>/<budget>/<variant>/) are judged on their own numbers, in their own .md;
    CLAIMS.md counts the plain tables only, and ``make claims`` keeps (rewrites) the variant's section."""
    conf, results = tree
    plain = {"A": (90.0, 0.2, 3), "B": (80.0, 0.2, 3), "C": (95.0, 0.2, 3)}
    write_table(results / "toy" / "cpu" / "t.csv", plain, {"A": 90.1})
    write_table(results / "toy" / "cpu" / "anneal" / "t.csv", {**plain, "B": (99.0, 0.2, 3)}, {"A": 90.1})
    for md in (results / "toy" / "cpu" / "t.md", results / "toy" / "cpu" / "anneal" / "t.md"):
        md.write_text("# toy table\n")
    got = {c.claim.id: c.verdict.status for c in check_variants(results, conf)}
    assert got["a-above-b"] == "contradicted" and got["b-above-a"] == "holds"
    assert all(c.variant == "anneal" for c in check_variants(results, conf))
    main(["--results-dir", str(results), "--conf-dir", str(conf)])
    main(["--results-dir", str(results), "--conf-dir", str(conf)])
    assert ("**Summary:** empirical claims (5 judged): 4 holds, 1 contradicted, 0 inconclusive"
            in (results / "CLAIMS.md").read_text())
    assert "anneal" not in (results / "CLAIMS.md").read_text()
    variant_md = (results / "toy" / "cpu" / "anneal" / "t.md").read_text()
    assert variant_md.count("## Claims") == 1 and "this variant (`anneal`)" in variant_md
    assert variant_md.count("❌ contradicted") == 3  # A > B, C > B and B < A < C, on the variant's numbers (B = 99)
