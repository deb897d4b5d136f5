"""A group-sequential test for adding seeds to a claim until it decides, keeping its error rate under that stopping.

Why: a claim left inconclusive at 3 seeds invites adding seeds and looking again. Testing each look at the fixed-sample
level (95 %) and stopping at the first decision inflates false decisions: over looks at n = 3, 5, 8, 12 a null
difference comes out "holds" about 7 % of the time instead of 2.5 % (tests/unit/claims/test_sequential.py measures
it). This module fixes the looks in advance and spends the error rate across them.

The design (Jennison & Turnbull 2000, *Group Sequential Methods with Applications to Clinical Trials*, ch. 7):

* **Looks at planned seed counts** (:func:`plan_looks`): n_1 = the claim's current seeds, then a fixed schedule that
  grows by ``growth`` (at least ``min_step`` seeds) up to the cap n_K. The schedule depends only on (n_start, n_cap),
  never on the data; seeds beyond a look are only trained after that look was inconclusive.
* **Alpha spending** (Lan & DeMets 1983, Biometrika 70, 659): the two-sided error α (= 1 − level) is spent as a
  function of the information fraction t = n_j / n_K, by default the Pocock-type function α·ln(1 + (e − 1)·t) (Lan &
  DeMets 1983; Kim & DeMets 1987 for the power family α·t^ρ, ``spending="power"``). Pocock-type spends early, which
  suits seeds: the cheap first looks get a real chance to decide. Look j gets α_j = α*(t_j) − α*(t_{j−1}) and is
  judged by the claim's ordinary test (Welch, t, F ...) at confidence level 1 − α_j (:func:`look_levels`).
* **Union bound** (Bonferroni) across looks, rather than exact boundaries from the joint distribution of the look
  statistics: exact boundaries assume the canonical joint normal form, which the t statistics of 3–12 seeds with
  Welch df do not have; the union bound is valid under any dependence between looks and needs nothing but each
  look's test being valid at its own level. It is conservative (the looks share seeds, so the true rate is below
  the bound).

What the guarantee covers, precisely: for one claim run through the design — every look judged at its own level
1 − α_j, **the first look included** (not at the fixed-sample 95 %), stopping at the first decisive look —
P(false "holds") ≤ Σ_j α_j/2 = α/2, and likewise P(false "contradicted") ≤ α/2, whatever the true variances (as far
as each look's test is valid: Welch's interval is approximate). It does not cover: (i) a schedule or cap chosen from
the data (fix n_cap by a rule set before looking, e.g. a per-claim seed cap, not from :func:`seeds_to_decide`'s
estimate); (ii) a look off the schedule (:func:`sequential_verdict` refuses it); (iii) a fixed-level reading taken
first and kept when decisive. If a claim's 95 % verdict at n_start is kept when it decides and only the inconclusive
ones enter the design, that reading is one more look at the full α, and the bound for the combined procedure is
α_fixed/2 + α/2 (5 % one-sided for 95 % + 95 %; simulated with looks 3, 5, 8, 12 and unequal variances: 3.4 % false
"holds" against 2.5 %), not α/2. So an extended claim's verdict is reported as this design's (its detail says so),
and the 95 % reading that selected it is a screening step whose error is counted separately.

:func:`sequential_verdict` is generic over the claim's test (any function of the level that returns a Verdict);
:func:`seeds_to_decide` predicts, for a difference claim, the per-group seed count at which a look is likely to
decide — for ranking which claims are cheapest to decide, not for choosing the looks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from scipy import special

from oscrepro.claims.verdict import _SIGNS, CellStats, Verdict, _check, _t_quantile

SPENDING = ("pocock", "power")
Judge = Callable[[float], Verdict]  # the claim's test on one look's cells, at the confidence level it is given


def plan_looks(n_start: int, n_cap: int, growth: float = 1.5, min_step: int = 2) -> list[int]:
    """The planned seed counts of the looks: ``n_start``, then ×``growth`` (rounded up, at least ``min_step`` more)
    while below ``n_cap``, and ``n_cap`` last. E.g. (3, 12) → [3, 5, 8, 12]. Depends on its arguments only."""
    if n_start < 2:
        raise ValueError(f"n_start must be ≥ 2 (a look needs an interval), got {n_start}")
    if n_cap < n_start:
        raise ValueError(f"n_cap must be ≥ n_start, got n_start={n_start}, n_cap={n_cap}")
    if growth <= 1.0 or min_step < 1:
        raise ValueError(f"growth must be > 1 and min_step ≥ 1, got growth={growth}, min_step={min_step}")
    looks = [n_start]
    while looks[-1] < n_cap:
        nxt = max(math.ceil(looks[-1] * growth), looks[-1] + min_step)
        # a last step shorter than min_step would be a look that barely adds information: go to the cap instead
        looks.append(n_cap if nxt + min_step > n_cap else nxt)
    return looks


def spent_alpha(t: float, alpha: float, spending: str = "pocock", rho: float = 1.0) -> float:
    """α*(t): the two-sided error spent by information fraction ``t`` ∈ [0, 1] (Lan–DeMets spending function)."""
    if spending not in SPENDING:
        raise ValueError(f"spending must be one of {SPENDING}, got {spending!r}")
    if not 0.0 <= t <= 1.0:
        raise ValueError(f"information fraction must be in [0, 1], got {t!r}")
    if spending == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    if rho <= 0:
        raise ValueError(f"rho must be > 0 for the power spending function, got {rho!r}")
    return alpha * t**rho


def look_levels(looks: Sequence[int], alpha: float = 0.05, spending: str = "pocock", rho: float = 1.0) -> list[float]:
    """Per-look confidence levels 1 − α_j, α_j = α*(n_j/n_K) − α*(n_{j−1}/n_K): they spend ``alpha`` in total."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not looks or any(b <= a for a, b in zip(looks[:-1], looks[1:], strict=True)) or looks[0] < 2:
        raise ValueError(f"looks must be strictly increasing seed counts ≥ 2, got {list(looks)!r}")
    spent = [spent_alpha(n / looks[-1], alpha, spending, rho) for n in looks]
    return [1.0 - (s - p) for p, s in zip([0.0, *spent[:-1]], spent, strict=True)]


def sequential_verdict(history: Sequence[tuple[int, Judge]], looks: Sequence[int], alpha: float = 0.05,
                       spending: str = "pocock", rho: float = 1.0) -> Verdict:
    """The claim's verdict under the group-sequential design ``looks`` (from :func:`plan_looks`).

    ``history`` holds the looks taken so far, in order: (n seeds at that look, judge), where ``judge(level)`` is the
    claim's ordinary test on that look's cells (e.g. ``lambda lv: difference(a, b, ">", lv)``). Each look is judged
    at its spent level; the first decisive one is the verdict (later looks, which should not have been taken, are
    ignored). None decisive → inconclusive, with the last look's numbers. A look off the schedule raises ValueError.
    """
    if not history:
        raise ValueError("history is empty: take the first look (the claim's current seeds) before judging")
    levels = look_levels(looks, alpha, spending, rho)
    taken = [n for n, _ in history]
    if len(taken) > len(looks) or taken != list(looks[: len(taken)]):
        raise ValueError(f"looks taken at n = {taken}, but the design plans n = {list(looks)}: a look off the "
                         "schedule voids the alpha spending (train up to the next planned look)")
    name = "Pocock-type" if spending == "pocock" else f"power ρ = {rho:g}"
    where = f"Lan–DeMets {name} spending over looks n = {list(looks)}, Bonferroni across looks"
    spent = 0.0
    for j, ((n, judge), level) in enumerate(zip(history, levels, strict=False)):
        spent += 1.0 - level
        v = judge(level)
        if v.status != "inconclusive":
            detail = (f"{v.detail}; group-sequential: decided at look {j + 1} of {len(looks)} (n = {n}), level "
                      f"{level:.4g}, α spent {spent:.3g} of {alpha:g} ({where})")
            return Verdict(v.status, f"group-sequential {v.test}", v.effect, v.ci, detail)
    j = len(history)
    nxt = f"next look at n = {looks[j]}" if j < len(looks) else "seed cap reached"
    detail = (f"{v.detail}; group-sequential: no decision through look {j} of {len(looks)} (n = {n}), α spent "
              f"{spent:.3g} of {alpha:g}, {nxt} ({where})")
    return Verdict("inconclusive", f"group-sequential {v.test}", v.effect, v.ci, detail)


def decision_probability(a: CellStats, b: CellStats, n: int, sign: str, margin: float = 0.0,
                         level: float = 0.95) -> tuple[float, float]:
    """(P(holds), P(contradicted)) for claim ``mean(a) − mean(b) <sign> margin`` once both groups have ``n`` seeds,
    predicted from the current cells (the Bayesian predictive power of Spiegelhalter, Freedman & Blackburn 1986,
    Controlled Clinical Trials 7, 8, with a flat prior on the group means and the observed SDs taken as known).

    Given the current data, group g's final mean (n_g current seeds kept, n − n_g new) is normal around its current
    mean with variance σ_g²·(n − n_g)/(n·n_g): the uncertainty of the current estimate plus the new seeds' noise. The
    final Welch interval has half-width q·√(Σσ_g²/n) (q: t quantile at its Welch–Satterthwaite df), so e.g.
    P(holds, sign ">") = Φ((d − margin − half) / τ) with d the current difference and τ² the summed predictive
    variance. The SDs' own uncertainty is not propagated (it is second order next to the effect's at these n).
    """
    _check("sign", sign, _SIGNS, level)
    if n < max(a.n, b.n):
        raise ValueError(f"n must be ≥ the current seeds ({max(a.n, b.n)}), got {n}")
    va, vb = a.std**2, b.std**2
    se2 = (va + vb) / n
    if se2 == 0.0:
        half = 0.0
    else:
        df = se2**2 / ((va / n) ** 2 / (n - 1) + (vb / n) ** 2 / (n - 1))
        half = _t_quantile(level, df) * math.sqrt(se2)
    tau = math.sqrt(va * (n - a.n) / (n * a.n) + vb * (n - b.n) / (n * b.n))
    gap = a.mean - b.mean - margin  # > 0 on the side of claim ">"
    if tau == 0.0:  # nothing left to learn: the verdict at n is the current data's
        up, down = float(gap - half > 0), float(gap + half < 0)
    else:
        up, down = float(special.ndtr((gap - half) / tau)), float(special.ndtr((-gap - half) / tau))
    return (up, down) if sign == ">" else (down, up)


def seeds_to_decide(a: CellStats, b: CellStats, sign: str, margin: float = 0.0, level: float = 0.95,
                    assurance: float = 0.8, n_cap: int = 30, want: str = "either") -> int | None:
    """The smallest per-group seed count n (current ≤ n ≤ ``n_cap``) at which the claim ``mean(a) − mean(b) <sign>
    margin`` is predicted to decide with probability ≥ ``assurance`` (:func:`decision_probability`): decide either
    way (``want="either"``, holds or contradicted) or hold (``want="holds"``). None when no n up to the cap reaches
    it, or a cell has no spread estimate (n < 2, no finite mean or std).

    Why a predictive probability rather than "where the expected interval excludes the boundary": that plug-in
    answer treats the observed effect as the truth, and 3-seed effects near the boundary are mostly noise. The
    predictive probability carries the effect's own uncertainty. As n grows, P(holds) tends to Φ(t), t = the current
    effect over its standard error oriented to the claim, so ``want="holds"`` at 80 % assurance is out of reach when
    the effect is less than ~0.84 standard errors past the boundary; P(either) tends to 1 (a true effect is never
    exactly on the boundary) but slowly when the effect is near it, so the cap returns None there: more seeds are
    not expected to decide it at a price worth planning. ``level``: the level the deciding look is judged at (for
    the sequential design, that look's level from :func:`look_levels`), so the estimate is per look, not a promise
    that the design stops at n.
    """
    _check("sign", sign, _SIGNS, level)
    if want not in ("either", "holds"):
        raise ValueError(f"want must be 'either' or 'holds', got {want!r}")
    if not 0.0 < assurance < 1.0:
        raise ValueError(f"assurance must be in (0, 1), got {assurance!r}")
    for c in (a, b):
        if c.n < 2 or not (math.isfinite(c.mean) and math.isfinite(c.std) and c.std >= 0):
            return None
    for n in range(max(a.n, b.n), n_cap + 1):
        p_holds, p_contra = decision_probability(a, b, n, sign, margin, level)
        if (p_holds + p_contra if want == "either" else p_holds) >= assurance:
            return n
    return None
