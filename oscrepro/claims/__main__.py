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

from oscrepro.claims.scoreboard import (
    MARK,
    Checked,
    check_all,
    check_variants,
    strip_section,
    unchecked,
    write_table_sections,
)
from oscrepro.claims.verdict import STATUSES
from oscrepro.utils.run_record import atomic_write_text


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
    variants = check_variants(results)  # in each variant's own .md, not in the scoreboard
    write_table_sections(checked + variants, out)
    kept = {c.table_md for c in checked + variants}
    for md in results.rglob("*.md"):  # a table whose spec lost its claims keeps no stale section
        if md not in kept and md.name != "CLAIMS.md" and md.is_file():
            strip_section(md)
    counts = Counter(c.verdict.status for c in checked)
    print(f"[claims] wrote {out}: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES), flush=True)


if __name__ == "__main__":
    main()
