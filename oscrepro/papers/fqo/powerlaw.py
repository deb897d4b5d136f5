"""Power-law fit of the oscillator-vs-softmax perplexity gap (fqo paper, Sec. 4.2, Figure 6).

The paper fits Delta(d_osc) ~= C * d_osc^(-alpha) over d_osc in {2, 4, 8, 16, 32}
(WikiText-2: C ~= 14.97, alpha ~= 0.47; TinyStories: C ~= 3.54, alpha ~= 0.53) and reports
max |log-residual| <= 0.048. :func:`fit_power_law` is ordinary least squares of
log Delta = log C - alpha log x (natural log). On the paper's Table 4 gaps it gives
WikiText-2 C = 14.97, alpha = 0.465, max |log-res| = 0.031 and TinyStories C = 3.54,
alpha = 0.524, max |log-res| = 0.042 (paper: 0.47 / 0.53, <= 0.048), so this is the paper's fit.

Non-positive gaps have no logarithm: they are excluded from the fit AND listed in the result's
``excluded`` field (index, x, y), never dropped silently: a direct call also warns (``RuntimeWarning``);
:func:`plot_figure6`, whose fits go into the table's notes with their exclusions, does not print them to the
console a second time (at ``budget=cpu`` every TinyStories gap is negative: the oscillator is ahead of softmax, a
result, not a numerical problem). A fit needs at least two distinct positive points (else ``ValueError`` naming the
excluded points); x must be strictly positive.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from oscrepro.analysis.figures import save_figure


def power_law(x: np.ndarray | Sequence[float] | float, c: float, alpha: float) -> np.ndarray:
    """C * x^(-alpha), element-wise."""
    return c * np.asarray(x, dtype=np.float64) ** (-alpha)


def fit_power_law(
    x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, warn: bool = True
) -> dict[str, Any]:
    """Least-squares fit of y ~= C x^(-alpha) in log-log space.

    Returns ``{"C", "alpha", "max_abs_log_residual", "log_residuals" (per used point), "n_used",
    "used_index", "excluded": [{"index", "x", "y"}]}``. ``warn=False``: the caller reports ``excluded`` itself.
    """
    xa = np.asarray(x, dtype=np.float64).ravel()
    ya = np.asarray(y, dtype=np.float64).ravel()
    if xa.shape != ya.shape:
        raise ValueError(f"x and y differ in length: {xa.size} vs {ya.size}")
    if not np.all(np.isfinite(xa)) or np.any(xa <= 0):
        raise ValueError("x must be finite and strictly positive for a log-log fit")
    good = np.isfinite(ya) & (ya > 0)
    excluded = [{"index": int(i), "x": float(xa[i]), "y": float(ya[i])} for i in np.flatnonzero(~good)]
    if excluded and warn:
        warnings.warn(
            f"fit_power_law: {len(excluded)} non-positive/non-finite y excluded from the fit: {excluded}",
            RuntimeWarning,
            stacklevel=2,
        )
    lx, ly = np.log(xa[good]), np.log(ya[good])
    if lx.size < 2 or np.ptp(lx) == 0:
        dropped = f"; excluded as non-positive or non-finite: {_listed(excluded)}" if excluded else ""
        raise ValueError(f"need >= 2 distinct positive points to fit a power law, got {lx.size}{dropped}")
    design = np.stack([np.ones_like(lx), lx], axis=1)  # (n, 2): [1, log x]
    (log_c, slope), *_ = np.linalg.lstsq(design, ly, rcond=None)
    resid = ly - (log_c + slope * lx)
    return {
        "C": float(np.exp(log_c)),
        "alpha": float(-slope),
        "max_abs_log_residual": float(np.abs(resid).max()),
        "log_residuals": resid.tolist(),
        "n_used": int(lx.size),
        "used_index": np.flatnonzero(good).tolist(),
        "excluded": excluded,
    }


def _listed(excluded: list[dict[str, Any]]) -> str:
    """``x=2: -0.31, x=4: -0.52`` for the excluded points of a fit."""
    return ", ".join(f"x={e['x']:g}: {e['y']:.3g}" for e in excluded)


def plot_figure6(panels: Sequence[dict[str, Any]], path: str | Path) -> list[dict[str, Any]]:
    """Figure 6: one panel per dataset, oscillator PPL vs d_osc with the softmax level and the fit.

    Each panel dict: ``name``, ``d_osc`` (list), ``osc_mean`` (list), optional ``osc_std`` (list),
    ``softmax_mean`` (float), optional ``softmax_std`` (float). The gap Delta = osc - softmax is fitted
    with :func:`fit_power_law`; the dashed curve is softmax_mean + C d^(-alpha). Returns the fits; a panel with
    fewer than two positive gaps (no power law to fit) is still plotted, and its entry is ``{"name", "error"}``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.6), squeeze=False)
    fits = []
    for ax, p in zip(axes[0], panels, strict=True):
        d = np.asarray(p["d_osc"], dtype=np.float64)
        osc = np.asarray(p["osc_mean"], dtype=np.float64)
        sm = float(p["softmax_mean"])
        try:
            fit = fit_power_law(d, osc - sm, warn=False)  # exclusions go into the fits (the table's notes)
        except ValueError as err:
            fit = None
            fits.append({"name": p["name"], "error": str(err)})
        else:
            fits.append({"name": p["name"], **fit})
        ax.errorbar(d, osc, yerr=p.get("osc_std"), fmt="o", capsize=3, label="oscillator")
        ax.axhline(sm, ls="--", color="k", lw=1, label="softmax")
        if p.get("softmax_std") is not None:
            ax.axhspan(sm - p["softmax_std"], sm + p["softmax_std"], color="k", alpha=0.08)
        if fit is not None:
            grid = np.geomspace(d.min(), d.max(), 100)
            ax.plot(
                grid,
                sm + power_law(grid, fit["C"], fit["alpha"]),
                "--",
                color="C1",
                label=rf"$\Delta \approx {fit['C']:.2f}\,d^{{-{fit['alpha']:.2f}}}$",
            )
        ax.set(xscale="log", xlabel=r"$d_{osc}$", ylabel="validation PPL", title=p["name"])
        ax.set_xticks(d, [f"{v:g}" for v in d])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=8)
    save_figure(fig, path)
    return fits
