"""Redraw a table's figure from its committed csv, without training or re-measuring.

    python -m oscrepro.tables.redraw fqo/table4 --budget cpu          # results/fqo/cpu/fig6.png
    python -m oscrepro.tables.redraw --all --budget cpu               # every spec with a figure.redraw
    python -m oscrepro.tables.redraw osciformer/fig2_time --restamp   # + the .md's budget line, re-stamped

A table spec names its redraw callable in its top-level ``figure:`` block (``figure.redraw``), which the table
engine never reads, so the block changes no run and no golden config. The callable is called as
``fn(spec=..., budget=..., out_dir=..., rows=<the csv as dicts of strings>)`` and returns the PNG path. Why: an
analysis table measures (timings, attention maps of checkpoints that are not in git) and a build would give new
numbers; the figure's look can change without them.

``--restamp`` rewrites the ``**Budget:**`` line of the table's .md as the renderer writes it now (from the spec's
``budget_notes`` / ``analysis.budgets``) and adds a ``**Redrawn:**`` line with this commit; the device, commit and
date of the measurement and every number stay as they are.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hydra.utils import get_method

from oscrepro.analysis.figures import figure_block, read_csv_rows
from oscrepro.tables.spec import BUDGETS, SpecError, TableSpec, available_tables, load_spec
from oscrepro.utils.provenance import provenance


def table_dir(spec: TableSpec, budget: str, results: Path) -> Path:
    """Where the table engine writes ``spec`` at ``budget`` (paper budget: ``results/<paper>/``)."""
    return results / spec.paper if budget == "paper" else results / spec.paper / budget


def redraw(key: str, budget: str = "cpu", results: str | Path = "results") -> Path:
    """Redraw the figure of table ``key`` at ``budget`` from its committed csv; returns the PNG path."""
    spec = load_spec(key)
    target = figure_block(spec.path).get("redraw")
    if not target:
        raise SpecError(f"table {key}: {spec.path} has no figure.redraw")
    out_dir = table_dir(spec, budget, Path(results))
    csv_path = out_dir / f"{key.split('/')[-1]}.csv"
    if not csv_path.exists():
        raise SpecError(f"table {key}: no {csv_path} to redraw from (build the table first)")
    return get_method(target)(spec=spec, budget=budget, out_dir=out_dir, rows=read_csv_rows(csv_path))


def restamp(key: str, budget: str = "cpu", results: str | Path = "results") -> Path:
    """Rewrite the ``**Budget:**`` line of a rendered table (as :func:`oscrepro.tables.render.header_lines` writes
    it now) and add or replace its ``**Redrawn:**`` line; nothing else in the file changes."""
    from oscrepro.tables.render import header_lines

    spec = load_spec(key)
    md = table_dir(spec, budget, Path(results)) / f"{key.split('/')[-1]}.md"
    lines = md.read_text().splitlines()
    budget_line = next(x for x in header_lines(spec, budget, None, [], {}) if x.startswith("- **Budget:**"))
    prov = provenance()
    stamp = (
        f"- **Redrawn:** figure and this header's budget line re-rendered from the committed csv at commit "
        f"`{prov['git_commit']}` ({prov['date']}); every number is as measured at the **Device** line below"
    )
    out = []
    for line in lines:
        if line.startswith("- **Redrawn:**"):
            continue
        if line.startswith("- **Budget:**"):
            out += [budget_line, stamp]
            continue
        out.append(line)
    md.write_text("\n".join(out) + "\n")
    return md


def redrawable(budget: str, results: Path) -> list[str]:
    """Tables with a ``figure.redraw`` whose csv exists at ``budget``."""
    out = []
    for key in available_tables():
        spec = load_spec(key)
        if (
            figure_block(spec.path).get("redraw")
            and (table_dir(spec, budget, results) / f"{key.split('/')[-1]}.csv").exists()
        ):
            out.append(key)
    return out


def main(argv: list[str] | None = None) -> None:
    """The CLI (module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m oscrepro.tables.redraw",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("tables", nargs="*", help="<paper>/<table> keys")
    parser.add_argument("--all", action="store_true", help="every table with a figure.redraw and a csv")
    parser.add_argument("--budget", default="cpu", choices=BUDGETS)
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("--restamp", action="store_true", help="also re-stamp the .md's budget line")
    args = parser.parse_args(argv)
    results = Path(args.results_dir)
    keys = redrawable(args.budget, results) if args.all else args.tables
    if not keys:
        parser.error("name a table or pass --all")
    for key in keys:
        try:
            path = redraw(key, args.budget, results)
        except SpecError as err:
            print(f"[redraw {key}] {err}", file=sys.stderr)
            raise SystemExit(2) from None
        print(f"[redraw {key}] wrote {path}")
        if args.restamp:
            print(f"[redraw {key}] re-stamped {restamp(key, args.budget, results)}")


if __name__ == "__main__":
    main()
