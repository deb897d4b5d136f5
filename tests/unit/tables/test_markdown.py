"""Wide markdown tables are split into parts that repeat the key columns; every cell keeps its row and header."""

from __future__ import annotations

from pathlib import Path

from oscrepro.tables.markdown import MAX_COLUMNS, relayout, row_cells, table_lines

RESULTS = Path(__file__).resolve().parents[3] / "results"


def _tables(text: str) -> list[list[list[str]]]:
    out, cur = [], None
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = row_cells(line)
            if cur is None:
                cur = []
                out.append(cur)
            cur.append(cells)
        elif not line.startswith("|"):
            cur = None
    return out


def test_narrow_table_is_unchanged():
    lines = table_lines(["a", "b"], [["1", "2"]])
    assert lines == ["| a | b |", "|---|---|", "| 1 | 2 |"]


def test_wide_table_splits_and_keeps_every_cell():
    header = ["N", "B", *[f"c{i}" for i in range(18)]]
    rows = [[str(n), "8", *[f"{n}:{i}" for i in range(18)]] for n in (128, 256)]
    parts = _tables("\n".join(table_lines(header, rows, keep=2)))
    assert len(parts) == 2 and all(len(p[0]) <= MAX_COLUMNS for p in parts)
    seen = {}
    for p in parts:
        assert p[0][:2] == ["N", "B"]
        for row in p[1:]:
            seen.update({(row[0], h): v for h, v in zip(p[0], row, strict=True)})
    assert seen == {(r[0], h): v for r in rows for h, v in zip(header, r, strict=True)}


def test_committed_ssa_table1_is_readable():
    """ssa Table 1 had 20+ columns in one markdown table; the engine splits it, repeating the first column (N)."""
    text = (RESULTS / "ssa" / "cpu" / "table1.md").read_text()
    assert all(len(t[0]) <= MAX_COLUMNS for t in _tables(text))
    assert relayout(text, keep=1) == text  # already laid out: a second pass changes nothing


def test_an_escaped_bar_stays_inside_its_cell():
    """The scoreboard writes |a − b| as \\|a − b\\| inside a cell: one cell, kept as written, and a wide table
    holding one is split like any other (each cell's text unchanged)."""
    assert row_cells("| claim | \\|a − b\\| ≤ 1 | holds |") == ["claim", "\\|a − b\\| ≤ 1", "holds"]
    header = ["k", *[f"c{i}" for i in range(14)]]
    rows = [["r", "\\|x\\|", *[str(i) for i in range(13)]]]
    parts = _tables(relayout("\n".join(table_lines(header, rows, max_columns=99))))
    assert len(parts) == 2 and parts[0][1][1] == "\\|x\\|"
