"""What a claim's seeds are, for the planner and the scoreboard alike: the seed and trial caps of the design, and
the source rows behind an analysis that reads another table's seeds. Kept apart from
:mod:`oscrepro.claims.candidates` (which judges claims through the scoreboard) so that the scoreboard's sibling rule
(:mod:`oscrepro.claims.siblings`) can read them without an import cycle."""

from __future__ import annotations

from pathlib import Path

from oscrepro.tables.spec import TableSpec

DEFAULT_CAP = 10  # seeds per cell at most: beyond it a claim's effect is too small for this budget to matter
TRIAL_CAP_FACTOR = 4  # timed trials per cell at most: this many times the spec's own count (fixed before looking)


def source_rows(spec: TableSpec, budget: str, results: Path, rows: list[str]) -> tuple[str, list[str]] | None:
    """(source table, its rows) behind analysis rows ``rows`` when the analysis reads every seed of one other
    table's cells (its planning function's :class:`~oscrepro.tables.sources.RunNeeds`: cells only, all seeds, no
    variant overrides): raising those rows' seeds raises the analysis cells' n. Analysis rows named like their
    source cells map to them; otherwise every source row is extended. None when the analysis reads no such cells."""
    from oscrepro.tables.build import analysis_needs

    needs = analysis_needs(spec, budget, results)
    if needs is None:
        return None
    cells = needs.cells
    if needs.own is not None or needs.then is not None or not cells or len({c.table for c in cells.values()}) != 1 \
            or any(c.seeds is not None or c.overrides for c in cells.values()):
        return None
    mine = [cells[r].row for r in rows if r in cells] or [c.row for c in cells.values()]
    return next(iter(cells.values())).table, list(dict.fromkeys(mine))
