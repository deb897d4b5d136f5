"""``python -m oscrepro.claims`` (``make claims``): write ``results/CLAIMS.md`` from the committed tables.

Per paper: a summary line (holds / contradicted / inconclusive), then one line per claim and budget with the
paper's sentence, where it stands, the verdict, the numbers behind it (effect, interval, test) and a link to the
table. Claims whose table is not built at any budget are listed as such. Trains nothing.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter, defaultdict
from pathlib import Path

from oscrepro.claims.scoreboard import Checked, check_all, unchecked
from oscrepro.claims.verdict import STATUSES
from oscrepro.utils.run_record import atomic_write_text

MARK = {"holds": "✅ holds", "contradicted": "❌ contradicted", "inconclusive": "❔ inconclusive"}


def render(checked: list[Checked], not_built: list, results: Path) -> str:
    """The CLAIMS.md text."""
    by_paper: dict[str, list[Checked]] = defaultdict(list)
    for c in checked:
        by_paper[c.claim.table.split("/")[0]].append(c)
    for cl in not_built:
        by_paper.setdefault(cl.table.split("/")[0], [])
    total = Counter(c.verdict.status for c in checked)
    lines = ["# Claims scoreboard", "",
             "Each claim is a paper's sentence with a checkable form over one of our tables (written in its spec, "
             "`conf/table/<paper>/<table>.yaml`), checked at every budget where that table is committed: holds / "
             "contradicted when the interval of the effect lies on one side, inconclusive when it straddles or "
             "cannot be computed (fewer than 2 seeds). Built by `make claims` from the committed tables; nothing is "
             "trained. A verdict at a budget below the paper's speaks for that budget only.", "",
             "**All papers:** " + ", ".join(f"{total[s]} {s}" for s in STATUSES)
             + f" ({len(checked)} checks of {len({c.claim.id for c in checked}) + len(not_built)} claims)", ""]
    for paper in sorted(by_paper):
        rows = by_paper[paper]
        counts = Counter(c.verdict.status for c in rows)
        lines += [f"## {paper}", "", "**Summary:** " + ", ".join(f"{counts[s]} {s}" for s in STATUSES), "",
                  "| claim | where | budget | verdict | numbers | table |", "|---|---|---|---|---|---|"]
        for c in sorted(rows, key=lambda c: (c.claim.table, c.claim.id, c.budget)):
            link = os.path.relpath(c.table_md, results)
            lines.append(f"| {c.claim.text} | {c.claim.where} | `{c.budget}` | {MARK[c.verdict.status]} | "
                         f"{c.verdict.detail} | [{c.claim.table}]({link}) |")
        for cl in [cl for cl in not_built if cl.table.split("/")[0] == paper]:
            lines.append(f"| {cl.text} | {cl.where} | — | not built | the table is committed at no budget | "
                         f"`{cl.table}` |")
        lines.append("")
    return "\n".join(lines)


BEGIN, END = "<!-- claims: make claims -->", "<!-- /claims -->"


def table_section(rows: list[Checked], scoreboard: Path) -> str:
    """The claims section of one table's .md (between BEGIN and END markers, rewritten by every ``make claims``)."""
    lines = [BEGIN, "", "## Claims", "",
             "The paper's claims on this table, checked on the numbers above (`make claims`; all papers: "
             f"[CLAIMS.md]({os.path.relpath(scoreboard, rows[0].table_md.parent)})).", "",
             "| claim | where | verdict | numbers |", "|---|---|---|---|"]
    lines += [f"| {c.claim.text} | {c.claim.where} | {MARK[c.verdict.status]} | {c.verdict.detail} |" for c in rows]
    return "\n".join([*lines, "", END])


def strip_section(md: Path) -> None:
    """Remove a claims section left in a table's .md whose spec no longer has claims."""
    text = md.read_text()
    if BEGIN in text:
        atomic_write_text(md, text[: text.index(BEGIN)].rstrip("\n") + text[text.index(END) + len(END):].rstrip("\n")
                          + "\n")


def write_table_sections(checked: list[Checked], scoreboard: Path) -> None:
    """Put (or replace) each checked table's claims section at the end of its .md."""
    by_md: dict[Path, list[Checked]] = defaultdict(list)
    for c in checked:
        by_md[c.table_md].append(c)
    for md, rows in by_md.items():
        if not md.exists():
            continue
        text = md.read_text()
        if BEGIN in text:
            text = text[: text.index(BEGIN)].rstrip("\n") + text[text.index(END) + len(END):]
        atomic_write_text(md, text.rstrip("\n") + "\n\n" + table_section(rows, scoreboard) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m oscrepro.claims", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results-dir", default=os.environ.get("OSCREPRO_RESULTS_DIR", "results"))
    args = parser.parse_args(argv)
    results = Path(args.results_dir)
    checked, not_built = check_all(results), unchecked(results)
    out = results / "CLAIMS.md"
    results.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, render(checked, not_built, results) + "\n")
    write_table_sections(checked, out)
    kept = {c.table_md for c in checked}
    for md in results.rglob("*.md"):  # a table whose spec lost its claims keeps no stale section
        if md not in kept and md.name != "CLAIMS.md" and md.is_file():
            strip_section(md)
    counts = Counter(c.verdict.status for c in checked)
    print(f"[claims] wrote {out}: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES), flush=True)


if __name__ == "__main__":
    main()
