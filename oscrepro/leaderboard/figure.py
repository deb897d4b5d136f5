"""The leaderboard's rank heatmap (``results/leaderboard.png``), drawn from the tasks read off their tables' csvs.

    python -m oscrepro.leaderboard --figure-only --budget cpu     # redraw from the committed csvs, nothing trained

Every cell says what it holds: a ranked cell its rank and score (text white on dark colours, black on light ones); an
empty cell why it is empty, *left out* with a numbered footnote giving the task spec's reason, or *not run* / *n
missing* for a run not finished yet. The title wraps to the figure's width, so a one-task board keeps it whole.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.colors import Colormap


def text_colour(cmap: Colormap, value: float) -> str:
    """Black or white, whichever reads on the colour ``cmap(value)`` (relative luminance, WCAG weights)."""
    r, g, b, _ = cmap(value)
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


def empty_reason(task: Any, mechanism: str) -> str:
    """Why a board cell has no rank: ``left out`` (the spec says why), ``n missing`` or ``not run``."""
    if mechanism in task.left_out:
        return "left out"
    e = task.entries.get(mechanism)
    if e is not None and e.n_missing:
        return f"{e.n_missing} missing"
    return "not run"


def plot_board(tasks: list[Any], path: Path, mechanisms: tuple[str, ...], budget: str | None = None) -> Path:
    """Rank heatmap: ``mechanisms`` (in that order) x ``tasks`` (:class:`oscrepro.leaderboard.board.Task`, not
    imported here: the board imports this module), colour = rank within the task (1 = best), the score written in
    the cell, each empty cell its reason (footnotes under the axes for the left-out ones)."""
    from matplotlib.figure import Figure

    from oscrepro.analysis.figures import save_figure

    mechs = [m for m in mechanisms if any(m in t.entries or m in t.left_out for t in tasks)]
    grid = np.full((len(mechs), len(tasks)), np.nan)
    width = 1.9 * len(tasks) + 2.8
    fig = Figure(figsize=(width, 0.55 * len(mechs) + 2.2))
    ax = fig.add_subplot()
    vmax = max(len(mechs), 2)
    cmap = matplotlib.colormaps["viridis_r"]
    footnotes: list[str] = []
    for j, t in enumerate(tasks):
        for i, m in enumerate(mechs):
            e = t.entries.get(m)
            if e is not None and e.rank is not None:
                grid[i, j] = e.rank
                colour = text_colour(cmap, (e.rank - 1) / (vmax - 1))
                ax.text(j, i, f"#{e.rank}\n{e.mean:.{t.digits}f}", ha="center", va="center", fontsize=8, color=colour)
                continue
            reason = empty_reason(t, m)
            if reason == "left out":
                footnotes.append(f"[{len(footnotes) + 1}] {t.name} / {m}: {t.left_out[m]}")
                reason = f"left out [{len(footnotes)}]"
            ax.text(j, i, reason, ha="center", va="center", fontsize=7, color="0.35", style="italic")
    im = ax.imshow(grid, cmap=cmap, aspect="auto", vmin=1, vmax=vmax)
    ax.set_xticks(
        range(len(tasks)), [f"{t.name}\n{t.score} {'↑' if t.better == 'higher' else '↓'}" for t in tasks], fontsize=8
    )
    ax.set_yticks(range(len(mechs)), mechs)
    ax.set_xticks(np.arange(len(tasks) + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(len(mechs) + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", lw=1.5)
    ax.tick_params(which="minor", length=0)
    fig.colorbar(im, ax=ax, label="rank within task (1 = best)")
    title = "Every mechanism on every task at matched parameters" + (f" (budget {budget})" if budget else "")
    ax.set_title("\n".join(textwrap.wrap(title, width=max(24, int(width * 9)))), fontsize=10)
    caption = (
        "Grey italic cells have no rank: left out (reason below, from the task's spec), n missing (runs not "
        "finished) or not run. " + " ".join(footnotes)
    )
    return save_figure(fig, path, dpi=130, caption=caption)
