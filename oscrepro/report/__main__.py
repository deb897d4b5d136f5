"""``python -m oscrepro.report [--results-dir results]`` (``make report``): write ``results/index.html`` and the pages
under ``results/report/`` from the committed tables, figures and claims reports (:mod:`oscrepro.report`). Trains
and measures nothing; opens offline from ``file://``."""

from __future__ import annotations

import argparse

from oscrepro.report.build import Report
from oscrepro.report.links import broken_links
from oscrepro.runs.record import results_root


def main(argv: list[str] | None = None) -> None:
    """Build the report and print where it is."""
    parser = argparse.ArgumentParser(prog="python -m oscrepro.report", description=__doc__)
    parser.add_argument("--results-dir", default=None, help="default: $OSCREPRO_RESULTS_DIR or results")
    args = parser.parse_args(argv)
    results = results_root(args.results_dir)
    if not results.is_dir():
        raise SystemExit(f"[report] no results dir {results}")
    report = Report(results)
    paths = report.write()
    broken = broken_links({p.relative_to(results): p.read_text() for p in paths}, results)
    if broken:  # a page that points nowhere is a bug of the report (or of a table's own links): say which
        raise SystemExit(f"[report] {len(broken)} broken link(s), e.g.\n  " + "\n  ".join(broken[:20]))
    print(
        f"[report] {len(report.site.documents)} tables, "
        f"{sum(len(d.figures) for d in report.site.documents) + sum(map(len, report.site.loose_figures.values()))} "
        f"figures, {len(paths)} pages; open {paths[0].resolve().as_uri()}"
    )


if __name__ == "__main__":
    main()
