"""The census matches the baseline's inconclusive empirical claims with today's by section and text."""

from __future__ import annotations

from oscrepro.claims.census import census, empirical_rows, render

HEAD = ("| claim | weight | where | counted at | verdict | numbers | lower budgets | table |\n"
        "|---|---|---|---|---|---|---|---|\n")


def _board(rows: dict[str, list[tuple[str, str]]], exact: list[tuple[str, str]] = ()) -> str:
    out = ["# Claims scoreboard", ""]
    for section, claims in rows.items():
        out += [f"## {section}", "", "### Empirical claims", "", HEAD.rstrip("\n")]
        out += [f"| {t} | supporting | Sec. 1 | `cpu` | {v} | a − b = 1 | — | [t](t.md) |" for t, v in claims]
        out += ["", "### Exact checks (parameter counts)", "", HEAD.rstrip("\n")]
        out += [f"| {t} | supporting | Sec. 1 | `paper` | {v} | exact | — | [t](t.md) |" for t, v in exact]
        out += [""]
    return "\n".join(out)


def test_census_counts_decided_still_lost_and_new():
    then = _board({"fqo": [("A", "❔ inconclusive"), ("B \\| with a bar", "❔ inconclusive"), ("C", "✅ holds"),
                           ("D", "❔ inconclusive")],
                   "Project findings: leaderboard": [("L", "❔ inconclusive")]},
                  exact=[("X", "❔ inconclusive")])
    now = _board({"fqo": [("A", "❌ contradicted"), ("B \\| with a bar", "❔ inconclusive"), ("C", "✅ holds"),
                          ("E", "❔ inconclusive")],
                  "Project findings: leaderboard": [("L", "✅ holds")]})
    rows = empirical_rows(then)
    assert ("fqo", "B | with a bar") in rows and ("fqo", "X") not in rows  # escaped bar kept; exact checks left out
    c = census(rows, empirical_rows(now), "abc123")
    assert c.counts(finding=False) == (3, 1, 1, 0, 1)  # A decided, B still, D not found today
    assert c.counts(finding=True) == (1, 1, 0, 0, 0)
    assert [r.text for r in c.lost] == ["D"] and c.new == {"inconclusive": 1}
    text = render(c)
    assert "3 inconclusive then → 1 still inconclusive, 1 decided (33% fewer), 1 not found today" in text
    assert "| fqo | A | contradicted |" in text


def test_ledger_costs_stop_at_the_deciding_look(tmp_path):
    """A decided claim's cost is what its looks up to the decisive one took; an undecided claim has none."""
    import json

    from oscrepro.claims.census import ledger_costs
    from oscrepro.claims.scoreboard import load_claims

    claims = load_claims("coupledqk/table1")
    look = lambda k, n, status, core_s: {"look": k, "n": n, "status": status, "core_s": core_s}  # noqa: E731
    ledger = {f"{claims[0].id}@cpu": {"claim": claims[0].id, "looks": [look(1, 3, "inconclusive", 3600.0),
                                                                       look(2, 5, "holds", 1800.0)]},
              f"{claims[1].id}@cpu": {"claim": claims[1].id, "looks": [look(1, 3, "inconclusive", 7.0)]}}
    (tmp_path / "decide").mkdir()
    (tmp_path / "decide" / "cpu.json").write_text(json.dumps(ledger))
    costs = ledger_costs(tmp_path)
    assert costs == {claims[0].text: (f"{claims[0].id}@cpu", 2, 5, 1.5)}

def test_a_claim_declared_not_answerable_is_not_counted_as_decided():
    then = _board({"fqo": [("A", "❔ inconclusive"), ("B", "❔ inconclusive")]})
    now = _board({"fqo": [("A", "➖ not answerable at this budget"), ("B", "✅ holds")]})
    c = census(empirical_rows(then), empirical_rows(now), "abc123")
    assert c.counts(finding=False) == (2, 1, 0, 1, 0)  # B decided; A not answerable now, neither decided nor still
    assert [then.text for then, _ in c.unanswerable] == ["A"]
    text = render(c)
    assert "1 decided (50% fewer), 1 not answerable at their budget now (not counted as decided)" in text
    assert "## Not answerable at their budget now (not decided)" in text and "| fqo | A |" not in text


def test_a_claim_reworded_with_a_declared_was_is_followed_and_an_undeclared_one_is_lost():
    then = _board({"fqo": [("Old words", "❔ inconclusive"), ("Silently changed", "❔ inconclusive")]})
    now = _board({"fqo": [("New words", "✅ holds"), ("Changed silently", "✅ holds")]})
    c = census(empirical_rows(then), empirical_rows(now), "abc123", {("fqo", "Old words"): "New words"})
    assert c.counts(finding=False) == (2, 1, 0, 0, 1)
    assert [(t.text, n.text) for t, n in c.decided] == [("Old words", "New words")]
    assert [r.text for r in c.lost] == ["Silently changed"]  # never guessed
    text = render(c, {"New words": ("x@cpu", 3, 10, 0.59)})
    assert ('| fqo | Old words (reworded since, spec `was:`; today: "New words") | holds | planner look 3 (n = 10)'
            in text)


def test_the_committed_specs_declare_the_t6_rewording():
    from oscrepro.claims.census import rewordings

    assert rewordings()[("fqo", "Sequential initialization reduces mean error 4.6x at d_osc = 2 at no additional "
                                "cost")].startswith("Sequential initialization lowers the mean ODE error")
