"""``python -m oscrepro.claims`` (``make claims``): write ``results/CLAIMS.md`` and ``results/<paper>/REPORT.md``
from the committed tables. Trains nothing.

CLAIMS.md counts each claim once, at its highest committed budget (paper > cpu), with the lower budgets' verdicts
beside it (:mod:`oscrepro.claims.tally`); empirical claims and exact checks (parameter counts, identities, closed
forms) are counted apart; a verdict at a budget the spec marks ``not_answerable`` is shown with the measured reason
and counted neither for nor against the paper. Per paper: a summary line, a link to its report, the empirical claims,
the exact checks, then the claims not judged (judged at paper budget only although the cpu table exists; not built;
cannot be checked). Each table's .md gets its claims section (:func:`oscrepro.claims.scoreboard.write_table_sections`)
and each paper a reproduction report (:mod:`oscrepro.claims.report`).

A claim that cannot be checked (a cell not in the table, a csv to rebuild) is listed in CLAIMS.md and on stderr,
one line each, and the command exits with status 2 after writing everything else.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from oscrepro.claims.report import write_reports
from oscrepro.claims.scoreboard import MARK, Checked, check_variants, md_cell, strip_section, write_table_sections
from oscrepro.claims.tally import ERROR, JUDGED, NOT_BUILT, PAPER_ONLY, ClaimState, collect, is_finding, summary
from oscrepro.runs.compose import CONF_DIR
from oscrepro.runs.record import RunRecord, atomic_write_text

INTRO = ("Each claim is a paper's sentence with a checkable form over one of our tables (written in its spec, "
         "`conf/table/<paper>/<table>.yaml`), checked at every budget where that table is committed: holds / "
         "contradicted when the interval of the effect lies on one side, inconclusive when it straddles or cannot "
         "be computed. Each claim is **counted once, at its highest committed budget** (paper > cpu); the verdicts "
         "at lower budgets are shown beside it. A verdict at a budget below the paper's speaks for that budget only. "
         "**Exact checks** (parameter counts, identities such as S_ii = 1, closed forms checked by Monte Carlo) are "
         "counted apart from empirical claims. **Not answerable at this budget**: the spec gives a measured reason "
         "why the budget's evidence is an artefact of the budget (a parameter that never left its initialisation, "
         "timings taken under load, too little data); such a verdict is shown, with its numbers, but counted neither "
         "for nor against the paper. Built by `make claims` from the committed tables; nothing is trained. One "
         "reproduction report per paper (ML Reproducibility Challenge shape) is linked from each section.")


def _link(path: Path, results: Path) -> str:
    rel = os.path.relpath(path, results)
    return f"[{rel}]({rel})"


def _lower(state: ClaimState) -> str:
    """The verdicts at budgets below the counted one."""
    parts = []
    for c in state.others:
        extra = f" ({c.reason})" if c.reason else f": {c.verdict.detail}"
        parts.append(f"`{c.budget}` {MARK[c.status]}{extra}")
    return "; ".join(parts) or "—"


def _row(state: ClaimState, results: Path) -> str:
    c: Checked = state.headline  # type: ignore[assignment]
    return (f"| {md_cell(state.claim.text)} | {state.claim.weight} | {md_cell(state.claim.where)} | `{c.budget}` | "
            f"{MARK[c.status]} | {md_cell(c.shown_detail())} | {md_cell(_lower(state))} | "
            f"[{state.claim.table}]({os.path.relpath(c.table_md, results)}) |")


def _why_not_judged(state: ClaimState, results: Path) -> str:
    if state.status == ERROR:
        return f"cannot be checked at `{state.budget}`: {state.error.message}"  # type: ignore[union-attr]
    if state.status == PAPER_ONLY:
        where = ", ".join(f"the {p.parent.name} table exists at {_link(p, results)}" for p in state.outside)
        reasons = "; ".join(f"{b}: {r}" for b, r in state.claim.not_answerable.items()
                            if b not in state.claim.budgets)
        return (f"judged at {' and '.join(f'{b} budget' for b in state.claim.budgets)} only"
                + (f" ({reasons})" if reasons else "") + f"; {where}")
    return "not built: the table is committed at no budget"


DIRTY = re.compile(r"\*\*commit\*\* `([0-9a-f]+)\+dirty`")


def dirty_tables(results: Path) -> list[tuple[Path, str]]:
    """Committed tables (their .md under ``results``) whose provenance header names a ``<sha>+dirty`` commit: built
    from code that was never committed, so nobody can check out what computed them (rebuild them from a commit)."""
    out = []
    for md in sorted(results.rglob("*.md")):
        if "runs" in md.relative_to(results).parts[:1]:
            continue
        m = DIRTY.search(md.read_text(errors="replace")[:4000])
        if m:
            out.append((md, m.group(1)))
    return out


@dataclass
class RunProvenance:
    """One experiment's committed run records: how many, how many were trained from uncommitted code (their
    ``status.json`` names a ``<sha>+dirty`` commit), and how many of those were retrained since from a commit with
    metrics equal to the record's (recovering their weights does it: :mod:`oscrepro.tables.recover`)."""

    records: int = 0
    dirty: int = 0
    verified: int = 0


def dirty_runs(results: Path) -> dict[str, RunProvenance]:
    """Per experiment (``results/runs/<paper>/<experiment>``), the records trained from uncommitted code
    (:class:`RunProvenance`); only experiments with at least one such record."""
    out: dict[str, RunProvenance] = {}
    for st_path in sorted((results / "runs").glob("*/*/*/status.json")):
        st = RunRecord(st_path.parent).status()
        exp = "/".join(st_path.parts[-4:-2])
        prov = out.setdefault(exp, RunProvenance())
        prov.records += 1
        if str(st.get("git_commit", "")).endswith("+dirty"):
            prov.dirty += 1
            again = st.get("checkpoint_recovered") or {}
            if again.get("metrics_match") and again.get("git_commit") and "+dirty" not in again["git_commit"]:
                prov.verified += 1
    return {k: v for k, v in out.items() if v.dirty}


def render(states: list[ClaimState], results: Path) -> str:
    """The CLAIMS.md text: the papers' claims, then this project's own findings (the README's, counted apart)."""
    claims = [s for s in states if not is_finding(s)]
    papers = sorted({s.claim.paper for s in claims})
    findings = sorted({s.claim.paper for s in states if is_finding(s)})
    lines = ["# Claims scoreboard", "", INTRO, "", "**All papers:** " + summary(claims), "",
             "**Reports:** " + " · ".join(f"[{p}]({p}/REPORT.md)" for p in papers), ""]
    for paper in papers + findings:
        rows = [s for s in states if s.claim.paper == paper]
        if paper in findings:
            lines += [f"## Project findings: {paper}", "",
                      "The README's own findings about this grid (no paper's claim), judged by the same rules; counted "
                      f"apart from the papers. **Summary:** {summary(rows)}.", ""]
        else:
            lines += [f"## {paper}", "", f"**Summary:** {summary(rows)}. Report: [{paper}/REPORT.md]"
                      f"({paper}/REPORT.md).", ""]
        for kind, title in (("empirical", "Empirical claims"),
                            ("exact", "Exact checks (parameter counts, identities, closed forms)")):
            judged = [s for s in rows if s.claim.kind_of_claim == kind and s.status in JUDGED]
            if judged:
                lines += [f"### {title}", "",
                          "| claim | weight | where | counted at | verdict | numbers | lower budgets | table |",
                          "|---|---|---|---|---|---|---|---|"]
                lines += [_row(s, results) for s in sorted(judged, key=lambda s: (s.claim.table, s.claim.id))]
                lines.append("")
        rest = [s for s in rows if s.status in (ERROR, PAPER_ONLY, NOT_BUILT)]
        if rest:
            lines += ["### Not judged", "", "| claim | weight | where | why | table |", "|---|---|---|---|---|"]
            lines += [f"| {md_cell(s.claim.text)} | {s.claim.weight} | {md_cell(s.claim.where)} | "
                      f"{md_cell(_why_not_judged(s, results))} | `{s.claim.table}` |"
                      for s in sorted(rest, key=lambda s: (s.status, s.claim.table, s.claim.id))]
            lines.append("")
    dirty = dirty_tables(results)
    if dirty:
        lines += ["## Provenance: tables built from uncommitted code", "",
                  f"{len(dirty)} committed table(s) name a `+dirty` commit in their header: the code that computed "
                  "them was never committed as it was. Their verdicts above stand on numbers nobody can recompute from "
                  "a checkout until each is rebuilt from a commit.", ""]
        lines += [f"- {_link(md, results)} (`{sha}+dirty`)" for md, sha in dirty]
        lines.append("")
    runs = dirty_runs(results)
    if runs:
        n_dirty, n_all = sum(p.dirty for p in runs.values()), sum(p.records for p in runs.values())
        lines += ["## Provenance: run records trained from uncommitted code", "",
                  f"{n_dirty} of the {n_all} committed run records of these experiments were trained from a tree with "
                  "uncommitted changes (their `status.json` names a `<sha>+dirty` commit; they predate the rule that "
                  "tables are built from commits). Each keeps its full resolved config, which its run id hashes, "
                  "and its metrics; what it cannot show is the exact code. A record retrained from a commit with "
                  "metrics equal to the record's (recovering its weights does this and writes the comparison to its "
                  "`status.json`) is verified.", "",
                  "| experiment | records | trained from uncommitted code | of those, verified by a retrain from a "
                  "commit |",
                  "|---|---|---|---|"]
        lines += [f"| `{exp}` | {p.records} | {p.dirty} | {p.verified} |" for exp, p in sorted(runs.items())]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Write CLAIMS.md, the tables' claims sections and the per-paper reports; exit 2 if a claim cannot be checked."""
    parser = argparse.ArgumentParser(prog="python -m oscrepro.claims", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results-dir", default=os.environ.get("OSCREPRO_RESULTS_DIR", "results"))
    parser.add_argument("--conf-dir", default=str(CONF_DIR),
                        help="the conf folder whose table specs hold the claims (default: the project's conf/)")
    args = parser.parse_args(argv)
    results, conf_dir = Path(args.results_dir), Path(args.conf_dir)
    states = collect(results, conf_dir)
    out = results / "CLAIMS.md"
    results.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, render(states, results) + "\n")
    checked = [c for s in states for c in s.checks]
    variants = check_variants(results, conf_dir)  # in each variant's own .md, not in the scoreboard
    write_table_sections(checked + variants, out)
    kept = {c.table_md for c in checked + variants}
    for md in results.rglob("*.md"):  # a table whose spec lost its claims keeps no stale section
        if md not in kept and md.name not in ("CLAIMS.md", "REPORT.md") and md.is_file():
            strip_section(md)
    reports = write_reports([s for s in states if not is_finding(s)], results, conf_dir)
    print(f"[claims] wrote {out}: {summary([s for s in states if not is_finding(s)])}", flush=True)
    print(f"[claims] wrote {len(reports)} reports: " + ", ".join(str(p) for p in reports), flush=True)
    dirty = dirty_tables(results)
    if dirty:
        print(f"[claims] {len(dirty)} committed table(s) were built from uncommitted code (+dirty): listed at the end "
              f"of {out}", file=sys.stderr, flush=True)
    failed = [e for s in states for e in s.errors]
    for e in failed:
        print(f"[claims] cannot check {e.claim.table} {e.claim.id!r} at {e.budget}: {e.message}", file=sys.stderr,
              flush=True)
    if failed:
        raise SystemExit(2)


if __name__ == "__main__":
    main()
