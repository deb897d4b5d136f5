"""What became of the inconclusive verdicts since a revision: ``python -m oscrepro.claims.census --since REV``.

The decide planner's measure of success is how many empirical claims that were inconclusive at some earlier state
are decided now. The plain count in ``results/CLAIMS.md`` cannot say it: building a table adds claims of its own
(often inconclusive at three seeds), so the count can stand still while claims are decided. This census matches the
empirical-claim rows of the scoreboard at ``REV`` (``git show REV:results/CLAIMS.md``) with today's by paper section
and claim text, and reports, for the claims inconclusive then: which are decided now (and how), which are still
inconclusive, which are now *not answerable at their budget* (a spec's measured reason that the budget's evidence is an
artefact: counted apart, never as decided, so that declaring a claim unanswerable cannot pass for deciding it), and
which cannot be found (a claim removed, or reworded without saying so: listed, never guessed). A claim whose text was
changed on purpose declares its earlier wording in its spec (``was:``, :func:`rewordings`): the census follows it to
today's text and shows both.
Claims new since ``REV`` are counted apart. The scoreboard's "Project findings" sections (the leaderboard's own
claims, not a paper's) are reported apart from the papers'.

It reads the committed scoreboards only: nothing is trained or re-checked (``make claims`` writes CLAIMS.md).
"""

from __future__ import annotations

import argparse
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from oscrepro.runs.record import atomic_write_text
from oscrepro.tables.markdown import row_cells

FINDINGS = "Project findings"  # section prefix of claims that are the project's, not a paper's
VERDICTS = ("inconclusive", "contradicted", "holds", "not answerable")  # searched in this order in a verdict cell


@dataclass(frozen=True)
class Row:
    """One empirical claim row of the scoreboard."""

    section: str  # the paper key, or "Project findings: ..." for the leaderboard's claims
    text: str  # the claim's sentence as the scoreboard shows it
    verdict: str  # holds | contradicted | inconclusive | not answerable
    numbers: str

    @property
    def finding(self) -> bool:
        return self.section.startswith(FINDINGS)


def _cells(line: str) -> list[str]:
    """A scoreboard row's cells as plain text: an escaped ``\\|`` (as in ``|a − b|``) is a bar inside its cell."""
    return [c.replace("\\|", "|") for c in row_cells(line)]


def empirical_rows(text: str) -> dict[tuple[str, str], Row]:
    """The empirical-claim rows of a CLAIMS.md, keyed by (section, claim text). Exact checks are left out: the
    census measures the seed-decided verdicts."""
    rows: dict[tuple[str, str], Row] = {}
    section, header = "", None
    for line in text.splitlines():
        if line.startswith("## "):
            section, header = line[3:].strip(), None
        elif line.startswith("### "):
            header = [] if "Empirical" in line else None
        elif header is not None and line.startswith("|"):
            cells = _cells(line)
            if not header:
                header = cells
            elif not set(cells[0]) <= set("-: "):
                row = dict(zip(header, cells, strict=False))
                verdict = next((v for v in VERDICTS if v in row.get("verdict", "")), row.get("verdict", ""))
                rows[(section, row["claim"])] = Row(section, row["claim"], verdict, row.get("numbers", ""))
    return rows


class Tally(NamedTuple):
    """The baseline's inconclusive claims of one kind (papers' or findings'), split by what became of them."""

    base: int  # inconclusive at the baseline: the sum of the four below
    decided: int
    still: int  # still inconclusive
    unanswerable: int  # not answerable at their budget now (never counted as decided)
    lost: int  # not found today by section and text


@dataclass
class Census:
    """The fate of the claims inconclusive at the baseline (papers' and findings' apart), and the new claims."""

    since: str
    decided: list[tuple[Row, Row]] = field(default_factory=list)  # (then, now)
    still: list[Row] = field(default_factory=list)
    lost: list[Row] = field(default_factory=list)  # not found today by section and text
    unanswerable: list[tuple[Row, Row]] = field(default_factory=list)  # (then, now): not answerable now, not decided
    new: Counter[str] = field(default_factory=Counter)  # verdicts of claims absent at the baseline
    reworded: dict[str, str] = field(default_factory=dict)  # baseline text -> today's, for claims followed by ``was``

    def counts(self, finding: bool) -> Tally:
        """The fate of the papers' (or the findings') claims inconclusive at the baseline, one count per fate."""
        def mine(rows: list[Row]) -> int:
            return sum(r.finding == finding for r in rows)
        decided, unanswerable = mine([t for t, _ in self.decided]), mine([t for t, _ in self.unanswerable])
        still, lost = mine(self.still), mine(self.lost)
        return Tally(decided + still + unanswerable + lost, decided, still, unanswerable, lost)


def rewordings() -> dict[tuple[str, str], str]:
    """(paper, earlier text) -> today's text, for every claim whose spec declares earlier wordings (``was:``)."""
    from oscrepro.claims.scoreboard import load_claims
    from oscrepro.tables.spec import available_tables

    return {(cl.paper, old): cl.text for key in available_tables() for cl in load_claims(key) for old in cl.was}


def census(then: dict[tuple[str, str], Row], now: dict[tuple[str, str], Row], since: str,
           reworded: dict[tuple[str, str], str] | None = None) -> Census:
    """Match the baseline's inconclusive empirical claims with today's rows (module docstring); ``reworded``
    (:func:`rewordings`) maps a (section, earlier text) to today's text of the same claim."""
    out = Census(since)
    reworded = reworded or {}
    for key, row in then.items():
        if row.verdict != "inconclusive":
            continue
        if key not in now and key in reworded and (key[0], reworded[key]) in now:
            out.reworded[row.text] = reworded[key]
            key = (key[0], reworded[key])
        today = now.get(key)
        if today is None:
            out.lost.append(row)
        elif today.verdict == "inconclusive":
            out.still.append(row)
        elif today.verdict == "not answerable":
            out.unanswerable.append((row, today))
        else:
            out.decided.append((row, today))
    out.new.update(r.verdict for key, r in now.items() if key not in then)
    return out


def ledger_costs(results: Path) -> dict[str, tuple[str, int, int, float]]:
    """Claim text -> (claim id@budget, the look that decided it, its n, the core-hours its looks' runs took) for
    every claim the decide ledgers (``results/decide/<budget>.json``) decided; a run two claims read counts in
    both."""
    from oscrepro.claims.ledger import load_ledger
    from oscrepro.claims.scoreboard import load_claims
    from oscrepro.tables.spec import available_tables

    text = {cl.id: cl.text for key in available_tables() for cl in load_claims(key)}
    out = {}
    for budget in ("cpu", "paper"):
        for key, entry in load_ledger(results, budget).items():
            decisive = [lk for lk in entry.get("looks", []) if lk["status"] in ("holds", "contradicted")]
            if decisive and entry.get("claim") in text:
                core_s = sum(float(lk.get("core_s") or 0) for lk in entry["looks"] if lk["look"] <= decisive[0]["look"])
                out[text[entry["claim"]]] = (key, int(decisive[0]["look"]), int(decisive[0]["n"]), core_s / 3600)
    return out


def _escaped(text: str) -> str:
    """``text`` for a markdown cell: its bars escaped."""
    return text.replace("|", "\\|")


def _worded(c: Census, then: Row) -> str:
    """The baseline's text of a claim, with today's when its spec declares the change (``was:``)."""
    now = c.reworded.get(then.text)
    return then.text if now is None else f"{then.text} (reworded since, spec `was:`; today: \"{now}\")"


def render(c: Census, costs: dict[str, tuple[str, int, int, float]] | None = None) -> str:
    """The census as markdown; ``costs`` (:func:`ledger_costs`) adds how each decided claim was decided."""
    costs = costs or {}
    lines = [f"# Census of inconclusive verdicts since `{c.since}`", "",
             "Empirical claims inconclusive in `results/CLAIMS.md` at that revision, matched with today's scoreboard "
             "by paper section and claim text, or an earlier text its spec declares (`was:`) "
             "(`python -m oscrepro.claims.census`; exact checks are not counted).", ""]
    for finding, name in ((False, "Papers' claims"), (True, "Project findings (leaderboard)")):
        base, decided, still, unanswerable, lost = c.counts(finding)
        if not base:
            continue
        na = f", {unanswerable} not answerable at their budget now (not counted as decided)" if unanswerable else ""
        lines += [f"**{name}:** {base} inconclusive then → {still} still inconclusive, {decided} decided "
                  f"({decided / base:.0%} fewer){na}{f', {lost} not found today' if lost else ''}.", ""]
    lines += ["## Decided since then", "",
              "*How*: a look of the decide planner (`results/decide/<budget>.json`: the look, its n per cell and the "
              "core-hours of the runs its looks trained, by their records; 0 when another table had trained them), or "
              "the table rebuilt on seeds raised for another claim or built anew (judged by the scoreboard).", "",
              "| section | claim | verdict now | how | numbers now |", "|---|---|---|---|---|"]
    for then, now in c.decided:
        how = ("table rebuilt on more seeds" if now.text not in costs else  # today's text: the ledger's claim
               "planner look {1} (n = {2}), {3:.2f} core-h: `{0}`".format(*costs[now.text]))
        lines.append(f"| {then.section} | {_escaped(_worded(c, then))} | {now.verdict} | {how} | "
                     f"{_escaped(now.numbers)} |")
    lines += ["", "## Still inconclusive", ""] + [f"- {r.section}: {_worded(c, r)}" for r in c.still]
    if c.unanswerable:
        lines += ["", "## Not answerable at their budget now (not decided)", ""]
        lines += [f"- {then.section}: {_worded(c, then)} — {_escaped(now.numbers)}" for then, now in c.unanswerable]
    if c.lost:
        lines += ["", "## Not found today (claim removed, or text changed without a spec `was:`)", ""]
        lines += [f"- {r.section}: {r.text}" for r in c.lost]
    new = ", ".join(f"{n} {v}" for v, n in sorted(c.new.items())) or "none"
    lines += ["", f"**Claims new since `{c.since}`** (tables built since, or claims added): {new}.", ""]
    return "\n".join(lines)


def scoreboard_at(rev: str, path: str = "results/CLAIMS.md") -> str:
    """The scoreboard committed at ``rev`` (a clear error when the revision or file is not there)."""
    try:
        return subprocess.run(["git", "show", f"{rev}:{path}"], check=True, capture_output=True, text=True).stdout
    except subprocess.CalledProcessError as err:
        raise SystemExit(f"census: cannot read {path} at {rev!r}: {err.stderr.strip()}") from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m oscrepro.claims.census", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--since", required=True, help="the git revision of the baseline scoreboard")
    parser.add_argument("--scoreboard", default="results/CLAIMS.md", help="today's scoreboard")
    parser.add_argument("--results-dir", default="results", help="where the decide ledgers are")
    parser.add_argument("--out", default=None, help="also write the census markdown here")
    args = parser.parse_args(argv)
    text = render(census(empirical_rows(scoreboard_at(args.since)),
                         empirical_rows(Path(args.scoreboard).read_text()), args.since, rewordings()),
                  ledger_costs(Path(args.results_dir)))
    print(text, end="")
    if args.out:
        atomic_write_text(Path(args.out), text)


if __name__ == "__main__":
    main()
