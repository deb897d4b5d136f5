"""One state per claim: the verdicts of its committed budgets reduced to the one that is counted.

A claim can be checked at several budgets (its table committed at ``cpu`` and at ``paper``). Counting every check
counts a claim twice, and twice on identical numbers where a table is budget-independent (fqo Fig. 2's Monte Carlo
is the same at both). So each claim is counted once, at its highest committed budget (paper > cpu), and the lower
budgets' verdicts are shown beside it. Its counted status is one of :data:`STATES`:

* the verdict's ``holds`` / ``contradicted`` / ``inconclusive`` (:mod:`oscrepro.claims.verdict`);
* ``not answerable`` where the spec's ``not_answerable`` gives a measured reason why that budget cannot answer the
  claim (a budget artefact): counted neither for nor against the paper;
* ``cannot be checked``: the claim failed at that budget (a cell that is not in the table, a csv that must be
  rebuilt): listed with the message, and ``make claims`` exits non-zero;
* ``paper budget only``: its ``budgets`` exclude a budget whose table is committed (the cpu table exists, but the
  claim is judged at paper budget only, with the spec's reason), and the paper-budget table is not committed;
* ``not built``: its table is committed at no budget.

Exact checks (``kind_of_claim: exact``: parameter counts, identities, closed forms) are counted apart from empirical
claims: a parameter count that holds says nothing about how the mechanism performs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from oscrepro.claims.scoreboard import (
    NOT_ANSWERABLE,
    Checked,
    CheckError,
    Claim,
    check_all,
    load_claims,
    tables_outside_budgets,
)
from oscrepro.claims.verdict import STATUSES
from oscrepro.runs.compose import CONF_DIR
from oscrepro.tables.spec import BUDGETS, available_tables

ERROR, PAPER_ONLY, NOT_BUILT = "cannot be checked", "paper budget only", "not built"
FINDINGS = ("leaderboard",)  # spec folders whose claims are this project's own findings (the README's), not a paper's
JUDGED = (*STATUSES, NOT_ANSWERABLE)  # statuses of a claim with a verdict at its counted budget
STATES = (*JUDGED, ERROR, PAPER_ONLY, NOT_BUILT)
RANK = {b: i for i, b in enumerate(BUDGETS)}  # smoke < cpu < paper (conf/budget)


@dataclass(frozen=True)
class ClaimState:
    """A claim with its checks (lowest budget first), its check errors and the committed tables its ``budgets``
    exclude."""

    claim: Claim
    checks: tuple[Checked, ...] = ()
    errors: tuple[CheckError, ...] = ()
    outside: tuple[Path, ...] = ()

    @property
    def budget(self) -> str | None:
        """The budget it is counted at: the highest one with a committed table among its ``budgets``."""
        budgets = [c.budget for c in self.checks] + [e.budget for e in self.errors]
        return max(budgets, key=RANK.__getitem__) if budgets else None

    @property
    def headline(self) -> Checked | None:
        """The check at the counted budget (None when it failed or no table is committed)."""
        return next((c for c in self.checks if c.budget == self.budget), None)

    @property
    def error(self) -> CheckError | None:
        """The error at the counted budget, if the check failed there."""
        return next((e for e in self.errors if e.budget == self.budget), None)

    @property
    def others(self) -> tuple[Checked, ...]:
        """The checks at lower budgets (shown beside the counted one, not counted)."""
        return tuple(c for c in self.checks if c.budget != self.budget)

    @property
    def status(self) -> str:
        """One of STATES (module docstring)."""
        if self.headline is not None:
            return self.headline.status
        if self.error is not None:
            return ERROR
        return PAPER_ONLY if self.outside else NOT_BUILT


def collect(results: Path, conf_dir: Path = CONF_DIR) -> list[ClaimState]:
    """The state of every claim of every table spec, in spec order (a failing claim becomes an ERROR state)."""
    errors: list[CheckError] = []
    checks = check_all(results, conf_dir, errors=errors)
    by_claim: dict[tuple[str, str], list[Checked]] = defaultdict(list)
    errs: dict[tuple[str, str], list[CheckError]] = defaultdict(list)
    for c in checks:
        by_claim[(c.claim.table, c.claim.id)].append(c)
    for e in errors:
        errs[(e.claim.table, e.claim.id)].append(e)
    out = []
    for key in available_tables(conf_dir):
        for cl in load_claims(key, conf_dir):
            ident = (cl.table, cl.id)
            out.append(ClaimState(cl, tuple(sorted(by_claim[ident], key=lambda c: RANK[c.budget])),
                                  tuple(errs[ident]), tuple(tables_outside_budgets(cl, results))))
    return out


def is_finding(state: ClaimState) -> bool:
    """True for a claim of this project (FINDINGS), counted apart from the papers' claims and in no paper report."""
    return state.claim.paper in FINDINGS


def counts(states: list[ClaimState], kind_of_claim: str | None = None) -> Counter[str]:
    """How many claims are in each state (of one ``kind_of_claim``, or all)."""
    return Counter(s.status for s in states if kind_of_claim is None or s.claim.kind_of_claim == kind_of_claim)


def _list(c: Counter[str]) -> str:
    """holds / contradicted / inconclusive always, not answerable when there is any."""
    shown = [*STATUSES, *([NOT_ANSWERABLE] if c[NOT_ANSWERABLE] else [])]
    return ", ".join(f"{c[s]} {s if s != NOT_ANSWERABLE else 'not answerable at this budget'}" for s in shown)


def summary(states: list[ClaimState]) -> str:
    """One line: empirical claims and exact checks by counted status, then the claims not judged (zeros left out)."""
    emp, exact, every = counts(states, "empirical"), counts(states, "exact"), counts(states)
    parts = [f"empirical claims ({sum(emp[s] for s in JUDGED)} judged): {_list(emp)}"]
    n_exact = sum(exact[s] for s in JUDGED)
    parts.append(f"exact checks ({n_exact} judged): {_list(exact)}" if n_exact else "exact checks: none judged")
    not_judged = [f"{every[s]} {what}" for s, what in ((ERROR, "cannot be checked"),
                                                      (PAPER_ONLY, "judged at paper budget only (their cpu table "
                                                                   "exists)"),
                                                      (NOT_BUILT, "not built")) if every[s]]
    if not_judged:
        parts.append("not judged: " + ", ".join(not_judged))
    return "; ".join(parts) + f" ({len(states)} claims, each counted once at its highest committed budget)"
