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


def plot_figure6(panels: Sequence[dict[str, Any]], path: str | Path, caption: str | None = None
                 ) -> list[dict[str, Any]]:
    """Figure 6, one column per dataset: top, our validation PPL vs d_osc with the softmax level and our fit (the
    paper's panel); bottom, the gap Delta = oscillator - softmax vs d_osc, ours beside the paper's Table 4 gaps and
    its fit, on the same axes (absolute perplexities at a scaled-down budget are not comparable, gaps are closer).

    Each panel dict: ``name``, ``d_osc`` (list), ``osc_mean`` (list), optional ``osc_std`` (list),
    ``softmax_mean`` (float), optional ``softmax_std`` (float), ``paper_delta`` (list, the paper's gaps) and
    ``paper_fit`` ([C, alpha]). The gap is fitted with :func:`fit_power_law`; the dashed curves are
    softmax_mean + C d^(-alpha) and C d^(-alpha). Returns the fits; a panel with fewer than two positive gaps (no
    power law to fit) is still plotted, and its entry is ``{"name", "error"}``.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    from oscrepro.analysis.figures import PAPER, PAPER_LINE, paper_label, power_law_label

    fig = Figure(figsize=(4.6 * len(panels), 6.6))
    axes = fig.subplots(2, len(panels), squeeze=False)
    fits = []
    for j, p in enumerate(panels):
        top, bottom = axes[0][j], axes[1][j]
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
        grid = np.geomspace(d.min(), d.max(), 100)
        top.errorbar(d, osc, yerr=p.get("osc_std"), fmt="o", capsize=3, label="oscillator (ours)")
        top.axhline(sm, ls="--", color="k", lw=1, label="softmax (ours)")
        if p.get("softmax_std") is not None:
            top.axhspan(sm - p["softmax_std"], sm + p["softmax_std"], color="k", alpha=0.08)
        # the gap's error bar: oscillator and softmax seeds are independent runs, so their variances add
        osc_std = np.zeros_like(osc) if p.get("osc_std") is None else np.asarray(p["osc_std"], dtype=np.float64)
        gap_std = np.hypot(np.nan_to_num(osc_std), float(p.get("softmax_std") or 0.0))
        bottom.errorbar(d, osc - sm, yerr=gap_std, fmt="o", capsize=3, label="Δ (ours)")
        bottom.axhline(0.0, color="0.6", lw=0.8)
        if fit is not None:
            label = f"fit (ours): Δ ≈ {power_law_label(fit['C'], fit['alpha'])}"
            top.plot(grid, sm + power_law(grid, fit["C"], fit["alpha"]), "--", color="C1", label=label)
            bottom.plot(grid, power_law(grid, fit["C"], fit["alpha"]), "--", color="C1", label=label)
        if p.get("paper_delta") is not None:
            bottom.plot(d, p["paper_delta"], **PAPER, label=paper_label("Δ, Table 4"))
        if p.get("paper_fit") is not None:
            c, alpha = p["paper_fit"]
            bottom.plot(grid, power_law(grid, c, alpha), **PAPER_LINE,
                        label=paper_label(f"fit Δ ≈ {power_law_label(c, alpha)}"))
        top.set(ylabel="validation PPL (ours)", title=p["name"])
        bottom.set(xlabel=r"$d_{osc}$", ylabel="Δ PPL = oscillator − softmax", title=f"{p['name']}: gap, ours vs paper")
        for ax in (top, bottom):
            ax.set_xscale("log")
            ax.set_xticks(d, [f"{v:g}" for v in d])
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    save_figure(fig, path, caption=caption)
    return fits
