"""The group-sequential design for adding seeds (oscrepro.claims.sequential): the planned looks and their levels,
the verdict over a history of looks, a null simulation of whole sequences of looks (seeds arriving, the test applied
at each look, stopping at the first decision) against naive repeated 95 % testing, and the seed planner's estimate."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from oscrepro.claims.sequential import (
    decision_probability,
    look_levels,
    plan_looks,
    seeds_to_decide,
    sequential_verdict,
    spent_alpha,
)
from oscrepro.claims.verdict import CellStats, difference

ALPHA = 0.05
NOMINAL = ALPHA / 2
SIMS = 4000


def upper(p: float = NOMINAL, sims: int = SIMS) -> float:
    """The rate a correct test exceeds with probability 1e-3 only (binomial upper quantile)."""
    return float(stats.binom.ppf(1 - 1e-3, sims, p)) / sims


def judge(a: CellStats, b: CellStats, sign: str = ">", margin: float = 0.0):
    return lambda level: difference(a, b, sign, level, margin)


# ---------------------------------------------------------------------------------------------------- the design


@pytest.mark.parametrize(("n_start", "n_cap", "expected"), [
    (3, 12, [3, 5, 8, 12]), (3, 6, [3, 6]), (3, 3, [3]), (2, 30, [2, 4, 6, 9, 14, 21, 30]), (5, 10, [5, 8, 10]),
])
def test_plan_looks(n_start, n_cap, expected):
    looks = plan_looks(n_start, n_cap)
    assert looks == expected
    assert looks[0] == n_start and looks[-1] == n_cap
    assert all(b - a >= 2 for a, b in zip(looks[:-1], looks[1:], strict=True))


@pytest.mark.parametrize("args", [(1, 5), (5, 3), (3, 9, 1.0), (3, 9, 1.5, 0)])
def test_plan_looks_bad_arguments(args):
    with pytest.raises(ValueError):
        plan_looks(*args)


@pytest.mark.parametrize(("spending", "rho"), [("pocock", 1.0), ("power", 1.0), ("power", 3.0)])
def test_look_levels_spend_alpha_in_total(spending, rho):
    looks = plan_looks(3, 12)
    levels = look_levels(looks, ALPHA, spending, rho)
    assert sum(1 - lv for lv in levels) == pytest.approx(ALPHA)
    assert all(0.95 < lv < 1 for lv in levels)  # every look, the first included, is stricter than a fixed 95 %
    spent = np.cumsum([1 - lv for lv in levels])
    assert spent == pytest.approx([spent_alpha(n / 12, ALPHA, spending, rho) for n in looks])


def test_pocock_type_spends_early():
    # α ln(1 + (e − 1) t) at t = 1/4 spends more than the linear α t: the cheap first look gets a real chance
    assert spent_alpha(0.25, ALPHA) > 0.25 * ALPHA
    assert spent_alpha(0.0, ALPHA) == 0.0 and spent_alpha(1.0, ALPHA) == pytest.approx(ALPHA)


@pytest.mark.parametrize("looks", [[], [3, 3, 5], [5, 3], [1, 3]])
def test_look_levels_bad_looks(looks):
    with pytest.raises(ValueError, match="looks must be strictly increasing"):
        look_levels(looks)


# ----------------------------------------------------------------------------------------------------- verdicts

LOOKS = plan_looks(3, 12)


def test_first_look_is_judged_at_its_spent_level_not_95():
    a, b = CellStats(0.8, 0.3, 3), CellStats(0.0, 0.3, 3)  # 95 % interval [0.12, 1.48]: "holds" at a fixed level
    assert difference(a, b, ">").status == "holds"
    first = look_levels(LOOKS)[0]
    v = sequential_verdict([(3, judge(a, b))], LOOKS)
    assert v.status == difference(a, b, ">", first).status == "inconclusive"
    assert "no decision through look 1 of 4 (n = 3)" in v.detail and "next look at n = 5" in v.detail
    assert f"level {first:g}" in v.detail and v.test == "group-sequential Welch t"


def test_stops_at_the_first_decisive_look():
    history = [(3, judge(CellStats(0.5, 1.0, 3), CellStats(0.0, 1.0, 3))),
               (5, judge(CellStats(3.0, 0.2, 5), CellStats(0.0, 0.2, 5))),  # decides: holds
               (8, judge(CellStats(-3.0, 0.2, 8), CellStats(0.0, 0.2, 8)))]  # would contradict; not to be taken
    v = sequential_verdict(history, LOOKS)
    assert v.status == "holds" and v.effect == pytest.approx(3.0)
    spent = 1 - look_levels(LOOKS)[0] + 1 - look_levels(LOOKS)[1]
    assert "decided at look 2 of 4 (n = 5)" in v.detail and f"α spent {spent:.3g} of 0.05" in v.detail


def test_cap_reached_is_inconclusive():
    history = [(n, judge(CellStats(0.1, 1.0, n), CellStats(0.0, 1.0, n))) for n in LOOKS]
    v = sequential_verdict(history, LOOKS)
    assert v.status == "inconclusive" and "seed cap reached" in v.detail and "α spent 0.05 of 0.05" in v.detail


@pytest.mark.parametrize("taken", [[3, 6], [5], [3, 5, 8, 12, 18]])
def test_a_look_off_the_schedule_is_refused(taken):
    history = [(n, judge(CellStats(0.0, 1.0, n), CellStats(0.0, 1.0, n))) for n in taken]
    with pytest.raises(ValueError, match="off the schedule"):
        sequential_verdict(history, LOOKS)


def test_empty_history_is_refused():
    with pytest.raises(ValueError, match="history is empty"):
        sequential_verdict([], LOOKS)


# --------------------------------------------------------------------------------------------- null simulation

SD_A, SD_B = 1.0, 3.0  # unequal variances


def simulate(effect: float, seed: int, naive: bool = False) -> tuple[float, float, float]:
    """Over SIMS sequences — seeds per group arriving up to the cap, the claim a − b > 0 judged at each planned look,
    stopping at the first decision — the rates of holds and contradicted and the mean seeds per group used. The
    design's verdict is sequential_verdict over the whole history (it stops at the first decisive look, which is
    what stopping there gives); ``naive``: each look judged at the fixed 95 % instead."""
    rng = np.random.default_rng(seed)
    cap = LOOKS[-1]
    a = effect + SD_A * rng.standard_normal((SIMS, cap))
    b = SD_B * rng.standard_normal((SIMS, cap))
    at = {n: [a[:, :n].mean(1), a[:, :n].std(1, ddof=1), b[:, :n].mean(1), b[:, :n].std(1, ddof=1)] for n in LOOKS}
    statuses, used = [], []
    for i in range(SIMS):
        history = [(n, judge(CellStats(float(at[n][0][i]), float(at[n][1][i]), n),
                             CellStats(float(at[n][2][i]), float(at[n][3][i]), n))) for n in LOOKS]
        if naive:
            looks = [(n, j(0.95)) for n, j in history]
            n_used, v = next(((n, v) for n, v in looks if v.status != "inconclusive"), (cap, looks[-1][1]))
        else:
            v = sequential_verdict(history, LOOKS, ALPHA)
            n_used = int(v.detail.split("(n = ")[1].split(")")[0]) if v.status != "inconclusive" else cap
        statuses.append(v.status)
        used.append(n_used)
    return statuses.count("holds") / SIMS, statuses.count("contradicted") / SIMS, float(np.mean(used))


def test_null_false_decisions_at_most_nominal():
    holds, contra, _ = simulate(0.0, 201)
    assert holds <= upper() and contra <= upper(), (holds, contra)


def test_naive_repeated_95_exceeds_nominal():
    """The same sequences judged at a fixed 95 % at every look: stopping at the first decision inflates false
    "holds" beyond the nominal rate — the error the design prevents (and proof the simulation can fail)."""
    holds, contra, _ = simulate(0.0, 201, naive=True)
    assert holds > upper() and contra > upper(), (holds, contra)


def test_real_effect_decides_by_the_cap():
    holds, contra, mean_n = simulate(4.0, 202)  # a − b = 4: SE 0.91 at n = 12 per group
    assert holds >= 0.9 and contra == 0.0
    assert mean_n < LOOKS[-1]  # and often earlier: the point of the design


# ------------------------------------------------------------------------------------------------ seed planner


def test_decision_probability_matches_monte_carlo():
    """The predictive distribution of the final difference: current means uncertain (flat prior, SDs known), the
    new seeds' noise on top; checked by sampling it directly."""
    a, b, n, margin = CellStats(1.0, 0.8, 3), CellStats(0.4, 0.5, 4), 9, 0.1
    rng = np.random.default_rng(203)
    draws = 400_000

    def final_mean(c: CellStats) -> np.ndarray:
        mu = c.mean + c.std / math.sqrt(c.n) * rng.standard_normal(draws)  # posterior of the true mean
        new = mu + c.std / math.sqrt(n - c.n) * rng.standard_normal(draws)  # mean of the n − n_c new seeds
        return (c.n * c.mean + (n - c.n) * new) / n

    gap = final_mean(a) - final_mean(b)
    va, vb = a.std**2 / n, b.std**2 / n
    df = (va + vb) ** 2 / (va**2 / (n - 1) + vb**2 / (n - 1))
    half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    p_holds, p_contra = decision_probability(a, b, n, ">", margin)
    assert p_holds == pytest.approx(np.mean(gap - half > margin), abs=0.005)
    assert p_contra == pytest.approx(np.mean(gap + half < margin), abs=0.005)
    assert decision_probability(a, b, n, "<", margin) == (p_contra, p_holds)


def test_seeds_to_decide_grows_as_the_effect_shrinks():
    sd = 0.5
    needed = [seeds_to_decide(CellStats(d, sd, 3), CellStats(0.0, sd, 3), ">") for d in (2.0, 1.0, 0.6, 0.1)]
    assert needed[0] == 3  # already decided at the current seeds
    assert needed[0] < needed[1] < needed[2] <= 30  # type: ignore[operator]
    assert needed[3] is None  # 0.1 with SD 0.5: not expected to decide below the cap
    # more assurance, or a stricter level (a later look of the design), asks for more seeds
    a, b = CellStats(1.0, sd, 3), CellStats(0.0, sd, 3)
    assert seeds_to_decide(a, b, ">", assurance=0.95) > seeds_to_decide(a, b, ">", assurance=0.8)  # type: ignore[operator]
    assert seeds_to_decide(a, b, ">", level=0.99) > seeds_to_decide(a, b, ">", level=0.95)  # type: ignore[operator]


def test_seeds_to_decide_accounts_for_the_effects_uncertainty():
    # the plug-in rule (the interval at n around the observed effect excludes 0) says n = 5 here; with the
    # effect itself uncertain (t ≈ 2 at 3 seeds), reaching 80 % takes more
    a, b = CellStats(0.8, 0.5, 3), CellStats(0.0, 0.5, 3)
    plug_in = next(n for n in range(3, 31) if difference(CellStats(0.8, 0.5, n), CellStats(0.0, 0.5, n), ">").status
                   == "holds")
    assert seeds_to_decide(a, b, ">") > plug_in  # type: ignore[operator]


def test_seeds_to_decide_wanting_holds():
    a, b = CellStats(-1.0, 0.5, 3), CellStats(0.0, 0.5, 3)  # the effect is on the other side of the claim
    assert seeds_to_decide(a, b, ">", want="holds") is None
    assert seeds_to_decide(a, b, ">") == seeds_to_decide(a, b, "<", want="holds")  # it decides: contradicted


@pytest.mark.parametrize("a", [CellStats(1.0, float("nan"), 1), CellStats(float("nan"), 0.5, 3)])
def test_seeds_to_decide_without_a_spread_estimate(a):
    assert seeds_to_decide(a, CellStats(0.0, 0.5, 3), ">") is None


@pytest.mark.parametrize("call", [
    lambda: seeds_to_decide(CellStats(1.0, 0.5, 3), CellStats(0.0, 0.5, 3), ">=",),
    lambda: seeds_to_decide(CellStats(1.0, 0.5, 3), CellStats(0.0, 0.5, 3), ">", assurance=1.0),
    lambda: seeds_to_decide(CellStats(1.0, 0.5, 3), CellStats(0.0, 0.5, 3), ">", want="both"),
    lambda: decision_probability(CellStats(1.0, 0.5, 5), CellStats(0.0, 0.5, 3), 4, ">"),
])
def test_planner_bad_arguments(call):
    with pytest.raises(ValueError):
        call()


def _chain_rates(steps: tuple[float, ...], sds: tuple[float, ...], seed: int, sims: int = 2000) -> tuple[float, float]:
    """Rates of holds and contradicted for an increasing-ordering claim over len(steps) + 1 cells (true means the
    running sum of ``steps``) judged by the design over LOOKS: the planner now extends orderings too, and the union
    bound covers any test valid at its look's level (the ordering's Bonferroni chain is one)."""
    from oscrepro.claims.verdict import ordering

    rng = np.random.default_rng(seed)
    cap, means = LOOKS[-1], np.concatenate([[0.0], np.cumsum(steps)])
    draws = [m + sd * rng.standard_normal((sims, cap)) for m, sd in zip(means, sds, strict=True)]
    statuses = []
    for i in range(sims):
        def judge_at(n: int, i: int = i):
            cells = [CellStats(float(d[i, :n].mean()), float(d[i, :n].std(ddof=1)), n) for d in draws]
            return lambda level: ordering(cells, "increasing", level)
        statuses.append(sequential_verdict([(n, judge_at(n)) for n in LOOKS], LOOKS, ALPHA).status)
    return statuses.count("holds") / sims, statuses.count("contradicted") / sims


@pytest.mark.parametrize("steps", [(0.0, 0.0), (0.0, 6.0)])
def test_ordering_null_under_the_design(steps):
    """A chain with a null link: all links null, or one null and the other clearly true (then the chain holds as
    often as that link does, the least favourable case): false "holds" at or below the nominal rate over all looks
    together."""
    holds, _ = _chain_rates(steps, (1.0, 2.0, 1.0), 203)
    assert holds <= upper(sims=2000), holds


def test_ordering_real_chain_decides_under_the_design():
    holds, contra = _chain_rates((2.5, 2.5), (1.0, 1.0, 1.0), 204, sims=500)
    assert holds >= 0.9 and contra == 0.0
