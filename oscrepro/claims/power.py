"""Predictive power of a claim's next look: how likely N seeds per cell decide it, given the seeds it has.

The decide planner (:mod:`oscrepro.claims.decide`) ranks inconclusive claims by core-seconds per expected decision;
this module gives the "expected decision" for each check kind the scoreboard judges from seeds
(:mod:`oscrepro.claims.verdict`):

* ``difference`` / ``equivalent`` / ``within``: closed form (:func:`predictive_power`), the Bayesian predictive power
  of Spiegelhalter, Freedman & Blackburn 1986 (Controlled Clinical Trials 7, 8) with a flat prior on the effect.
* ``trend``: the OLS slope is a fixed contrast Σ c_i·mean_i of the cell means, so its predictive law is the same
  closed form with the contrast's one-seed spread √(Σ c_i² s_i²). The verdict's interval is the wider of the seed-SD
  and the lack-of-fit readings (:func:`oscrepro.claims.verdict.trend`); more seeds narrow only the first, so the
  current lack-of-fit half-width is kept as a floor (:func:`trend_power`).
* ``spread_ratio``: the F interval of var(a)/var(b) (:func:`oscrepro.claims.verdict.spread_ratio`), read on the log
  scale, where a sample variance on n − 1 df has variance ≈ 2/(n − 1) (:func:`spread_power`): the same predictive
  form with the log ratio as the effect. Seeds decide it only when the ratio is far from 1: at 10 seeds per cell the
  F interval at level 0.99 spans a factor of ~6.5 either way.
* ``ordering``: every adjacent pair is a Welch difference at the Bonferroni level; the chain holds when every pair
  holds and is contradicted when any pair is. Adjacent pairs share a cell, so the chain's power is simulated at the
  cell level (:func:`ordering_power`: seeded Monte Carlo of the cells' predictive means), not multiplied out.

A claim with one seed per cell has no spread, so no power can be computed: the planner trains it to its design's
first look as a *pilot* (the cost of the first interval), ranked at :data:`PILOT_POWER`, stated in the plan.

All of these take the observed SDs as known (their own uncertainty is second order next to the effect's at these n)
and judge the final interval with a t quantile at N − 1 df: rankings, not guarantees. The guarantee is the
group-sequential design's (:mod:`oscrepro.claims.sequential`), whatever the ranking.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from oscrepro.claims.verdict import CellStats

#: Decision probability a pilot (n = 1: no spread yet) is ranked at: a coin flip, stated in the plan as "pilot".
PILOT_POWER = 0.5
_DRAWS = 20_000


def _t(level: float, df: float) -> float:
    return float(stats.t.ppf(0.5 + level / 2, df))


def predictive_sides(effect: float, spread: float, n_now: int, n_final: int, half: float,
                     lo: float) -> tuple[float, float]:
    """(P(final interval wholly above ``lo``), P(wholly below)) when the final estimate at ``n_final`` seeds is
    N(effect, spread²·(N − n)/(N·n)) (flat prior; the seeds so far are part of it) and its interval is ± ``half``."""
    sd = spread * math.sqrt((n_final - n_now) / (n_final * n_now))
    return float(stats.norm.sf((lo + half - effect) / sd)), float(stats.norm.cdf((lo - half - effect) / sd))


def predictive_power(effect: float, spread: float, n_now: int, n_final: int, level: float, lo: float,
                     hi: float | None = None) -> float:
    """Probability that the interval at ``n_final`` seeds decides, given the estimate ``effect`` at ``n_now``.

    ``spread``: the effect's standard deviation for one seed per cell (√(s_a² + s_b²) for a difference, s for one
    cell), so its standard error at n seeds is spread/√n. The interval half-width at N is t(level, N − 1)·spread/√N.
    ``difference``: decided when the final interval excludes ``lo`` (the margin). ``within`` (``hi`` given, band
    [lo, hi]): decided when it lies inside the band or wholly outside it.
    """
    if n_final <= n_now or not (math.isfinite(effect) and math.isfinite(spread) and spread > 0):
        return 0.0
    half = _t(level, n_final - 1) * spread / math.sqrt(n_final)
    sd = spread * math.sqrt((n_final - n_now) / (n_final * n_now))
    above = lambda v: float(stats.norm.sf((v - effect) / sd))  # noqa: E731  P(final estimate > v)
    if hi is None:
        return above(lo + half) + (1.0 - above(lo - half))
    inside = max(0.0, above(lo + half) - above(hi - half)) if hi - lo > 2 * half else 0.0
    return inside + above(hi + half) + (1.0 - above(lo - half))


def trend_power(x: list[float], cells: list[CellStats], n_final: int, level: float) -> float:
    """Predictive power of a trend claim at ``n_final`` seeds per cell (module docstring): the slope's closed form
    with the current lack-of-fit half-width as a floor under the seed-SD one."""
    k, n_now = len(x), min(c.n for c in cells)
    if k < 3 or n_final <= n_now or any(not (math.isfinite(c.mean) and math.isfinite(c.std)) for c in cells):
        return 0.0
    xbar = sum(x) / k
    sxx = sum((xi - xbar) ** 2 for xi in x)
    coef = [(xi - xbar) / sxx for xi in x]
    slope = sum(ci * c.mean for ci, c in zip(coef, cells, strict=True))
    ybar = sum(c.mean for c in cells) / k
    rss = sum((c.mean - ybar - slope * (xi - xbar)) ** 2 for c, xi in zip(cells, x, strict=True))
    spread = math.sqrt(sum(ci * ci * c.std**2 for ci, c in zip(coef, cells, strict=True)))
    if spread <= 0:
        return 0.0
    half = max(_t(level, n_final - 1) * spread / math.sqrt(n_final), _t(level, k - 2) * math.sqrt(rss / (k - 2) / sxx))
    up, down = predictive_sides(slope, spread, n_now, n_final, half, 0.0)
    return up + down


def ordering_power(cells: list[CellStats], direction: str, n_final: int, level: float, seed: int = 0) -> float:
    """Predictive power of an ordering claim at ``n_final`` seeds per cell (module docstring): seeded Monte Carlo of
    each cell's predictive final mean, each adjacent pair judged as :func:`oscrepro.claims.verdict.ordering` does
    (Bonferroni level, known-spread half-width at N − 1 df); decided = every pair holds, or any pair is reversed."""
    n_now = min(c.n for c in cells)
    if len(cells) < 2 or n_final <= n_now or any(not (math.isfinite(c.mean) and math.isfinite(c.std))
                                                 for c in cells):
        return 0.0
    rng = np.random.default_rng(seed)
    draws = np.stack([rng.normal(c.mean, c.std * math.sqrt((n_final - c.n) / (n_final * c.n)) if c.n < n_final
                                 else 0.0, _DRAWS) for c in cells])  # (cells, draws)
    sign = 1.0 if direction == "increasing" else -1.0
    q = _t(1.0 - (1.0 - level) / (len(cells) - 1), n_final - 1)
    holds, reversed_ = np.ones(_DRAWS, bool), np.zeros(_DRAWS, bool)
    for i in range(len(cells) - 1):
        gap = sign * (draws[i + 1] - draws[i])  # > 0 agrees with the claim
        half = q * math.sqrt((cells[i].std ** 2 + cells[i + 1].std ** 2) / n_final)
        holds &= gap > half
        reversed_ |= gap < -half
    return float(np.mean(holds | reversed_))


def _log_var_var(n: int) -> float:
    """Variance of log s² of n normal draws (≈ 2/(n − 1), the delta method on s² ~ σ²·χ²_{n−1}/(n − 1))."""
    return 2.0 / (n - 1)


def spread_power(a: CellStats, b: CellStats, n_final: int, level: float) -> float:
    """Predictive power of a ``spread_ratio`` claim at ``n_final`` seeds per cell (module docstring): the final log
    ratio log(s_a²/s_b²) is N(current log ratio, v_now − v_final) with v(n_a, n_b) = 2/(n_a − 1) + 2/(n_b − 1)
    (flat prior; the seeds so far are part of it), and the claim is decided when its F interval at ``level`` on
    (N − 1, N − 1) df excludes 1, on either side."""
    if (min(a.n, b.n) < 3 or n_final <= max(a.n, b.n) or not all(math.isfinite(v) and v > 0 for v in (a.std, b.std))):
        return 0.0
    effect = math.log(a.std**2 / b.std**2)
    sd = math.sqrt(max(_log_var_var(a.n) + _log_var_var(b.n) - 2 * _log_var_var(n_final), 0.0))
    alpha, df = 1.0 - level, n_final - 1
    above = math.log(float(stats.f.ppf(1 - alpha / 2, df, df)))  # the interval's lower end is above 1 beyond this
    below = math.log(float(stats.f.ppf(alpha / 2, df, df)))  # ... its upper end below 1 beneath this
    if sd == 0.0:
        return float(effect > above or effect < below)
    return float(stats.norm.sf((above - effect) / sd) + stats.norm.cdf((below - effect) / sd))
