"""Render aggregated tables to ``results/<paper>/<name>.{md,csv}`` with a provenance header.

Our numbers and the paper's sit in separate columns; the paper's come only from the spec's reference data.

The csv is what the claims engine (:mod:`oscrepro.claims.scoreboard`) reads, so it carries numbers, never only their
rendering:

* a runs table has one line per cell: ``row, column, ours_mean, ours_std, n`` (+ counts, flags, the paper's value,
  and ``ours_units``: each seed's value keyed by its run id, :func:`~oscrepro.tables.values.encode_units`, so that
  two cells of the same runs are judged as paired);
* an analysis table has the adapter's columns, one line per row. A cell holding a
  :class:`~oscrepro.tables.values.SeedStat` (a statistic over seeds) is written as its mean, a plain float, in
  ``<column>``, its sample std in ``<column>__std`` (``nan`` below two seeds) and its seed count in ``<column>__n``
  (+ ``<column>__flags`` where a cell of the column carries flags such as ``diverged 1``, and ``<column>__units``
  where it keeps its per-run values); the .md shows it as the
  adapter asked (``27.6 ± 2.8``). The suffixed columns exist for every column holding a SeedStat in some row and
  are empty in the rows where that column holds a plain number (n = 1) or a string.

Analysis adapters return numbers; this module formats them (:func:`cell_text`): a :class:`SeedStat` and a
:class:`~oscrepro.tables.values.Num` carry their digits (a SeedStat in a column of the spec's ``formats`` shows its
mean and std in that column's format; its csv numbers stay at full precision); a plain number in a column of the
spec's ``formats`` (``{column: digits | format spec | template}``) is shown so, in the .md and in the csv (the
precision the analysis stands behind, as the text cells these columns held before; None there is "—" in both); any
other float is shown with 4 decimals in the .md and written at full precision to the csv; ``None`` is "—" (empty in
the csv); text is text.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from oscrepro.runs.record import atomic_write_text
from oscrepro.tables.aggregate import Cell
from oscrepro.tables.markdown import table_lines
from oscrepro.tables.spec import SpecError, TableSpec
from oscrepro.tables.values import STAT_FIELDS, Num, SeedStat, column_format, encode_units
from oscrepro.utils.provenance import provenance


def _fmt(x: float, digits: int) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _paper(value: Any) -> tuple[float, float]:
    if value is None:
        return math.nan, math.nan
    if isinstance(value, (list, tuple)):
        return float(value[0]), float(value[1]) if len(value) > 1 and value[1] is not None else math.nan
    return float(value), math.nan


def format_cell(cell: Cell, digits: int) -> str:
    """'mean ± std (n=k)' plus divergence/failure/missing flags; counts render as 'k/n'."""
    if cell.count is not None:
        text = f"{cell.count}/{cell.n}"
    else:
        text = _fmt(cell.mean, digits)
        if not math.isnan(cell.std):
            text += f" ± {_fmt(cell.std, digits)}"
        if cell.n_runs:
            text += f" (n={cell.n})"
    flags = [f"{k} {v}" for k, v in (("diverged", cell.n_diverged), ("failed", cell.n_failed),
                                      ("missing", cell.n_missing)) if v]
    if cell.failed_as:  # name the SLURM states: "failed 1 (CANCELLED)"
        flags = [f + f" ({', '.join(sorted(set(cell.failed_as)))})" if f.startswith("failed") else f for f in flags]
    return text + (f" [{', '.join(flags)}]" if flags else "")


def header_lines(spec: TableSpec, budget: str, n_seeds: int | None, data: list[str], runs: dict[str, int],
                 extra: list[str] | None = None) -> list[str]:
    """Provenance header: what is reproduced, budget (flagged when below paper), data, device, commit, date."""
    prov = provenance()
    below = spec.below_paper(budget)  # an analysis without a setting for the budget runs the paper's protocol
    budget_line = f"**Budget:** `{budget}`" + (
        " — **BELOW PAPER BUDGET**: " + spec.budget_notes.get(budget, "scaled-down training; not comparable 1:1")
        if below else " — the paper's hyperparameters unchanged")
    lines = [f"# {spec.paper} — {spec.key.split('/')[-1]}: {spec.title}", "",
             f"- **Reproduces:** {spec.source}", f"- {budget_line}"]
    if n_seeds is not None:
        differ = ", ".join(f"{label} {n}" for label, n in spec.own_counts(budget).items())
        lines.append(f"- **Seeds per cell:** {n_seeds} (paper budget: {spec.seeds.get('paper')})"
                     + (f"; rows (or `row | column` cells) with their own count (the row's `seeds`, or raised by the "
                        f"claims planner to decide a claim: `conf/decide/{budget}.yaml`): {differ}" if differ else ""))
    if data:
        lines.append("- **Data:** " + "; ".join(data))
    if runs:
        lines.append("- **Runs:** " + ", ".join(f"{v} {k}" for k, v in runs.items()))
    for note in extra or []:
        lines.append(f"- {note}")
    lines.append(f"- **Device:** {prov['device']}; **commit** `{prov['git_commit']}`; **date** {prov['date']}; "
                 f"torch {prov['torch']}; oscrepro {prov['oscrepro']}")
    origin = (f"are computed by `{spec.analysis['_target_']}`" if spec.kind == "analysis"
              else "come from run records")
    lines.append(f"- Reproduced columns {origin}; `paper` columns are reference values from "
                 f"`{spec.path.relative_to(spec.path.parents[3])}`; `Δ` = ours − paper.")
    return lines


def render_runs_table(spec: TableSpec, budget: str, cells: dict[tuple[int, str], Cell], out_dir: Path,
                      data: list[str], runs: dict[str, int], notes: list[str] | None = None) -> Path:
    """Write ``<out_dir>/<name>.md`` and ``.csv``; returns the markdown path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    name = spec.key.split("/")[-1]
    head = ["Condition"]
    for c in spec.columns:
        head += [f"{c.label} (ours)", "paper", "Δ"] if c.count_below is None else [f"{c.label} (ours)", "paper"]
    md = header_lines(spec, budget, len(spec.seeds_for(budget)), data, runs, notes) + [
        "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows_csv: list[dict[str, Any]] = []
    for ri, row in enumerate(spec.rows):
        line = [row.label]
        for c in spec.columns:
            cell = cells[(ri, c.name)]
            p_mean, p_std = _paper(row.paper.get(c.name))
            line.append(format_cell(cell, c.digits))
            if c.count_below is None:
                ptxt = _fmt(p_mean, c.digits) + ("" if math.isnan(p_std) else f" ± {_fmt(p_std, c.digits)}")
                diff = cell.mean - p_mean
                line += [ptxt, ("+" if diff > 0 else "") + _fmt(diff, c.digits)]
            else:
                line.append("—" if math.isnan(p_mean) else f"{int(p_mean)}/{spec.seeds['paper']}")
            rows_csv.append({"row": row.label, "column": c.name, "ours_mean": cell.mean, "ours_std": cell.std,
                             "ours_count": cell.count, "n": cell.n, "n_diverged": cell.n_diverged,
                             "n_failed": cell.n_failed, "n_missing": cell.n_missing,
                             "paper_mean": p_mean, "paper_std": p_std, "budget": budget,
                             "ours_units": encode_units(cell.units)})
        md.append("| " + " | ".join(line) + " |")
    md_path = out_dir / f"{name}.md"
    write_csv(out_dir / f"{name}.csv", list(rows_csv[0]), rows_csv)
    atomic_write_text(md_path, "\n".join(md) + "\n")
    return md_path


def cell_text(value: Any, fmt: str | None = None) -> str:
    """An analysis cell as the .md shows it (module docstring); ``fmt``: its column's template from the spec's
    ``formats``."""
    if value is None:
        return "—"
    if isinstance(value, SeedStat):
        return value.text(fmt)  # the column's format, where the spec gives one, for the mean and the std
    if isinstance(value, Num):
        return value.text()
    if fmt is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt.format(value)
    if isinstance(value, float):
        return _fmt(value, 4)
    return str(value)


def render_analysis_table(spec: TableSpec, budget: str, columns: list[str], rows: list[dict[str, Any]],
                          out_dir: Path, notes: list[str]) -> Path:
    """Markdown + CSV for analysis tables (rows are dicts over ``columns``; a value is a number, a
    :class:`SeedStat`, a :class:`~oscrepro.tables.values.Num`, None or text, formatted here: see the module
    docstring)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    name = spec.key.split("/")[-1]
    formats = analysis_formats(spec, columns)
    cells = [[cell_text(r[c], formats.get(c)) for c in columns] for r in rows]
    # a wide table is split into parts that repeat the first column (oscrepro.tables.markdown)
    md = header_lines(spec, budget, None, [], {}, notes) + ["", *table_lines(columns, cells)]
    md_path = out_dir / f"{name}.md"
    fieldnames, csv_rows = analysis_csv(columns, rows, formats)
    write_csv(out_dir / f"{name}.csv", fieldnames, csv_rows)
    atomic_write_text(md_path, "\n".join(md) + "\n")
    return md_path


def analysis_formats(spec: TableSpec, columns: list[str]) -> dict[str, str]:
    """The spec's ``formats`` as templates per column; a format for a column the table does not have is a
    :class:`~oscrepro.tables.spec.SpecError` (a renamed column would silently lose its digits)."""
    unknown = sorted(set(spec.formats) - set(columns))
    if unknown:
        raise SpecError(f"table spec {spec.path}: formats for unknown columns {unknown}; columns: {columns}")
    return {c: column_format(f) for c, f in spec.formats.items()}


def analysis_csv(columns: list[str], rows: list[dict[str, Any]], formats: dict[str, str] | None = None
                 ) -> tuple[list[str], list[dict[str, Any]]]:
    """The csv header and lines of an analysis table: each :class:`SeedStat` cell as its numbers (mean in the
    column, ``__std``, ``__n``, and ``__flags`` where the column has any), a :class:`Num` and a number of a
    formatted column as shown, every other value as it is."""
    formats = formats or {}
    stat_cols = {c: any(isinstance(r.get(c), SeedStat) for r in rows) for c in columns}
    flag_cols = {c for c in columns if any(isinstance(r.get(c), SeedStat) and r[c].flags for r in rows)}
    unit_cols = {c for c in columns if any(isinstance(r.get(c), SeedStat) and r[c].units for r in rows)}
    fieldnames: list[str] = []
    for c in columns:
        fieldnames.append(c)
        if stat_cols[c]:
            fieldnames += [f"{c}__std", f"{c}__n"] + ([f"{c}__flags"] if c in flag_cols else [])
            fieldnames += [f"{c}__units"] if c in unit_cols else []
    clash = sorted({f for f in fieldnames if fieldnames.count(f) > 1})
    if clash:
        raise ValueError(f"analysis columns {clash} collide with the numeric columns of a SeedStat column "
                         f"(<column>__{{{','.join(STAT_FIELDS)}}}); rename them in the adapter")
    out = []
    for r in rows:
        line = dict(r)  # a key outside ``columns`` still fails in csv.DictWriter, as before
        for c in columns:
            v = r[c]
            if isinstance(v, SeedStat):
                line[c], line[f"{c}__std"], line[f"{c}__n"] = v.mean, v.std, v.n
                if c in flag_cols:
                    line[f"{c}__flags"] = ", ".join(v.flags)
                if c in unit_cols:
                    line[f"{c}__units"] = encode_units(v.units)
            elif isinstance(v, Num) or (c in formats and not isinstance(v, str)):
                line[c] = cell_text(v, formats.get(c))
        out.append(line)
    return fieldnames, out


def write_csv(path: Path, fieldnames: list[str], rows: list[dict[str, Any]]) -> None:
    """Write a table's csv whole or not at all (:func:`~oscrepro.runs.record.atomic_write_text`): a build
    killed or out of disk space leaves the previous table, never half of one. Bytes as ``csv.DictWriter`` on a
    file opened with ``newline=""`` writes them."""
    buf = io.StringIO(newline="")
    writer = csv.DictWriter(buf, fieldnames=fieldnames)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())
