"""Markdown tables that stay readable: a table wider than ``max_columns`` is split into several, each repeating the
key columns (the first ``keep``), so no rendered table runs to 25 columns (ssa Table 1 did).

    python -m oscrepro.tables.markdown results/ssa/cpu/table1.md --keep 2   # re-lay out a committed table

Only the layout changes: every cell's text is kept as it is, in the same row, under the same header.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

MAX_COLUMNS = 12


def table_lines(header: list[str], rows: list[list[str]], keep: int = 1, max_columns: int = MAX_COLUMNS) -> list[str]:
    """Markdown lines of one table, or of several (blank line between) when ``header`` is wider than
    ``max_columns``: the non-key columns are cut into the fewest even groups that fit beside the ``keep`` key
    columns."""
    if len(header) <= max_columns or keep >= max_columns:
        groups = [list(range(len(header)))]
    else:
        rest = list(range(keep, len(header)))
        n = math.ceil(len(rest) / (max_columns - keep))
        size = math.ceil(len(rest) / n)
        groups = [list(range(keep)) + rest[i : i + size] for i in range(0, len(rest), size)]
    out: list[str] = []
    for g in groups:
        if out:
            out.append("")
        out.append("| " + " | ".join(header[i] for i in g) + " |")
        out.append("|" + "---|" * len(g))
        out += ["| " + " | ".join(r[i] for i in g) + " |" for r in rows]
    return out


def row_cells(line: str) -> list[str]:
    """A markdown table row's cells, each stripped; an escaped ``\\|`` (as in ``|a − b|``) is text inside its cell,
    kept as written (the scoreboard escapes the bars of its numbers)."""
    return [c.strip().replace("\0", "\\|") for c in line.replace("\\|", "\0").strip().strip("|").split("|")]


def relayout(text: str, keep: int = 1, max_columns: int = MAX_COLUMNS) -> str:
    """``text`` with every markdown table wider than ``max_columns`` split by :func:`table_lines`; other lines
    unchanged."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        is_table = lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---")
        if not is_table:
            out.append(lines[i])
            i += 1
            continue
        header = row_cells(lines[i])
        j = i + 2
        rows = []
        while j < len(lines) and lines[j].startswith("|"):
            rows.append(row_cells(lines[j]))
            j += 1
        if any(len(r) != len(header) for r in rows):  # a ragged row: leave the table as it is
            out += lines[i:j]
        else:
            out += table_lines(header, rows, keep, max_columns)
        i = j
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def main(argv: list[str] | None = None) -> None:
    """Re-lay out the wide tables of markdown files in place (module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m oscrepro.tables.markdown",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--keep", type=int, default=1, help="key columns repeated in every part")
    parser.add_argument("--max-columns", type=int, default=MAX_COLUMNS)
    args = parser.parse_args(argv)
    for path in args.files:
        path.write_text(relayout(path.read_text(), args.keep, args.max_columns))
        print(f"[markdown] {path}")


if __name__ == "__main__":
    main()
