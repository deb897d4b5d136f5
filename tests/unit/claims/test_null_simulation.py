"""Null simulations, one per test kind: tables simulated with the effect exactly on the claim's boundary (unequal
variances, n = 3 seeds), judged by the verdict functions themselves; the rate of false "holds" (and of false
"contradicted") must be at or below the nominal one-sided level α/2 = 2.5 % of a two-sided 95 % interval, up to a
binomial tolerance. A power check shows that a real effect decides.

The trend cases include lack of fit (true slope 0, the points scattered more than their SDs say) and SDs from 3 seeds
used as weights; the rule before the lack-of-fit change (inverse-variance WLS, SDs taken as known variances) and the
literal Birge-scaled WLS both exceed the nominal rate there, which :func:`test_trend_legacy_rules_exceed_nominal`
shows on the same simulated tables.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from oscrepro.claims.verdict import CellStats, difference, ordering, spread_ratio, trend, within

LEVEL = 0.95
NOMINAL = (1 - LEVEL) / 2  # one-sided error of a two-sided 95 % interval
SIMS = 4000
N_SEEDS = 3


def upper(p: float = NOMINAL, sims: int = SIMS) -> float:
    """The rate a correct test exceeds with probability 1e-3 only (binomial upper quantile)."""
    return float(stats.binom.ppf(1 - 1e-3, sims, p)) / sims


def cells_from(seeds: np.ndarray) -> list[list[CellStats]]:
    """(sims, k, n) seed values → per simulated table, k cells of (mean, std, n)."""
    means, sds = seeds.mean(axis=2), seeds.std(axis=2, ddof=1)
    n = seeds.shape[2]
    return [[CellStats(float(m), float(s), n) for m, s in zip(mr, sr, strict=True)] for mr, sr in zip(means, sds,
                                                                                                       strict=True)]


def draw(rng: np.random.Generator, means: np.ndarray, sds: np.ndarray, n: int = N_SEEDS,
         sims: int = SIMS) -> np.ndarray:
    """Seeds for ``sims`` tables: cell j ~ N(means[j], sds[j]²), n seeds each; means may be (sims, k)."""
    means = np.broadcast_to(means, (sims, len(sds)))
    return means[:, :, None] + np.asarray(sds)[None, :, None] * rng.standard_normal((sims, len(sds), n))


def rates(verdicts: list) -> tuple[float, float]:
    statuses = [v.status for v in verdicts]
    return statuses.count("holds") / len(statuses), statuses.count("contradicted") / len(statuses)


# ----------------------------------------------------------------------------------------------------- difference


@pytest.mark.parametrize("sign", ["<", ">"])
def test_difference_null_and_power(sign):
    rng = np.random.default_rng(101)
    margin, sds = 0.5, np.array([1.0, 3.0])
    null = cells_from(draw(rng, np.array([margin, 0.0]), sds))  # mean(a) − mean(b) = margin exactly
    holds, contra = rates([difference(a, b, sign, LEVEL, margin) for a, b in null])
    assert holds <= upper() and contra <= upper(), (holds, contra)
    effect = margin + (12.0 if sign == ">" else -12.0)
    real = cells_from(draw(rng, np.array([effect, 0.0]), sds))
    assert rates([difference(a, b, sign, LEVEL, margin) for a, b in real])[0] >= 0.8


# ------------------------------------------------------------------------------------------------------- ordering


def test_ordering_null_and_power():
    rng = np.random.default_rng(102)
    sds = np.array([1.0, 2.0, 0.5, 3.0])
    # all four equal: any "contradicted" is false; without the Bonferroni level it would be ~3x the nominal rate
    tie = cells_from(draw(rng, np.zeros(4), sds))
    holds, contra = rates([ordering(c, "increasing", LEVEL) for c in tie])
    assert holds <= upper() and contra <= upper(), (holds, contra)
    # one tied link, the others far apart: the least favourable case for a false "holds"
    one_tie = cells_from(draw(rng, np.array([0.0, 0.0, 50.0, 100.0]), sds))
    assert rates([ordering(c, "increasing", LEVEL) for c in one_tie])[0] <= upper()
    real = cells_from(draw(rng, np.array([0.0, 20.0, 40.0, 60.0]), sds))
    assert rates([ordering(c, "increasing", LEVEL) for c in real])[0] >= 0.8


# ---------------------------------------------------------------------------------------------------------- trend

X7 = np.array([1.0, 2.0, 4.0, 6.0, 8.0, 12.0, 16.0])  # osciformer Table 7's J
X5 = np.arange(1.0, 6.0)
TREND_NULLS = {
    # name: (x, per-cell seed SDs, scatter of the true cell means about a flat line)
    "heteroscedastic": (X7, np.geomspace(0.3, 3.0, 7), 0.0),
    "one noisy end": (X5, np.array([0.5, 0.5, 0.5, 0.5, 5.0]), 0.0),
    "lack of fit": (X7, np.geomspace(0.5, 2.0, 7), 3.0),
    "both": (X7, np.where(np.arange(7) == 6, 5.0, 0.5), 0.5),
}


def trend_null_tables(name: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeds (sims, k, n) for one null configuration: true slope 0, cell means offset by N(0, scatter²)."""
    x, sds, scatter = TREND_NULLS[name]
    rng = np.random.default_rng(seed)
    return x, draw(rng, scatter * rng.standard_normal((SIMS, len(x))), sds)


@pytest.mark.parametrize("name", sorted(TREND_NULLS))
def test_trend_null(name):
    x, seeds = trend_null_tables(name, 103)
    holds, contra = rates([trend(list(x), c, "increasing", LEVEL) for c in cells_from(seeds)])
    assert holds <= upper() and contra <= upper(), (name, holds, contra)


def test_trend_power():
    rng = np.random.default_rng(104)
    x, sds = X7, np.geomspace(0.5, 2.0, 7)
    tables = cells_from(draw(rng, 0.5 * x, sds))
    assert rates([trend(list(x), c, "increasing", LEVEL) for c in tables])[0] >= 0.8


def legacy_wls(seeds: np.ndarray, x: np.ndarray, birge: bool) -> np.ndarray:
    """Lower 95 % bound of the inverse-variance WLS slope (weights n/std²): the rule before the lack-of-fit change
    (variances known), or with its variance scaled by max(1, χ²/(k − 2)) (the literal Birge recipe)."""
    k, n = len(x), seeds.shape[2]
    m, w = seeds.mean(axis=2), n / seeds.var(axis=2, ddof=1)
    xb = (w * x).sum(1) / w.sum(1)
    yb = (w * m).sum(1) / w.sum(1)
    sxx = (w * (x - xb[:, None]) ** 2).sum(1)
    slope = (w * (x - xb[:, None]) * (m - yb[:, None])).sum(1) / sxx
    chi2_dof = (w * (m - yb[:, None] - slope[:, None] * (x - xb[:, None])) ** 2).sum(1) / (k - 2)
    scale = np.maximum(1.0, chi2_dof) if birge else 1.0
    return slope - stats.t.ppf(0.5 + LEVEL / 2, k - 2) * np.sqrt(scale / sxx)


@pytest.mark.parametrize(("name", "birge"), [("lack of fit", False), ("heteroscedastic", True)])
def test_trend_legacy_rules_exceed_nominal(name, birge):
    """The simulation can fail: on the same tables, WLS with the SDs as known variances (lack of fit) and even the
    Birge-scaled WLS (3-seed SDs as weights) give false "holds" well above the nominal rate."""
    x, seeds = trend_null_tables(name, 103)
    assert (legacy_wls(seeds, x, birge) > 0).mean() > 1.5 * upper()


# --------------------------------------------------------------------------------------------------------- within


def test_within_null_and_power():
    rng = np.random.default_rng(105)
    target, tol, sd = 10.0, 3.0, 1.0
    for edge in (target - tol, target + tol):  # the true value on either edge of the closed band
        tables = cells_from(draw(rng, np.array([edge]), np.array([sd])))
        holds, contra = rates([within(c[0], target, tol, LEVEL) for c in tables])
        assert holds <= upper() and contra <= upper(), (edge, holds, contra)
    inside = cells_from(draw(rng, np.array([target]), np.array([sd]), n=5))
    assert rates([within(c[0], target, tol, LEVEL) for c in inside])[0] >= 0.8
    outside = cells_from(draw(rng, np.array([target + 4 * tol]), np.array([sd])))
    assert rates([within(c[0], target, tol, LEVEL) for c in outside])[1] >= 0.8


# --------------------------------------------------------------------------------------------------- spread_ratio


def test_spread_ratio_null_and_power():
    rng = np.random.default_rng(106)
    seeds_a = draw(rng, np.zeros(1), np.array([2.0]), n=3)
    seeds_b = draw(rng, np.zeros(1), np.array([2.0]), n=4)  # equal variances: ratio exactly 1
    pairs = zip(cells_from(seeds_a), cells_from(seeds_b), strict=True)
    holds, contra = rates([spread_ratio(a[0], b[0], "<", LEVEL) for a, b in pairs])
    assert holds <= upper() and contra <= upper(), (holds, contra)
    small = cells_from(draw(rng, np.zeros(1), np.array([0.1]), n=3))
    large = cells_from(draw(rng, np.zeros(1), np.array([2.0]), n=4))
    assert rates([spread_ratio(a[0], b[0], "<", LEVEL) for a, b in zip(small, large, strict=True)])[0] >= 0.8
