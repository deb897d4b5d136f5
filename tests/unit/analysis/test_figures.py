"""Paper figures (issue 36 item 4): redrawn from the committed csvs, each draws the paper's values beside ours,
names every marker in a legend, and carries its budget in a caption stored in the PNG."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

from oscrepro.analysis.figures import power_law_label, unlabelled_markers
from oscrepro.leaderboard.board import board_tasks, mechanisms
from oscrepro.leaderboard.figure import plot_board, text_colour
from oscrepro.tables.redraw import redraw, redrawable

RESULTS = Path(__file__).resolve().parents[3] / "results"


@pytest.fixture
def drawn(monkeypatch):
    """Every Figure saved during the test, kept for inspection (save_figure closes them)."""
    figures: list[Figure] = []
    original = Figure.savefig

    def keep(self, *args, **kwargs):
        figures.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def _copy_table(key: str, budget: str, tmp_path: Path) -> Path:
    """A results dir holding only the committed files of ``key``'s folder at ``budget`` (csvs the redraw reads)."""
    paper = key.split("/")[0]
    src = RESULTS / paper / budget if budget != "paper" else RESULTS / paper
    dst = tmp_path / "results" / (f"{paper}/{budget}" if budget != "paper" else paper)
    dst.mkdir(parents=True)
    for f in src.glob("*.csv"):
        shutil.copy(f, dst / f.name)
    return tmp_path / "results"


REDRAWN = [
    ("fqo/table4", "cpu"),
    ("fqo/table6", "cpu"),
    ("fqo/fig2", "cpu"),
    ("fqo/fig2", "paper"),
    ("coupledqk/fig3", "cpu"),
    ("fsn/table4", "cpu"),
    ("fsn/table5", "cpu"),
    ("osciformer/fig2_time", "cpu"),
]


@pytest.mark.parametrize(("key", "budget"), REDRAWN, ids=[f"{k}@{b}" for k, b in REDRAWN])
def test_redrawn_figure_has_paper_values_legend_and_budget(key, budget, tmp_path, drawn):
    results = _copy_table(key, budget, tmp_path)
    png = redraw(key, budget, results)
    (fig,) = drawn
    assert unlabelled_markers(fig) == []
    labels = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any("paper" in label for label in labels), labels  # the paper's values (or closed form) are drawn
    caption = Image.open(png).text["Description"]
    assert f"Budget: {budget}" in caption
    assert ("BELOW PAPER BUDGET" in caption) == (budget != "paper" and key != "fqo/fig2")


def test_every_spec_with_a_figure_block_is_tested():
    """A new figure.redraw must be added to REDRAWN (and so pass the checks above)."""
    assert set(redrawable("cpu", RESULTS)) | set(redrawable("paper", RESULTS)) == {k for k, _ in REDRAWN}


def test_fig2_time_draws_the_papers_band(tmp_path, drawn):
    redraw("osciformer/fig2_time", "cpu", _copy_table("osciformer/fig2_time", "cpu", tmp_path))
    ratio_ax = drawn[0].axes[2]
    band = [p for p in ratio_ax.patches if "3x to 20x" in str(p.get_label())]
    assert band
    low, high = band[0].get_y(), band[0].get_y() + band[0].get_height()  # axhspan: a rectangle in data y
    assert low == pytest.approx(3.0) and high == pytest.approx(20.0)


def test_power_law_label_writes_the_sign_once():
    assert power_law_label(8.59, 0.09) == r"$8.59\,d^{-0.09}$"
    assert power_law_label(2.0, -0.36) == r"$2.00\,d^{+0.36}$"  # was d_osc^(--0.36)


def test_unlabelled_markers_can_fail():
    fig = Figure()
    ax = fig.add_subplot()
    ax.plot([1, 2], [1, 2], "o", label="ours")
    ax.plot([1], [3], marker="D", mfc="none", ls="none", label="paper: x")
    ax.legend(handles=ax.get_lines()[:1])  # the paper's marker left out of the legend
    assert unlabelled_markers(fig) == ["axes - D 'paper: x'"]


def test_leaderboard_cells_say_why_they_are_empty_and_text_reads(tmp_path, drawn):
    tasks = board_tasks("cpu", RESULTS)
    plot_board(tasks, tmp_path / "board.png", tuple(mechanisms()), "cpu")
    ax = drawn[0].axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert "—" not in texts and any(t.startswith("left out [") for t in texts)
    # dark cells (the worst ranks of viridis_r) carry white text, light ones black
    assert text_colour(ax.images[0].cmap, 1.0) == "white" and text_colour(ax.images[0].cmap, 0.0) == "black"
    ranked = [t for t in ax.texts if t.get_text().startswith("#8")]
    assert ranked and ranked[0].get_color() == "white"
    caption = Image.open(tmp_path / "board.png").text["Description"]
    assert "[1]" in caption and "one head: GQA is softmax" in caption


def test_one_task_board_keeps_its_title(tmp_path, drawn):
    plot_board(board_tasks("cpu", RESULTS, ("sva",)), tmp_path / "one.png", tuple(mechanisms()), "cpu")
    fig = drawn[0]
    title = fig.axes[0].title
    renderer = FigureCanvasAgg(fig).get_renderer()
    box = title.get_window_extent(renderer)
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width, "title clipped at the figure's edge"
