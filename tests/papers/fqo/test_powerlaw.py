"""Power-law fit Delta ~= C d^(-alpha) of the fqo paper's Figure 6."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from oscrepro.papers.fqo.powerlaw import fit_power_law, plot_figure6, power_law

D_OSC = [2, 4, 8, 16, 32]


@pytest.mark.parametrize("c,alpha", [(14.97, 0.47), (3.54, 0.53), (0.2, 1.5), (5.0, -0.3)])
def test_recovers_exact_parameters(c, alpha):
    fit = fit_power_law(D_OSC, power_law(D_OSC, c, alpha))
    assert fit["C"] == pytest.approx(c, rel=1e-10)
    assert fit["alpha"] == pytest.approx(alpha, abs=1e-10)
    assert fit["max_abs_log_residual"] < 1e-10
    assert fit["excluded"] == [] and fit["n_used"] == 5


def test_recovers_parameters_under_noise():
    rng = np.random.default_rng(0)
    x = np.geomspace(2, 64, 40)
    y = power_law(x, 3.0, 0.5) * np.exp(rng.normal(0, 0.03, x.size))  # 3 % multiplicative noise
    fit = fit_power_law(x, y)
    assert fit["C"] == pytest.approx(3.0, rel=0.05)
    assert fit["alpha"] == pytest.approx(0.5, abs=0.02)
    assert 0.03 < fit["max_abs_log_residual"] < 0.15  # residuals reflect the injected noise


def test_reproduces_paper_figure6_fits():
    # Table 4 gaps -> the C, alpha and residual bound quoted in Sec. 4.2
    wt2 = fit_power_law(D_OSC, [11.09, 7.62, 5.65, 4.20, 2.98])
    ts = fit_power_law(D_OSC, [2.39, 1.74, 1.24, 0.81, 0.57])
    assert wt2["C"] == pytest.approx(14.97, abs=0.01) and wt2["alpha"] == pytest.approx(0.47, abs=0.01)
    assert ts["C"] == pytest.approx(3.54, abs=0.01) and ts["alpha"] == pytest.approx(0.53, abs=0.01)
    assert max(wt2["max_abs_log_residual"], ts["max_abs_log_residual"]) <= 0.048


def test_non_positive_values_are_reported_not_dropped_silently():
    y = list(power_law(D_OSC, 2.0, 0.5))
    y[1], y[3] = -0.1, 0.0
    with pytest.warns(RuntimeWarning, match="non-positive"):
        fit = fit_power_law(D_OSC, y)
    assert [e["index"] for e in fit["excluded"]] == [1, 3]
    assert fit["excluded"][0]["y"] == -0.1 and fit["excluded"][1]["x"] == 16.0
    assert fit["n_used"] == 3 and fit["used_index"] == [0, 2, 4]
    assert fit["alpha"] == pytest.approx(0.5, abs=1e-10)  # fit on the remaining exact points


def test_invalid_inputs_raise():
    with pytest.raises(ValueError):
        fit_power_law([0, 1, 2], [1, 2, 3])  # x must be > 0
    with pytest.raises(ValueError):
        fit_power_law([1, 2], [1, 2, 3])  # length mismatch
    with pytest.warns(RuntimeWarning), pytest.raises(ValueError):
        fit_power_law([1, 2, 4], [1.0, -1.0, -2.0])  # a single positive point cannot be fitted


def test_plot_figure6(tmp_path):
    panels = [
        dict(
            name="WikiText-2",
            d_osc=D_OSC,
            osc_mean=[110.67, 107.20, 105.23, 103.78, 102.56],
            osc_std=[0.51, 0.55, 0.32, 0.49, 0.37],
            softmax_mean=99.58,
        )
    ]
    fits = plot_figure6(panels, tmp_path / "fig6.png")
    assert (tmp_path / "fig6.png").read_bytes()[:4] == b"\x89PNG"
    assert fits[0]["name"] == "WikiText-2" and fits[0]["C"] == pytest.approx(14.97, abs=0.01)


def test_plot_figure6_keeps_a_panel_without_a_fit(tmp_path):
    """A panel whose gaps are mostly negative (oscillator ahead) is plotted and reported, not fitted, and does not
    stop the other panel's fit."""
    fitted = dict(name="A", d_osc=D_OSC, osc_mean=[110.67, 107.20, 105.23, 103.78, 102.56], softmax_mean=99.58)
    unfit = dict(name="B", d_osc=D_OSC, osc_mean=[9.0, 8.0, 7.0, 6.0, 10.0], softmax_mean=9.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the exclusions are in the fits (the table's notes), not on the console
        fits = plot_figure6([fitted, unfit], tmp_path / "fig6.png")
    assert (tmp_path / "fig6.png").read_bytes()[:4] == b"\x89PNG"
    assert fits[0]["C"] == pytest.approx(14.97, abs=0.01)
    assert set(fits[1]) == {"name", "error"} and "got 1" in fits[1]["error"]
    # the excluded gaps are named in the error (osc - softmax: -0.5 at 2, -1.5 at 4, -2.5 at 8, -3.5 at 16)
    assert "x=2: -0.5, x=4: -1.5, x=8: -2.5, x=16: -3.5" in fits[1]["error"]
