"""Which builds are labelled below the paper's budget (TableSpec.below_paper: the table header and the figure
captions say what it says)."""

from __future__ import annotations

import pytest

from oscrepro.tables.spec import load_spec


@pytest.mark.parametrize(("key", "budget", "below"), [
    ("fqo/table6", "cpu", True),          # the paper's protocol on Table 4's cpu models: its budget note says so
    ("fqo/table6", "paper", False),
    ("osciformer/table10", "cpu", True),  # listed under analysis.budgets
    ("coupledqk/table11", "cpu", False),  # "same as paper": nothing trained, the paper configuration
    ("fqo/fig2", "cpu", False),           # no setting and no note: the paper's protocol unchanged
    ("fqo/table2", "cpu", True),          # a runs table: every budget but paper
])
def test_below_paper_follows_the_budget_and_its_note(key: str, budget: str, below: bool) -> None:
    """fqo Table 6 at cpu once rendered "the paper's hyperparameters unchanged" above cpu-budget models: an analysis
    whose budget note says how the budget departs is below the paper's budget even without analysis.budgets."""
    assert load_spec(key).below_paper(budget) is below
