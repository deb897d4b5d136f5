"""Claim verdicts from (mean, std, n) cells: synthetic cells with known verdicts, and the intervals checked against
scipy/numpy (Welch t statistic and p value, F distribution, weighted polyfit)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from oscrepro.claims.verdict import (
    STATUSES,
    CellStats,
    Verdict,
    difference,
    ordering,
    spread_ratio,
    trend,
    within,
)

NAN = float("nan")


def cell(mean: float, std: float = 0.1, n: int = 5) -> CellStats:
    return CellStats(mean, std, n)


def assert_no_ci(v: Verdict) -> None:
    assert v.status == "inconclusive" and all(math.isnan(c) for c in v.ci)


# ----------------------------------------------------------------------------------------------------- difference


def test_difference_holds_and_contradicted():
    a, b = cell(1.0), cell(2.0)
    lt, gt = difference(a, b, "<"), difference(a, b, ">")
    assert (lt.status, gt.status) == ("holds", "contradicted")
    assert lt.effect == pytest.approx(-1.0) and lt.ci[1] < 0 and lt.test == "Welch t"
    assert lt.ci == gt.ci and lt.ci[0] < -1.0 < lt.ci[1]
    assert "−1" in lt.detail and "n 5/5" in lt.detail
    assert difference(b, a, ">").status == "holds"


def test_difference_overlapping_is_inconclusive():
    v = difference(cell(1.0, 0.5), cell(1.05, 0.5), "<")
    assert v.status == "inconclusive" and v.ci[0] < 0 < v.ci[1]


@pytest.mark.parametrize(("a", "b"), [
    (cell(1.0, NAN, 1), cell(2.0)),
    (cell(1.0), cell(2.0, NAN, 1)),
    (cell(1.0, 0.0, 1), cell(2.0, 0.0, 1)),  # zero std but a single seed: still no interval
    (cell(1.0, NAN, 5), cell(2.0)),
])
def test_difference_without_interval_is_inconclusive(a, b):
    v = difference(a, b, "<")
    assert_no_ci(v)
    assert "no interval" in v.detail


def test_difference_zero_spread_is_a_point():
    v = difference(cell(1.0, 0.0, 3), cell(2.0, 0.0, 3), "<")
    assert v.status == "holds" and v.ci == (-1.0, -1.0)
    assert difference(cell(1.0, 0.0, 3), cell(1.0, 0.0, 3), "<").status == "inconclusive"  # point on the margin


def test_difference_margin():
    a, b = cell(1.0), cell(2.0)  # a − b = −1, interval about [−1.15, −0.85]
    assert difference(a, b, "<", margin=-0.5).status == "holds"
    assert difference(a, b, "<", margin=-1.5).status == "contradicted"
    assert difference(a, b, "<", margin=-1.0).status == "inconclusive"


WELCH_CASES = [
    (cell(1.0, 0.3, 3), cell(1.6, 0.2, 3)),
    (cell(1.0, 0.3, 3), cell(1.3, 0.2, 3)),
    (cell(0.5, 0.05, 10), cell(0.53, 0.2, 4)),
    (cell(0.5, 0.05, 10), cell(0.6, 0.2, 4)),
    (cell(2.0, 1.0, 5), cell(0.0, 0.1, 2)),
    (cell(2.0, 1.0, 5), cell(0.9, 0.1, 2)),
    (cell(-1.0, 0.4, 8), cell(-0.6, 0.4, 8)),
    (cell(1.0, 0.3, 3), cell(1.9, 0.2, 3)),
    (cell(1.0, 0.3, 3), cell(2.2, 0.2, 3)),
    (cell(-1.0, 0.4, 8), cell(-0.5, 0.4, 8)),
    (cell(-1.0, 0.4, 8), cell(-0.3, 0.4, 8)),
    (cell(2.0, 1.0, 5), cell(-0.5, 0.1, 2)),
]  # two-sided p from 0.0035 to 0.79, so every tested level has cases on both sides


@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_welch_interval_matches_scipy(level):
    excluded = []
    for a, b in WELCH_CASES:
        v = difference(a, b, "<", level=level)
        t_stat, p = stats.ttest_ind_from_stats(a.mean, a.std, a.n, b.mean, b.std, b.n, equal_var=False)
        va, vb = a.std**2 / a.n, b.std**2 / b.n
        df = (va + vb) ** 2 / (va**2 / (a.n - 1) + vb**2 / (b.n - 1))
        se = v.effect / t_stat  # scipy's statistic fixes the standard error
        half = (v.ci[1] - v.ci[0]) / 2
        assert half == pytest.approx(stats.t.ppf(0.5 + level / 2, df) * se, rel=1e-10)
        assert (v.ci[0] + v.ci[1]) / 2 == pytest.approx(a.mean - b.mean)
        excludes_zero = v.ci[1] < 0 or v.ci[0] > 0
        assert excludes_zero == (p < 1 - level)
        assert v.status == ("holds" if v.ci[1] < 0 else "contradicted" if v.ci[0] > 0 else "inconclusive")
        excluded.append(excludes_zero)
    assert any(excluded) and not all(excluded)  # the cases exercise both sides of the boundary


# ------------------------------------------------------------------------------------------------------- ordering


def test_ordering_all_separated_holds():
    cells = [cell(1.0), cell(2.0), cell(3.0)]
    assert ordering(cells, "increasing").status == "holds"
    assert ordering(cells[::-1], "decreasing").status == "holds"
    assert ordering(cells, "decreasing").status == "contradicted"


def test_ordering_one_reversed_pair_is_contradicted():
    v = ordering([cell(1.0), cell(3.0), cell(2.0)], "increasing")
    assert v.status == "contradicted"
    assert v.effect == pytest.approx(-1.0) and v.ci[1] < 0  # smallest gap is the reversed 1→2 link
    assert "0<1 holds" in v.detail and "1<2 contradicted" in v.detail


def test_ordering_one_overlapping_pair_is_inconclusive():
    v = ordering([cell(1.0), cell(2.0), cell(2.05)], "increasing")
    assert v.status == "inconclusive"
    assert v.effect == pytest.approx(0.05) and v.ci[0] < 0 < v.ci[1]


def test_ordering_uses_bonferroni_level():
    cells = [cell(1.0, 0.3, 3), cell(2.0, 0.3, 3), cell(4.0, 0.3, 3), cell(7.0, 0.3, 3)]
    v = ordering(cells, "increasing", level=0.95)
    ref = difference(cells[1], cells[0], ">", level=1 - 0.05 / 3)
    assert v.effect == pytest.approx(1.0) and v.ci == pytest.approx(ref.ci)
    assert v.ci[1] - v.ci[0] > difference(cells[1], cells[0], ">").ci[1] - difference(cells[1], cells[0], ">").ci[0]


def test_ordering_single_seed_is_inconclusive():
    assert ordering([cell(1.0, NAN, 1), cell(2.0), cell(3.0)], "increasing").status == "inconclusive"
    # ...unless another link is reversed, which settles a strict ordering on its own
    assert ordering([cell(1.0, NAN, 1), cell(3.0), cell(2.0)], "increasing").status == "contradicted"


# ---------------------------------------------------------------------------------------------------------- trend

X = [1.0, 2.0, 4.0, 8.0]


def test_trend_increasing_holds_and_decreasing_contradicted():
    cells = [cell(m) for m in (1.0, 1.5, 2.6, 4.9)]
    up, down = trend(X, cells, "increasing"), trend(X, cells, "decreasing")
    assert (up.status, down.status) == ("holds", "contradicted")
    assert up.ci == down.ci and up.ci[0] > 0 and up.test == "OLS trend"


def test_trend_flat_is_inconclusive():
    cells = [cell(m, 0.5) for m in (1.0, 1.02, 0.98, 1.0)]
    v = trend(X, cells, "increasing")
    assert v.status == "inconclusive" and v.ci[0] < 0 < v.ci[1]


@pytest.mark.parametrize(("x", "cells"), [
    ([1.0, 2.0], [cell(1.0), cell(2.0)]),  # too few points for k − 2 df
    (X, [cell(1.0), cell(2.0, NAN, 1), cell(3.0), cell(4.0)]),
    (X, [cell(1.0), cell(2.0, NAN, 5), cell(3.0), cell(4.0)]),
])
def test_trend_without_interval_is_inconclusive(x, cells):
    assert_no_ci(trend(x, cells, "increasing"))


def test_trend_zero_spread_cells():
    # a cell with std 0 is no longer an infinite weight: the slope is unweighted, the other cells give the SD reading
    v = trend(X, [cell(1.0), cell(2.0, 0.0, 5), cell(4.0), cell(8.0)], "increasing")
    assert v.status == "holds" and v.ci[0] > 0
    # all deterministic and exactly linear: the interval is the point, as in difference()
    exact = trend(X, [cell(2.0 + 0.5 * x, 0.0, 3) for x in X], "increasing")
    assert exact.status == "holds" and exact.ci == pytest.approx((0.5, 0.5))


@pytest.mark.parametrize("means", [
    [2.0 + 0.5 * x for x in X],  # exactly linear: no lack of fit, the seed SDs set the width
    [1.0, 1.7, 2.1, 3.9],  # not linear
    [1.0, 3.0, 1.5, 4.0],  # far from linear (residuals ≫ SDs): lack of fit sets the width
])
def test_trend_slope_and_interval(means):
    sds, ns = (0.1, 0.3, 0.2, 0.5), (3, 5, 4, 10)
    cells = [CellStats(m, s, n) for m, s, n in zip(means, sds, ns, strict=True)]
    v = trend(X, cells, "increasing", level=0.9)
    fit = stats.linregress(X, means)  # unweighted OLS of the cell means; stderr from the residuals, k − 2 df
    assert v.effect == pytest.approx(fit.slope, rel=1e-10)
    half_res = stats.t.ppf(0.95, len(X) - 2) * fit.stderr
    c = (np.array(X) - np.mean(X)) / np.sum((np.array(X) - np.mean(X)) ** 2)
    terms = c**2 * np.array(sds) ** 2 / np.array(ns)
    df = terms.sum() ** 2 / np.sum(terms**2 / (np.array(ns) - 1))
    half_sd = stats.t.ppf(0.95, df) * math.sqrt(terms.sum())
    half = max(half_res, half_sd)
    assert v.ci == pytest.approx((fit.slope - half, fit.slope + half), rel=1e-9, abs=1e-12)
    resid = np.array(means) - (fit.intercept + fit.slope * np.array(X))
    chi2_dof = np.sum(resid**2 / (np.array(sds) ** 2 / np.array(ns))) / (len(X) - 2)
    assert f"χ²/dof {chi2_dof:.3g}".replace("-", "−") in v.detail
    assert ("lack of fit sets the width" in v.detail) == (half_res > half_sd)


# osciformer Table 7 at cpu (results/osciformer/cpu/table7.csv): per-epoch minutes at J = 1 … 16, 3 seeds each.
# Timings under varying load scatter far more than their seed SDs (χ²/dof in the hundreds); the inverse-variance
# WLS with the SDs as known variances called both "contradicted" (slope < 0).
T7_X = [1, 2, 4, 6, 8, 12, 16]
T7 = {
    "xor": [(0.39705, 0.0039803), (0.26271, 0.057711), (0.23183, 0.0085359), (0.29829, 0.072134),
            (0.29361, 0.014060), (0.38090, 0.019016), (0.46914, 0.035509)],
    "jv30": [(0.034339, 0.00087878), (0.016411, 0.0011837), (0.014671, 0.00089967), (0.017518, 0.0018549),
             (0.017223, 0.0022363), (0.022514, 0.00068641), (0.029595, 0.0019447)],
}


@pytest.mark.parametrize("col", sorted(T7))
def test_trend_lack_of_fit_makes_osciformer_table7_inconclusive(col):
    cells = [CellStats(m, s, 3) for m, s in T7[col]]
    v = trend(T7_X, cells, "increasing")
    assert v.status == "inconclusive" and v.ci[0] < 0 < v.ci[1]
    assert "lack of fit sets the width" in v.detail
    chi2_dof = float(v.detail.split("χ²/dof ")[1].split(" ")[0])
    assert chi2_dof > 100  # the scatter the SDs do not explain


# --------------------------------------------------------------------------------------------------------- within


def test_within_exact():
    v = within(cell(0.5, NAN, 1), 0.5 + 1e-9, 1e-6, exact=True)
    assert v.status == "holds" and v.test == "exact vs tolerance"
    assert within(cell(0.6, NAN, 1), 0.5, 1e-6, exact=True).status == "contradicted"
    assert within(cell(0.75, NAN, 1), 0.5, 0.25, exact=True).status == "holds"  # closed band (exact in binary)


def test_within_interval_inside_outside_straddling():
    inside = within(cell(1.0, 0.01), 1.0, 0.1)
    assert inside.status == "holds" and -0.1 <= inside.ci[0] and inside.ci[1] <= 0.1
    outside = within(cell(1.0, 0.01), 2.0, 0.1)
    assert outside.status == "contradicted" and outside.effect == pytest.approx(-1.0)
    straddle = within(cell(1.0, 0.1), 1.02, 0.05)  # mean inside the band, interval ±0.12 is not
    assert straddle.status == "inconclusive" and straddle.ci[0] < -0.05 and 0.05 < straddle.ci[1]
    overlap = within(cell(1.0, 0.1), 1.1, 0.05)  # mean outside the band, interval reaches into it
    assert overlap.status == "inconclusive" and overlap.ci[0] < -0.05 < overlap.ci[1] < 0.05


def test_within_interval_is_the_t_interval_of_the_mean():
    a = cell(3.0, 0.4, 4)
    v = within(a, 2.9, 1.0, level=0.9)
    lo, hi = stats.t.interval(0.9, a.n - 1, loc=a.mean, scale=a.std / math.sqrt(a.n))
    assert v.ci == pytest.approx((lo - 2.9, hi - 2.9))


def test_within_single_seed_is_inconclusive():
    assert_no_ci(within(cell(1.0, NAN, 1), 1.0, 0.1))


def test_within_exact_is_refused_on_an_empirical_cell():
    # osciformer Fig. 5: a 3-seed mean judged as exact read "contradicted"; its interval overlaps the band
    with pytest.raises(ValueError, match=r"within: exact=True .* n = 3 seeds with std .*interval"):
        within(cell(0.89, 0.019, 3), 0.94, 0.02, exact=True)
    v = within(cell(0.89, 0.019, 3), 0.94, 0.02)
    assert v.status == "inconclusive" and v.ci[0] < -0.02 < v.ci[1]
    # deterministic values stay exact: one value, or seeds that agree exactly, or no spread recorded
    assert within(cell(5.0, NAN, 1), 5.0, 0.0, exact=True).status == "holds"
    assert within(cell(5.0, 0.0, 3), 5.0, 0.0, exact=True).status == "holds"
    assert within(cell(5.0, NAN, 3), 6.0, 0.5, exact=True).status == "contradicted"


# --------------------------------------------------------------------------------------------------- spread_ratio


def test_spread_ratio_holds_contradicted_inconclusive():
    a, b = cell(0.0, 0.1, 10), cell(0.0, 1.0, 10)
    lt = spread_ratio(a, b, "<")
    assert lt.status == "holds" and lt.effect == pytest.approx(0.01) and lt.ci[1] < 1
    assert spread_ratio(a, b, ">").status == "contradicted"
    assert spread_ratio(b, a, ">").status == "holds"
    assert spread_ratio(cell(0.0, 0.5, 3), cell(0.0, 0.6, 3), "<").status == "inconclusive"


@pytest.mark.parametrize(("a", "b", "who"), [(cell(0.0, 0.01, 2), cell(0.0, 10.0, 5), "a"),
                                             (cell(0.0, 10.0, 5), cell(0.0, 0.01, 2), "b")])
def test_spread_ratio_needs_three_seeds_per_group(a, b, who):
    # a variance ratio of 1e-6 would be "holds" on the F interval even with n = 2; an F test on 1 df is refused
    v = spread_ratio(a, b, "<" if who == "a" else ">")
    assert_no_ci(v)
    assert f"{who} has n = 2 < 3 seeds" in v.detail
    assert spread_ratio(cell(0.0, 0.01, 3), cell(0.0, 10.0, 5), "<").status == "holds"


@pytest.mark.parametrize(("a", "b"), [
    (cell(0.0, NAN, 1), cell(0.0, 1.0, 5)),
    (cell(0.0, 1.0, 5), cell(0.0, NAN, 1)),
    (cell(0.0, 0.0, 5), cell(0.0, 0.0, 5)),
])
def test_spread_ratio_without_interval_is_inconclusive(a, b):
    assert_no_ci(spread_ratio(a, b, "<"))


@pytest.mark.parametrize(("sa", "na", "sb", "nb"), [(0.3, 5, 0.1, 5), (0.3, 5, 0.15, 5), (0.2, 3, 0.5, 8)])
def test_spread_ratio_interval_matches_f_test(sa, na, sb, nb):
    v = spread_ratio(cell(0.0, sa, na), cell(0.0, sb, nb), ">", level=0.95)
    r = sa**2 / sb**2
    p = 2 * min(stats.f.cdf(r, na - 1, nb - 1), stats.f.sf(r, na - 1, nb - 1))
    assert (v.ci[0] > 1 or v.ci[1] < 1) == (p < 0.05)
    assert v.ci[0] < r < v.ci[1]
    # the interval inverts the F test: at each end, the observed ratio sits at a 2.5% tail of F(n_a − 1, n_b − 1)
    assert stats.f.cdf(r / v.ci[0], na - 1, nb - 1) == pytest.approx(0.975)
    assert stats.f.cdf(r / v.ci[1], na - 1, nb - 1) == pytest.approx(0.025)


# ----------------------------------------------------------------------------------------------- input validation


@pytest.mark.parametrize("call", [
    lambda: difference(cell(1.0), cell(2.0), "<="),
    lambda: spread_ratio(cell(1.0), cell(2.0), "less"),
    lambda: difference(cell(1.0), cell(2.0), "<", level=1.0),
    lambda: within(cell(1.0), 1.0, 0.1, level=0.0),
    lambda: within(cell(1.0), 1.0, -0.1),
    lambda: ordering([cell(1.0), cell(2.0)], "up"),
    lambda: ordering([cell(1.0)], "increasing"),
    lambda: trend([1.0, 2.0], [cell(1.0), cell(2.0), cell(3.0)], "increasing"),
    lambda: trend([1.0, 2.0, 3.0], [cell(1.0), cell(2.0), cell(3.0)], "upward"),
    lambda: trend([2.0, 2.0, 2.0], [cell(1.0), cell(2.0), cell(3.0)], "increasing"),
])
def test_bad_arguments_raise_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_bad_sign_message_names_the_choices():
    with pytest.raises(ValueError, match=r"sign must be one of .*got '<='"):
        difference(cell(1.0), cell(2.0), "<=")


def test_statuses_are_from_the_public_tuple():
    verdicts = [
        difference(cell(1.0), cell(2.0), "<"),
        ordering([cell(1.0), cell(2.0)], "increasing"),
        trend(X, [cell(m) for m in X], "increasing"),
        within(cell(1.0), 1.0, 0.1),
        spread_ratio(cell(0.0), cell(0.0, 0.2), "<"),
    ]
    assert all(v.status in STATUSES and v.detail for v in verdicts)
