"""Counting in CLAIMS.md (oscrepro/claims/tally.py, __main__.py): each claim once, at its highest committed budget;
exact checks apart from empirical claims; a verdict the spec marks not answerable at its budget counted neither for
nor against; a claim judged at paper budget only listed with its cpu table, not as "not built"; a claim that cannot
be checked listed and the command exits 2; the new spec fields (quote, weight, kind_of_claim, not_answerable) load
and a malformed one is one clear error."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from oscrepro.claims.__main__ import main
from oscrepro.claims.scoreboard import ClaimError, load_claims
from oscrepro.claims.tally import NOT_BUILT, PAPER_ONLY, collect, counts, summary


def _cell(row: str) -> dict:
    return {"row": row, "column": "acc"}


def _claim(cid: str, a: str, b: str, **extra) -> dict:
    return {"id": cid, "text": f"{a} beats {b}", "where": "T1",
            "check": {"kind": "difference", "a": _cell(a), "b": _cell(b), "sign": ">"}, **extra}


def _spec(claims: list[dict]) -> str:
    seeds = {"paper": 3, "cpu": 3, "smoke": 1}
    return yaml.safe_dump({"paper": "toy", "title": "Toy", "experiment": "x", "seeds": seeds,
                           "rows": [{"label": "A"}, {"label": "B"}, {"label": "P"}],
                           "columns": [{"name": "acc", "label": "Acc", "metric": "test/acc"}],
                           "claims": claims}, sort_keys=False, allow_unicode=True)


def write_table(path: Path, cells: dict[str, tuple[float, float, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["row", "column", "ours_mean", "ours_std", "ours_count", "n", "n_diverged", "n_failed", "n_missing",
                    "paper_mean", "paper_std", "budget"])
        for row, (m, s, n) in cells.items():
            w.writerow([row, "acc", m, s, "", n, 0, 0, 0, "nan", "nan", "cpu"])


CLEAR = {"A": (90.0, 0.2, 3), "B": (80.0, 0.2, 3), "P": (100.0, 0.0, 1)}  # A > B beyond doubt; P a one-value count
REVERSED = {"A": (80.0, 0.2, 3), "B": (90.0, 0.2, 3), "P": (100.0, 0.0, 1)}


@pytest.fixture()
def tree(tmp_path: Path) -> tuple[Path, Path]:
    conf, results = tmp_path / "conf", tmp_path / "results"
    (conf / "table" / "toy").mkdir(parents=True)
    return conf, results


def _write_spec(conf: Path, claims: list[dict], name: str = "t") -> None:
    (conf / "table" / "toy" / f"{name}.yaml").write_text(_spec(claims))


def test_a_claim_is_counted_once_at_its_highest_budget_with_the_lower_one_beside_it(tree: tuple[Path, Path]) -> None:
    """Committed at cpu (contradicted) and at paper (holds): one claim, counted once, as the paper budget's holds;
    the old scoreboard counted two checks (one contradicted, one holds)."""
    conf, results = tree
    _write_spec(conf, [_claim("a-above-b", "A", "B")])
    write_table(results / "toy" / "cpu" / "t.csv", REVERSED)
    write_table(results / "toy" / "t.csv", CLEAR)
    (state,) = collect(results, conf)
    assert state.budget == "paper" and state.status == "holds"
    assert [c.budget for c in state.others] == ["cpu"] and state.others[0].status == "contradicted"
    assert counts([state]) == {"holds": 1}
    main(["--results-dir", str(results), "--conf-dir", str(conf)])
    text = (results / "CLAIMS.md").read_text()
    assert "empirical claims (1 judged): 1 holds, 0 contradicted, 0 inconclusive" in text
    row = next(line for line in text.splitlines() if line.startswith("| A beats B"))
    assert "| `paper` | ✅ holds |" in row and "`cpu` ❌ contradicted" in row  # the lower budget beside it


def test_identical_numbers_at_two_budgets_count_once(tree: tuple[Path, Path]) -> None:
    """fqo Fig. 2's case: the same table at cpu and paper is one claim, not two holds."""
    conf, results = tree
    _write_spec(conf, [_claim("a-above-b", "A", "B")])
    write_table(results / "toy" / "cpu" / "t.csv", CLEAR)
    write_table(results / "toy" / "t.csv", CLEAR)
    states = collect(results, conf)
    assert len(states) == 1 and counts(states) == {"holds": 1} and len(states[0].checks) == 2


def test_exact_checks_are_counted_apart_from_empirical_claims(tree: tuple[Path, Path]) -> None:
    conf, results = tree
    count = {"id": "p-count", "text": "P has 100 parameters", "where": "T1", "kind_of_claim": "exact",
             "check": {"kind": "within", "a": _cell("P"), "target": 100, "tol": 0, "exact": True}}
    _write_spec(conf, [_claim("a-above-b", "A", "B"), count])
    write_table(results / "toy" / "cpu" / "t.csv", REVERSED)
    states = collect(results, conf)
    assert counts(states, "empirical") == {"contradicted": 1} and counts(states, "exact") == {"holds": 1}
    line = summary(states)
    assert line.startswith("empirical claims (1 judged): 0 holds, 1 contradicted, 0 inconclusive; "
                           "exact checks (1 judged): 1 holds, 0 contradicted, 0 inconclusive"), line
    main(["--results-dir", str(results), "--conf-dir", str(conf)])
    text = (results / "CLAIMS.md").read_text()
    exact_table = text.split("### Exact checks")[1]
    assert "P has 100 parameters" in exact_table and "A beats B" not in exact_table


def test_not_answerable_is_shown_with_its_reason_and_counted_neither_way(tree: tuple[Path, Path]) -> None:
    """A contradiction caused by the budget (not_answerable at cpu) is not counted against the paper; the same claim
    at a budget without the mark still is."""
    conf, results = tree
    reason = "the damping ratio never left its initialisation (median 0.21, init range [0.05, 0.40])"
    _write_spec(conf, [_claim("a-above-b", "A", "B", not_answerable={"cpu": reason})])
    write_table(results / "toy" / "cpu" / "t.csv", REVERSED)
    (state,) = collect(results, conf)
    assert state.headline.verdict.status == "contradicted"  # the numbers say so ...
    assert state.status == "not answerable"  # ... but it is not counted against the paper
    assert counts([state]) == {"not answerable": 1}
    assert "0 holds, 0 contradicted, 0 inconclusive, 1 not answerable at this budget" in summary([state])
    main(["--results-dir", str(results), "--conf-dir", str(conf)])
    row = next(line for line in (results / "CLAIMS.md").read_text().splitlines() if line.startswith("| A beats B"))
    assert "➖ not answerable at this budget" in row and reason in row and "contradicted" in row  # numbers kept
    write_table(results / "toy" / "t.csv", REVERSED)  # at paper budget no reason is given: it counts
    (state,) = collect(results, conf)
    assert state.status == "contradicted"


def test_paper_only_claims_list_their_cpu_table_and_not_built_stays_apart(tree: tuple[Path, Path]) -> None:
    """budgets: [paper] with a committed cpu table is "judged at paper budget only; the cpu table exists at
    <path>" (the 23 fsn claims the old scoreboard called "committed at no budget"); a table committed nowhere is
    "not built"."""
    conf, results = tree
    reason = "cpu runs stay in the unigram regime"
    _write_spec(conf, [_claim("paper-only", "A", "B", budgets=["paper"], not_answerable={"cpu": reason})])
    _write_spec(conf, [_claim("nowhere", "A", "B")], name="u")
    write_table(results / "toy" / "cpu" / "t.csv", CLEAR)
    states = {s.claim.id: s for s in collect(results, conf)}
    assert states["paper-only"].status == PAPER_ONLY and states["nowhere"].status == NOT_BUILT
    assert states["paper-only"].outside == (results / "toy" / "cpu" / "t.csv",)
    main(["--results-dir", str(results), "--conf-dir", str(conf)])
    text = (results / "CLAIMS.md").read_text()
    assert (f"judged at paper budget only (cpu: {reason}); the cpu table exists at "
            "[toy/cpu/t.csv](toy/cpu/t.csv)") in text
    assert "not built: the table is committed at no budget" in text
    assert "not judged: 1 judged at paper budget only (their cpu table exists), 1 not built" in text


def test_a_claim_that_cannot_be_checked_is_listed_and_the_command_exits_2(tree: tuple[Path, Path], capsys) -> None:
    conf, results = tree
    bad = _claim("bad-row", "A", "B")
    bad["check"]["b"] = _cell("Z")
    _write_spec(conf, [_claim("a-above-b", "A", "B"), bad])
    write_table(results / "toy" / "cpu" / "t.csv", CLEAR)
    with pytest.raises(SystemExit) as exit_:
        main(["--results-dir", str(results), "--conf-dir", str(conf)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "cannot check toy/t 'bad-row' at cpu:" in err and "names cell ('Z', 'acc'), not in the table" in err
    text = (results / "CLAIMS.md").read_text()  # everything else is still written
    assert "1 cannot be checked" in text and "✅ holds" in text and (results / "toy" / "REPORT.md").exists()


def test_new_claim_fields_load_and_malformed_ones_are_one_clear_error(tree: tuple[Path, Path]) -> None:
    conf, _ = tree
    _write_spec(conf, [_claim("c", "A", "B", quote="A  beats\n B, says the paper.", weight="central",
                              kind_of_claim="exact", not_answerable={"cpu": "too\n little data"})])
    (cl,) = load_claims("toy/t", conf)
    assert (cl.quote, cl.weight, cl.kind_of_claim) == ("A beats B, says the paper.", "central", "exact")
    assert cl.not_answerable == {"cpu": "too little data"}
    _write_spec(conf, [_claim("c", "A", "B")])
    (cl,) = load_claims("toy/t", conf)
    assert (cl.quote, cl.weight, cl.kind_of_claim, cl.not_answerable) == (None, "supporting", "empirical", {})
    for extra, match in (({"weight": "headline"}, "weight='headline'; valid: central, supporting, detail"),
                         ({"kind_of_claim": "identity"}, "kind_of_claim='identity'; valid: empirical, exact"),
                         ({"not_answerable": {"smoke": "x"}}, "not_answerable=.*write it as"),
                         ({"not_answerable": {"cpu": ""}}, "not_answerable=.*the measured reason")):
        _write_spec(conf, [_claim("c", "A", "B", **extra)])
        with pytest.raises(ClaimError, match=match):
            load_claims("toy/t", conf)
