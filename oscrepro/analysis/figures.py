"""Writing figures, one way for every paper's plots: the paper's values drawn beside ours in one style, the budget in
a caption under the axes, a legend entry for every marker, and a redraw path from the committed csv.

* :func:`save_figure` lays out, draws the caption, stamps it into the PNG's ``Description`` text chunk (the report
  shows it under the image: ``oscrepro.report``) and closes the figure.
* :data:`PAPER` is the look of a paper value (hollow black diamonds, dotted lines, grey bands); :func:`paper_label`
  names it in the legend, so a reader tells the paper's numbers from ours without reading the caption.
* :func:`budget_caption` says at which budget our numbers were made, from the table spec's ``budget_notes``;
  :func:`paper_caption` adds what the paper states about a figure it gives without values (``figure.paper``).
* :func:`figure_block` reads a spec's top-level ``figure:`` block: the paper's figure values (reference data read
  off the paper, never written into a reproduced column) and ``redraw``, the callable that redraws the figure from
  the committed csv without training (``python -m oscrepro.tables.redraw <table> --budget cpu``).
* :func:`unlabelled_markers` lists what a legend misses (the tests call it on every redrawn figure).
"""

from __future__ import annotations

import csv
import textwrap
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

# the paper's values: never filled, so that they never read as ours
PAPER: dict[str, Any] = {"marker": "D", "ms": 7, "mfc": "none", "mec": "black", "mew": 1.3, "ls": "none", "zorder": 5}
PAPER_LINE: dict[str, Any] = {"color": "black", "ls": ":", "lw": 1.4}
PAPER_BAND: dict[str, Any] = {"color": "grey", "alpha": 0.18, "lw": 0}


def paper_label(what: str) -> str:
    """Legend text of a paper value: ``paper: <what>``."""
    return f"paper: {what}"


def power_law_label(c: float, alpha: float, symbol: str = "d") -> str:
    """Mathtext of C * d^(-alpha) with the exponent's sign written once (alpha = -0.36 gives ``d^{+0.36}``, never
    ``d^{--0.36}``)."""
    return rf"${c:.2f}\,{symbol}^{{{-alpha:+.2f}}}$"


def budget_caption(budget: str, notes: dict[str, str] | None = None, source: str = "") -> str:
    """One caption line: the budget and, below the paper's, what was scaled down (the spec's ``budget_notes``)."""
    where = f"{source}. " if source else ""
    if budget == "paper":
        return f"{where}Budget: paper."
    note = (notes or {}).get(budget, "scaled-down training; not comparable 1:1").rstrip(". ")
    return f"{where}Budget: {budget}, BELOW PAPER BUDGET: {note}."


def spec_caption(spec: Any, budget: str) -> str:
    """:func:`budget_caption` of a :class:`~oscrepro.tables.spec.TableSpec` (its source and budget notes)."""
    return budget_caption(budget, spec.budget_notes, f"Reproduces {spec.source}")


def header_caption(spec: Any, budget: str) -> str:
    """:func:`spec_caption` by the table header's rule (``oscrepro.tables.render.header_lines``): an analysis spec
    with no setting for ``budget`` under ``analysis.budgets`` runs the paper's protocol unchanged, so its figure
    says so instead of flagging the budget as below the paper's."""
    if budget == "paper" or spec.below_paper(budget):
        return spec_caption(spec, budget)
    return f"Reproduces {spec.source}. Budget: {budget}, the paper's settings unchanged."


def paper_caption(spec: Any, budget: str, which: str) -> str:
    """A figure's caption: :func:`header_caption` and what the paper states about figure ``which`` (the spec's
    ``figure.paper.statements.<which>``: quoted text, for panels the paper gives without values)."""
    said = (figure_block(spec.path).get("paper") or {}).get("statements", {}).get(which, [])
    return " ".join([header_caption(spec, budget), *said])


def figure_notes(spec: Any) -> list[str]:
    """The spec's ``figure.note`` as a table note: which of the paper's values the figure draws, and that it
    states no number for the rest (``[]`` without one)."""
    note = figure_block(spec.path).get("note")
    return [f"**Paper values in the figure:** {note}"] if note else []


def figure_block(spec_path: str | Path) -> dict[str, Any]:
    """The top-level ``figure:`` block of a table spec file (``{}`` without one). Kept outside ``analysis:`` and
    ``post:`` so that reference values for a figure do not change what a build runs."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(OmegaConf.load(spec_path), resolve=True)
    return dict(raw.get("figure") or {}) if isinstance(raw, dict) else {}


def read_csv_rows(path: str | Path) -> list[dict[str, str]]:
    """A committed table csv as dicts of strings (leading ``#`` provenance lines skipped)."""
    with open(path, newline="") as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))


def cell_stat(row: dict[str, str], column: str) -> tuple[float, float]:
    """(mean, std) of one csv cell: numeric with a ``<column>__std`` beside it (the renderer's SeedStat columns) or
    text ``"2.92 ± 0.06"`` (older analysis csvs); std is nan when the cell has none, both nan for ``—``."""
    text = (row.get(column) or "").strip()
    nan = float("nan")
    if f"{column}__std" in row:
        return (float(text) if text else nan), float(row[f"{column}__std"] or nan)
    mean, _, std = text.partition("±")
    try:
        return float(mean), (float(std.split()[0]) if std.strip() else nan)
    except ValueError:
        return nan, nan


def _caption_text(fig: Figure) -> str | None:
    return getattr(fig, "_oscrepro_caption", None)


def set_caption(fig: Figure, text: str) -> None:
    """Attach a caption that :func:`save_figure` draws under the axes and writes into the PNG metadata."""
    fig._oscrepro_caption = text  # type: ignore[attr-defined]


def save_figure(fig: Figure, path: str | Path, dpi: int = 120, caption: str | None = None) -> Path:
    """Lay out, save (creating the folder) and close ``fig``; returns the path. ``caption`` (or one set by
    :func:`set_caption`) is wrapped to the figure's width, drawn under the axes and stored as the PNG's
    ``Description``. Closing matters in table builds that draw many figures in one process (pyplot keeps every
    open figure alive)."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    caption = caption or _caption_text(fig)
    metadata = {}
    if caption:
        width_in = fig.get_size_inches()[0]
        lines = textwrap.wrap(caption, width=max(40, int(width_in * 17)))
        fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, ha="left", va="bottom", color="0.25")
        bottom = (0.08 + 0.12 * len(lines)) / fig.get_size_inches()[1]  # 7 pt lines are ~0.12 in tall
        fig.tight_layout(rect=(0, min(0.4, bottom), 1, 1))
        metadata["Description"] = caption
    else:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi, metadata=metadata or None)
    plt.close(fig)
    return path


def legend_labels(fig: Figure) -> set[str]:
    """Every label shown in the figure's legends."""
    out: set[str] = set()
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            out |= {t.get_text() for t in legend.get_texts()}
    for legend in fig.legends:
        out |= {t.get_text() for t in legend.get_texts()}
    return out


def unlabelled_markers(fig: Figure) -> list[str]:
    """Lines that draw markers a reader cannot name (``axes title - marker label``): a marker is named when its
    line's label is in a legend, or when a legend shows a key with the same marker, hollow or filled alike (a proxy
    entry such as "o Monte Carlo" for one series per colour)."""
    shown = legend_labels(fig)
    keys = set()
    for legend in [ax.get_legend() for ax in fig.axes] + list(fig.legends):
        for h in legend.legend_handles if legend is not None else []:
            if hasattr(h, "get_marker"):
                keys.add((h.get_marker(), _hollow(h)))
    missing = []
    for ax in fig.axes:
        # an errorbar's data line and caps are named by their container's label
        owner = {id(a): c.get_label() for c in ax.containers for a in _artists(c)}
        # a bar chart's error bars (caps drawn as markers) belong to the bars
        owner |= {
            id(a): c.get_label() for c in ax.containers if getattr(c, "errorbar", None) for a in _artists(c.errorbar)
        }
        for line in ax.get_lines():
            label = owner.get(id(line), line.get_label())
            has_marker = line.get_marker() not in (None, "None", "none", "", " ")
            if has_marker and label not in shown and (line.get_marker(), _hollow(line)) not in keys:
                missing.append(f"{ax.get_title() or 'axes'} - {line.get_marker()} {label!r}")
    return missing


def _hollow(line: Any) -> bool:
    face = line.get_markerfacecolor()
    return isinstance(face, str) and face.lower() == "none"


def _artists(container: Any) -> list[Any]:
    """The artists of a (possibly nested) matplotlib container."""
    out = []
    for a in container:
        if isinstance(a, (tuple, list)):
            out += _artists(a)
        elif a is not None:
            out.append(a)
    return out
