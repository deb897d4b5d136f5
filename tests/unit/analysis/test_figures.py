"""Paper figures (issue 36 item 4): redrawn from the committed csvs, each draws the paper's values beside ours,
names every marker in a legend, and carries its budget in a caption stored in the PNG."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from PIL import Image

from oscrepro.analysis.figures import (
    header_caption,
    legend_labels,
    paper_caption,
    power_law_label,
    unlabelled_markers,
)
from oscrepro.leaderboard.board import board_tasks, mechanisms
from oscrepro.leaderboard.figure import plot_board, text_colour
from oscrepro.tables.redraw import redraw, redrawable
from oscrepro.tables.spec import load_spec

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


# ------------------------------------------------------------------ figures drawn from models (no csv redraw)
def _check(fig: Figure, png: Path, budget: str) -> list[str]:
    """Every marker named, the budget in the stored caption; returns the figure's legend texts."""
    assert unlabelled_markers(fig) == []
    assert f"Budget: {budget}" in Image.open(png).text["Description"]
    return sorted(legend_labels(fig))


def _paper_line(fig: Figure, marker: str) -> Line2D:
    """The one line of the paper's look (hollow, black-edged) with ``marker``."""
    (line,) = [
        ln
        for ax in fig.axes
        for ln in ax.get_lines()
        if ln.get_marker() == marker and str(ln.get_label()).startswith("paper")
    ]
    return line


def test_figure_budget_follows_the_table_header():
    assert "BELOW PAPER BUDGET" in header_caption(load_spec("osciformer/fig3_resonance"), "cpu")
    assert "BELOW PAPER BUDGET" in header_caption(load_spec("osciformer/fig2_spirals"), "cpu")
    unchanged = header_caption(load_spec("osciformer/fig5_forecast"), "cpu")  # E.3's data sizes at cpu
    assert "Budget: cpu, the paper's settings unchanged" in unchanged and "BELOW" not in unchanged
    assert header_caption(load_spec("ssa/fig5"), "paper").endswith("Budget: paper.")


def test_osciformer_fig4_draws_the_papers_init_range_and_phase_law(tmp_path, drawn):
    from oscrepro.papers.osciformer.resonance_figs import figure_paper, plot_fig4, transfer_magnitude

    rng = np.random.default_rng(0)
    omegas, phases = np.linspace(3.0, 28.0, 9), np.linspace(0, 2 * np.pi, 6, endpoint=False)
    omega0 = np.array([10.0, *rng.uniform(0.1, 5.0, 7)])  # the shown key 0 resonates inside the band
    png = plot_fig4(
        omega0,
        omega0 * 0.9,
        np.arange(3),
        np.array([3.14, 28.27]),
        rng.random((41, 32)),
        omegas,
        phases,
        rng.random((9, 6)),
        transfer_magnitude(omegas, omega0[0], 0.2),
        0,
        tmp_path / "f4.png",
        "t, budget=cpu",
        gamma_key=0.2,
        **figure_paper("osciformer/fig3_resonance", "cpu")["fig4"],
    )
    labels = _check(drawn[0], png, "cpu")
    assert any(lab.startswith("paper: φ*(ω) = arg H(ω)") for lab in labels), labels
    init = [ln.get_ydata()[0] for ln in drawn[0].axes[0].get_lines() if ln.get_linestyle() == ":"]
    assert sorted(init) == [0.01, 10.0]  # App. E.2's log-uniform init range
    # arg H of H = 1 / (omega_0^2 - omega^2 + 2 i gamma omega), mod 2 pi: a small lag below omega_0 = 10, pi / 2
    # at resonance, towards pi above it
    phi = next(ln for ln in drawn[0].axes[2].get_lines() if str(ln.get_label()).startswith("paper")).get_ydata()
    assert phi[0] == pytest.approx(2 * np.pi - np.arctan2(2 * 0.2 * 3.0, 100.0 - 9.0))
    assert phi[-1] == pytest.approx(2 * np.pi - np.arctan2(2 * 0.2 * 28.0, 100.0 - 28.0**2))


def test_osciformer_fig6_draws_the_papers_validation_numbers(tmp_path, drawn):
    from oscrepro.papers.osciformer.forecast_figs import plot_fig6

    paper = load_spec("osciformer/fig5_forecast").analysis["paper"]
    example = {"t": np.linspace(0.1, 4.5, 20), "y": np.zeros(20), "amp": np.ones(8) / 8, "y_hat": 0.1, "y_true": 0.2}
    scores = [
        {"val_mse": 0.2, "val_rmse": 0.45, "corr": 0.8, "const_mse": 0.9, "std_target": 0.95, "reduction_pct": 78.0}
    ]
    grid = np.array([2.0, 3.2, 4.4, 5.6, 6.0, 7.2, 8.0, 9.0])
    png = plot_fig6(
        example,
        grid,
        7.0,
        [grid],
        ["seed 0"],
        grid,
        tmp_path / "f6.png",
        "t, budget=cpu",
        scores=scores,
        paper=paper,
        caption="Budget: cpu, the paper's settings unchanged.",
    )
    _check(drawn[0], png, "cpu")
    assert list(_paper_line(drawn[0], "D").get_xdata()) == [0.10, 0.31, 0.94, 0.78, 0.88]  # App. E.3


def test_fsn_fig4_draws_table4_bins_and_the_stated_spikes(tmp_path, drawn):
    from oscrepro.papers.fsn.copy_depth import DepthCurve, plot_depth_curves
    from oscrepro.papers.fsn.tables import depth_curves_paper

    spec = load_spec("fsn/table4")
    d = np.arange(33)
    curve = DepthCurve(d, np.zeros(33), -np.ones(33), np.ones(33), np.ones(33, dtype=np.int64))
    extras = depth_curves_paper("fsn/table4", "cpu", spec.analysis["paper"], ["Base layer", "FSN"])
    png = plot_depth_curves({"Base layer": curve, "FSN": curve}, tmp_path / "f.png", "t", **extras)
    _check(drawn[0], png, "cpu")
    spikes = _paper_line(drawn[0], "D")
    assert list(spikes.get_xdata()) == [17, 19, 22] and list(spikes.get_ydata()) == [1.28, 0.70, 0.36]  # §4.3
    steps = [ln for ln in drawn[0].axes[0].get_lines() if ln.get_linestyle() == ":"]
    assert ([16 - 0.4, 23 + 0.4], [0.4231, 0.4231]) in [(list(ln.get_xdata()), list(ln.get_ydata())) for ln in steps]


def test_fsn_fig2_marks_where_the_paper_states_negative_harmonics(tmp_path, drawn):
    from oscrepro.papers.fsn.kernel_reading import LayerKernel, plot_figure2
    from oscrepro.papers.fsn.tables import figure2_paper

    rng = np.random.default_rng(0)
    kernels = [LayerKernel(i, rng.normal(size=(3, 4)) + 0j, rng.normal(size=(3, 4)) + 0j) for i in range(4)]
    png = plot_figure2(kernels, tmp_path / "f.png", "t", **figure2_paper("cpu"))
    _check(drawn[0], png, "cpu")
    width = 0.8 / 6
    xs = sorted(_paper_line(drawn[0], "v").get_xdata())  # layer l, harmonic n: l - 1 + (n - 1 - 2.5) * width
    assert xs == pytest.approx(sorted(li - 1 + (n - 1 - 2.5) * width for li, n in ((3, 3), (4, 3), (4, 2))))


def test_ssa_figures_draw_the_papers_values(tmp_path, drawn):
    import torch

    from oscrepro.papers.ssa import structure as S
    from oscrepro.papers.ssa.analyses import plot_figure4, plot_figure5

    settings = {"a": S.sync_heads_at_init(16, 2, 16, 0), "b": S.sync_heads_at_init(16, 2, 16, 0, input_std=0.1)}
    png = plot_figure4(settings, ["as specified", "illustration"], 2, 8, 16, 1.0, tmp_path / "f4.png", "paper")
    labels = _check(drawn[0], png, "paper")
    assert any("S_ii = 1" in lab for lab in labels) and any("most token pairs" in lab for lab in labels)
    r = {"pytorch_default": torch.full((4, 2), 0.847)}
    png = plot_figure5(
        r,
        {"pytorch_default": torch.full((2,), 0.8465)},
        {"r": 0.847, "r_std": 0.002},
        2,
        4,
        tmp_path / "f5.png",
        "paper",
    )
    _check(drawn[1], png, "paper")
    (band,) = [p for p in drawn[1].axes[0].patches if str(p.get_label()).startswith("paper")]
    assert (band.get_x(), band.get_x() + band.get_width()) == pytest.approx((0.845, 0.849))  # r ± σ, §IV.3


def test_osciformer_figures_without_paper_values_quote_the_paper_and_name_every_marker(tmp_path, drawn):
    from oscrepro.papers.osciformer.forecast_figs import plot_fig5
    from oscrepro.papers.osciformer.resonance_figs import figure_paper, plot_fig3
    from oscrepro.papers.osciformer.spirals import plot_spirals

    rng = np.random.default_rng(0)
    hist = {"train/loss_step": np.array([[1, 3.0], [2, 2.5]]), "val/acc": np.array([[2, 0.1]])}
    png = plot_fig3(
        hist,
        np.full(32, 1 / 32),
        rng.dirichlet(np.ones(32)),
        tmp_path / "f3.png",
        "t",
        n_classes=41,
        **figure_paper("osciformer/fig3_resonance", "cpu")["fig3"],
    )
    _check(drawn[0], png, "cpu")
    assert "no values given" in Image.open(png).text["Description"]
    png = plot_fig5(
        np.linspace(1, 10, 5),
        np.linspace(0, 6, 4),
        rng.random((5, 4)),
        4.4,
        np.array([2.0, 4.4]),
        0,
        tmp_path / "f5.png",
        "t",
        caption=paper_caption(load_spec("osciformer/fig5_forecast"), "cpu", "fig5"),
    )
    assert "paper: analysis frequencies ω_j (App. E.3)" in _check(drawn[1], png, "cpu")
    shown = {
        (m, t): {"pred": rng.random((1, 4, 2)), "y": rng.random((1, 4, 2)), "x": rng.random((1, 3, 2))}
        for m in ("OsciFormer", "ContiFormer")
        for t in ("interpolation", "extrapolation")
    }
    png = plot_spirals(
        shown,
        ["OsciFormer", "ContiFormer"],
        (np.zeros(2), np.ones(2)),
        tmp_path / "s.png",
        "t",
        caption=paper_caption(load_spec("osciformer/fig2_spirals"), "cpu", "fig2"),
    )
    _check(drawn[2], png, "cpu")
    assert "refer to figures 2c and 2d" in Image.open(png).text["Description"]
