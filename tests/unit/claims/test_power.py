"""Predictive power per check kind (oscrepro.claims.power) against a simulation of the whole look, and the planner's
pilot for claims with one seed per cell."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from oscrepro.claims.candidates import MIN_POWER, Candidate, render_plan
from oscrepro.claims.power import PILOT_POWER, ordering_power, spread_power, trend_power
from oscrepro.claims.verdict import CellStats


def _final_means(cells: list[CellStats], big_n: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Simulate the look: each cell's true mean ~ N(mean, s²/n) (flat prior), then big_n − n new seeds; the final
    mean pools the n seeds kept with the new ones. (cells, draws)."""
    out = []
    for c in cells:
        true = rng.normal(c.mean, c.std / math.sqrt(c.n), draws)
        new = rng.normal(true, c.std / math.sqrt(big_n - c.n))
        out.append((c.n * c.mean + (big_n - c.n) * new) / big_n)
    return np.stack(out)


@pytest.mark.parametrize(("means", "direction", "big_n"), [
    ([1.0, 2.0, 3.0], "increasing", 5),     # a clear chain
    ([1.0, 1.3, 3.0], "increasing", 8),     # one weak link
    ([3.0, 2.0, 2.2], "decreasing", 8),     # a reversed link decides (contradicted)
    ([1.0, 1.1, 1.2, 1.3], "increasing", 10),  # four cells, small steps
])
def test_ordering_power_matches_simulation(means, direction, big_n):
    cells = [CellStats(m, s, 3) for m, s in zip(means, [0.4, 0.6, 0.5, 0.3], strict=False)]
    level = 0.98
    rng = np.random.default_rng(1)
    final = _final_means(cells, big_n, 100_000, rng)
    sign = 1.0 if direction == "increasing" else -1.0
    q = stats.t.ppf(0.5 + (1 - (1 - level) / (len(cells) - 1)) / 2, big_n - 1)
    holds, rev = np.ones(final.shape[1], bool), np.zeros(final.shape[1], bool)
    for i in range(len(cells) - 1):
        gap = sign * (final[i + 1] - final[i])
        half = q * math.sqrt((cells[i].std ** 2 + cells[i + 1].std ** 2) / big_n)
        holds &= gap > half
        rev |= gap < -half
    expected = float(np.mean(holds | rev))
    assert ordering_power(cells, direction, big_n, level) == pytest.approx(expected, abs=0.015)


def test_ordering_power_shared_cell_is_not_independent():
    """Adjacent pairs share their middle cell: with a noisy middle, both links cannot hold together (the middle must
    land in a narrow window), which multiplying the two pairs' own powers would miss by 10x."""
    cells = [CellStats(0.0, 0.1, 3), CellStats(1.0, 2.0, 3), CellStats(2.0, 0.1, 3)]
    big_n, level = 10, 0.95
    pair_level = 1 - (1 - level) / 2
    spread = math.hypot(0.1, 2.0)
    sd = spread * math.sqrt((big_n - 3) / (big_n * 3))
    half = stats.t.ppf(0.5 + pair_level / 2, big_n - 1) * spread / math.sqrt(big_n)
    up, down = stats.norm.sf((half - 1.0) / sd), stats.norm.cdf((-half - 1.0) / sd)
    independent = up * up + 1 - (1 - down) ** 2
    chained = ordering_power(cells, "increasing", big_n, level)
    assert chained < independent / 5
    assert ordering_power(cells, "increasing", 3, level) == 0.0  # no new seeds, nothing to gain


@pytest.mark.parametrize(("means", "sd"), [([1.0, 0.8, 0.55, 0.4, 0.1], 0.3), ([0.0, 0.1, 0.0, 0.2, 0.1], 0.5)])
def test_trend_power_matches_simulation(means, sd):
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    cells = [CellStats(m, sd, 3) for m in means]
    big_n, level = 8, 0.97
    final = _final_means(cells, big_n, 100_000, np.random.default_rng(2))
    xbar = np.mean(x)
    coef = (np.array(x) - xbar) / np.sum((np.array(x) - xbar) ** 2)
    slope = coef @ final
    # the floor: the lack-of-fit half-width of the CURRENT means, as the planner keeps it
    m = np.array(means)
    s_now = coef @ m
    rss = np.sum((m - m.mean() - s_now * (np.array(x) - xbar)) ** 2)
    half_res = stats.t.ppf(0.5 + level / 2, 3) * math.sqrt(rss / 3 / np.sum((np.array(x) - xbar) ** 2))
    half_sd = stats.t.ppf(0.5 + level / 2, big_n - 1) * math.sqrt(np.sum(coef**2 * sd**2) / big_n)
    half = max(half_sd, half_res)
    expected = float(np.mean((slope - half > 0) | (slope + half < 0)))
    assert trend_power(x, cells, big_n, level) == pytest.approx(expected, abs=0.01)


def test_trend_power_floored_by_lack_of_fit():
    """Means far off any line: seeds cannot narrow the lack-of-fit reading, so power stays near 0."""
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    zigzag = [CellStats(m, 0.01, 3) for m in [0.0, 2.0, -1.0, 2.5, 0.2]]
    assert trend_power(x, zigzag, 10, 0.95) < MIN_POWER


def _pilot(cost_s: float) -> Candidate:
    class _Claim:
        id, table = "x-pilot", "fqo/appc"

    class _Checked:
        claim = _Claim()

    return Candidate(_Checked(), ["row"], 1, cost_s / 2, best_n=3, power=math.nan, cost_s=cost_s,
                     looks=[3, 5, 8, 10], pilot=True)


def test_pilot_is_ranked_at_pilot_power_and_shown_as_pilot():
    c = _pilot(600.0)
    assert c.score == pytest.approx(600.0 / PILOT_POWER)
    md = render_plan([c], "cpu", 1.0)
    assert "| pilot |" in md and "| 3, 5, 8, 10 | 3 |" in md


@pytest.mark.parametrize(("sa", "sb", "n", "big_n"), [
    (0.2, 1.0, 5, 10),   # a clear spread gap: decided
    (0.74, 1.0, 5, 10),  # coupledqk Table 1's ratio 0.547: far from decided at 10 seeds
    (0.4, 1.0, 3, 8),
    (1.0, 1.0, 5, 10),   # no gap: the only decision is a false one
])
def test_spread_power_matches_simulation(sa, sb, n, big_n):
    """The closed form (log-ratio normal) against a simulation of the look: each σ² drawn from its flat-prior
    posterior (log σ² ~ N(log s², 2/(n − 1))), the new seeds' sum of squares σ²·χ²_{N−n} pooled with the kept ones,
    and the F interval at N − 1 df judged as the verdict does."""
    rng = np.random.default_rng(1)
    draws, level = 40_000, 0.99
    finals = []
    for s in (sa, sb):
        var = np.exp(rng.normal(math.log(s * s), math.sqrt(2 / (n - 1)), draws))
        finals.append(((n - 1) * s * s + var * rng.chisquare(big_n - n, draws)) / (big_n - 1))
    ratio = finals[0] / finals[1]
    alpha, df = 1 - level, big_n - 1
    decided = (ratio / stats.f.ppf(1 - alpha / 2, df, df) > 1) | (ratio / stats.f.ppf(alpha / 2, df, df) < 1)
    got = spread_power(CellStats(0.0, sa, n), CellStats(0.0, sb, n), big_n, level)
    assert got == pytest.approx(float(decided.mean()), abs=0.05)


def test_spread_power_is_nothing_without_an_interval_or_more_seeds():
    assert spread_power(CellStats(0.0, 0.2, 2), CellStats(0.0, 1.0, 2), 10, 0.99) == 0.0  # F needs n ≥ 3
    assert spread_power(CellStats(0.0, 0.2, 10), CellStats(0.0, 1.0, 10), 10, 0.99) == 0.0  # no more seeds
    assert spread_power(CellStats(0.0, 0.1, 5), CellStats(0.0, 1.0, 5), 10, 0.99) > 0.9
