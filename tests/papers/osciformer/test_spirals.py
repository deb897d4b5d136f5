"""osciformer Figure 2c/2d (oscrepro.papers.osciformer.spirals): RMSE in spiral units, and the figure file."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oscrepro.papers.osciformer.spirals import plot_spirals, spiral_rmse, to_spiral_units


def test_rmse_in_spiral_units_matches_hand_computation():
    """Two points of one spiral, coordinates ranges 10 (x) and 4 (y): errors (0.1, 0.25) and (0, -0.5) normalised
    are (1, 1) and (0, -2) spiral units, so RMSE = sqrt((1 + 1 + 0 + 4) / 2) = sqrt(3)."""
    lo, span = np.array([-5.0, 2.0]), np.array([10.0, 4.0])
    y = np.array([[[0.2, 0.5], [0.6, 0.75]]])  # (N=1, K=2, 2)
    pred = y + np.array([[[0.1, 0.25], [0.0, -0.5]]])
    assert spiral_rmse(pred, y, lo, span) == pytest.approx(math.sqrt(3.0))
    assert to_spiral_units(y, lo, span)[0, 0] == pytest.approx([-3.0, 4.0])  # 0.2 * 10 - 5, 0.5 * 4 + 2


def test_rmse_skips_padded_targets():
    lo, span = np.zeros(2), np.ones(2)
    y = np.zeros((1, 3, 2))
    pred = np.array([[[3.0, 4.0], [0.0, 0.0], [1e6, 1e6]]])  # the last target is padding
    assert spiral_rmse(pred, y, lo, span, np.array([[True, True, False]])) == pytest.approx(math.sqrt(25 / 2))


def test_figure_is_written(tmp_path):
    rng = np.random.default_rng(0)

    def part(k: int) -> dict[str, np.ndarray]:
        return {"pred": rng.random((2, k, 2)), "y": rng.random((2, k, 2)), "x": rng.random((2, 4, 2))}

    shown = {(m, t): part(5) for m in ("OsciFormer", "ContiFormer") for t in ("interpolation", "extrapolation")}
    png = plot_spirals(shown, ["OsciFormer", "ContiFormer"], (np.zeros(2), np.ones(2)), tmp_path / "f.png", "test")
    assert png.exists() and png.stat().st_size > 1000
