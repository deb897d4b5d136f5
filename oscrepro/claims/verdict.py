"""Verdicts on a paper's claims from table-cell summary statistics: mean, sample std over seeds (ddof=1), n seeds.

A reproduction table keeps, per cell, ``mean``, ``std`` and ``n``, so every test here is one computable from those
three numbers, with one exception: a cell may also keep its value per unit (the run or trial it was measured on,
``units``), and two cells measured on the same units are paired (below). Each function returns a :class:`Verdict`
whose ``status`` is one of :data:`STATUSES`:

* ``holds``: the confidence interval of the effect lies entirely on the side the paper claims;
* ``contradicted``: it lies entirely on the other side, i.e. the data support the opposite claim at the same level;
* ``inconclusive``: the interval straddles the boundary, or cannot be computed (n < 2, a missing std). A claim is
  never settled from a point estimate alone: with 3 seeds a gap of a few hundredths is routinely noise, and "no
  interval" must not read as "holds".

Rules, and why:

* :func:`difference`: claim ``mean(a) − mean(b) <sign> margin``. Welch's t interval with the Welch–Satterthwaite
  df, because seeds of two different models need not share a variance (the pooled t interval assumes they do).
  If both stds are exactly 0 with n ≥ 2 the quantity is deterministic and the interval is the point itself.
  ``margin`` lets a claim say "lower by at least m" (``margin=-m``). **Paired** when both cells carry per-unit
  values of the same units (:func:`paired_differences`: two quantities measured on the same runs, such as fqo
  Table 6's error after random and after sequential initialisation of the same models, or Table 3's attention to
  the subject and to the distractor in the same runs): the t interval of the mean per-unit difference, n − 1 df
  (Student 1908; any textbook's matched-pairs interval). Welch's interval assumes the two cells independent; on
  the same runs their covariance enters the variance of the difference (Var(a − b) = Var a + Var b − 2 Cov), so
  Welch is too wide under positive correlation and too narrow, i.e. anti-conservative, under negative correlation.
  Seeds of two different models are not paired by this rule even when their seeds match: their independence is
  what Welch assumes, and pairing them would be an analysis chosen after the fact. The one exception is declared in
  the claim's spec, with the reason the runs are seed-matched by construction and the look it applies from
  (``pair_seeds``: common random numbers, :mod:`oscrepro.claims.seed_pairs`).
* :func:`ordering`: claim that cells strictly increase (or decrease) in the given order. Each adjacent pair is a
  :func:`difference` at the Bonferroni level ``1 − (1 − level)/(k − 1)`` so that the chain as a whole, not each
  link, has the stated level. All pairs hold → holds; any pair contradicted → contradicted (one reversed link
  already breaks a strict ordering); else inconclusive. Effect: the smallest adjacent gap in the claimed direction.
* :func:`trend`: claim of a monotone trend along x (depth, length ...). The effect is the ordinary least-squares
  slope of the cell means on x (each x counts once: a fixed contrast Σ c_i·mean_i with c_i = (x_i − x̄)/Σ(x − x̄)²).
  Its interval must exclude 0 on two readings of the noise, and the wider one is reported:

  - from the cells' own seed SDs: Var = Σ c_i² std_i²/n_i, t quantile at the Welch–Satterthwaite df of that sum
    (Satterthwaite 1946), which is right when the means scatter about the line only as their SDs say;
  - from the scatter of the means about the line (lack of fit): Var = RSS/(k − 2)/Σ(x − x̄)², t(k − 2), which is
    right when the points scatter more than their SDs say (timings under changing load, a per-cell offset that
    seeds of one cell share). This is the Birge-ratio / quasi-likelihood correction (Birge 1932, Phys. Rev. 40,
    207; McCullagh & Nelder 1989, *Generalized Linear Models*, ch. 9): when the residual χ²/dof about the line
    exceeds what the SDs allow, the slope variance is scaled up to the residual one and judged with t(k − 2).

  The detail gives χ²/dof = Σ (r_i / (std_i/√n_i))² / (k − 2) and which reading set the width. k < 3 points leave
  no df → inconclusive. Why not inverse-variance weights n/std² (the rule before, and the literal Birge recipe):
  with 3 seeds each std² has 2 df, so the weights are noise (std²/σ² is exponential: one cell in ten gets a weight
  10x too large), and both the slope and the "known" or Birge-scaled variance are anti-conservative. In the null
  simulations (tests/unit/claims/test_null_simulation.py) they give up to 40 % (SDs as known variances) and 7 %
  (Birge-scaled) false "holds" against 2.5 % nominal; cf. Carroll & Cline 1988, Biometrika 75, 35, on weights
  estimated from few replicates. The two-reading rule stays at or below 2.5 % over every null configuration
  simulated (heteroscedastic, lack of fit, both). A trend claim is about the overall direction, which noisy single
  steps may not show, hence a slope rather than pairwise orderings.
* :func:`within`: claim that a value equals ``target`` ± ``tol`` (a closed form, or the paper's own number). An
  empirical value is judged by its interval, never by its point: the two-sided t interval of the mean (at
  ``level``) must lie inside the closed band to hold, wholly outside it to contradict; an interval that overlaps
  the band's edge is inconclusive whichever side the mean is on. ``exact=True`` is for deterministic quantities
  only (a parameter count, an identity, a closed form; n may be 1): the value is compared with the band directly.
  ``exact=True`` on a cell with n ≥ 2 and std > 0 raises ValueError: a seed mean is an empirical quantity, and
  judging it as exact is what turned osciformer Fig. 5's [0.843, 0.937] (overlapping 0.94 ± 0.02) into a
  "contradicted". Effect = mean − target, and ``ci`` is on that scale (compare it with [−tol, tol]).
* :func:`spread_ratio`: claim that a's seed spread is < or > b's. Effect = std_a²/std_b² with the F interval
  (n_a − 1, n_b − 1 df) for a ratio of normal variances, compared with 1. It needs n ≥ 3 per group, else
  inconclusive: at n = 2 a group's variance has 1 df and one end of the 95 % F interval lies 650–1000x from the
  observed ratio, so the test can essentially never decide, and "inconclusive" should say why. Both stds 0 →
  inconclusive (0/0); only b's 0 → ratio and interval are +inf.

Adding seeds until a claim decides is a sequence of looks at growing n: :mod:`oscrepro.claims.sequential` judges
such a sequence with alpha spending so that the error rate holds over all looks together.

Bad arguments (unknown sign or direction, mismatched lengths, a level outside (0, 1), a negative tolerance, x
without two distinct values, ``exact=True`` on a cell with seed spread) raise ``ValueError``: they are mistakes in
the claim's definition, not properties of the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import special

from oscrepro.tables.values import unit_differences

STATUSES = ("holds", "contradicted", "inconclusive")
_SIGNS = ("<", ">")
_DIRECTIONS = ("increasing", "decreasing")
_NAN = float("nan")
_NO_CI = (_NAN, _NAN)


@dataclass(frozen=True)
class CellStats:
    """One table cell: mean over seeds, sample std (ddof=1; nan when n < 2) and n = number of seeds; ``units``:
    (unit, value) per seed where the table kept them (the run id of each value: module docstring, pairing)."""

    mean: float
    std: float
    n: int
    units: tuple[tuple[str, float], ...] = ()


def paired_differences(a: CellStats, b: CellStats) -> list[float] | None:
    """The per-unit differences a − b when both cells were measured on the same units (the same set of runs, at
    least 2), else None (judge them as independent cells)."""
    diffs = unit_differences(a.units, b.units, min_units=2)
    return None if diffs is None else [d for _, d in diffs]


@dataclass(frozen=True)
class Verdict:
    """Outcome of one claim check: status (one of STATUSES), test used, effect size, its CI, one human sentence."""

    status: str
    test: str
    effect: float
    ci: tuple[float, float]
    detail: str


def _fmt(v: float) -> str:
    """A number for a detail sentence: 3 significant digits and a true minus sign."""
    return f"{v:.3g}".replace("-", "−")


def _fmt_ci(ci: tuple[float, float]) -> str:
    return f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"


def _check(name: str, value: str, allowed: tuple[str, ...], level: float) -> None:
    """Raise ValueError for a sign/direction outside ``allowed`` or a level outside (0, 1)."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")


def _no_interval(c: CellStats, label: str) -> str | None:
    """Why cell ``c`` gives no interval (None when it does)."""
    if c.n < 2:
        return f"{label} has n = {c.n} < 2 seeds"
    if not math.isfinite(c.mean):
        return f"{label} has no finite mean"
    if not (math.isfinite(c.std) and c.std >= 0):
        return f"{label} has no valid std"
    return None


def _side(ci: tuple[float, float], bound: float, claim_above: bool) -> str:
    """holds / contradicted when ``ci`` is strictly on one side of ``bound``, else inconclusive."""
    above, below = ci[0] > bound, ci[1] < bound
    if above or below:
        return "holds" if above == claim_above else "contradicted"
    return "inconclusive"


def _t_quantile(level: float, df: float) -> float:
    """Upper quantile of Student's t for a two-sided ``level`` interval (scipy.special's inverse cdf: the same value
    as ``stats.t.ppf``, ~30x faster, which the null simulations and the seed planner need)."""
    return float(special.stdtrit(df, 0.5 + level / 2.0))


def difference(a: CellStats, b: CellStats, sign: str, level: float = 0.95, margin: float = 0.0) -> Verdict:
    """Claim ``mean(a) − mean(b) <sign> margin`` (sign "<" or ">"), judged by Welch's t interval at ``level``, or by
    the paired t interval when both cells hold values of the same runs (:func:`paired_differences`)."""
    _check("sign", sign, _SIGNS, level)
    effect = a.mean - b.mean
    claim = f"claim a − b {sign} {_fmt(margin)}"
    diffs = paired_differences(a, b)
    if diffs is not None:
        return _paired(diffs, sign, level, margin, claim)
    why = _no_interval(a, "a") or _no_interval(b, "b")
    if why:
        detail = f"a − b = {_fmt(effect)}, no interval: {why} ({claim}, n {a.n}/{b.n})"
        return Verdict("inconclusive", "Welch t", effect, _NO_CI, detail)
    va, vb = a.std**2 / a.n, b.std**2 / b.n
    if va + vb == 0.0:
        ci, how = (effect, effect), "zero spread"
    else:
        df = (va + vb) ** 2 / (va**2 / (a.n - 1) + vb**2 / (b.n - 1))
        half = _t_quantile(level, df) * math.sqrt(va + vb)
        ci, how = (effect - half, effect + half), f"df {df:.1f}"
    status = _side(ci, margin, sign == ">")
    detail = f"a − b = {_fmt(effect)} {_fmt_ci(ci)}, {claim}: {status} (Welch t, {how}, level {level:g}, n {a.n}/{b.n})"
    return Verdict(status, "Welch t", effect, ci, detail)


def _paired(diffs: list[float], sign: str, level: float, margin: float, claim: str) -> Verdict:
    """:func:`difference` on paired cells: the t interval of the mean per-unit difference (n − 1 df)."""
    n = len(diffs)
    effect = math.fsum(diffs) / n
    sd = math.sqrt(math.fsum((d - effect) ** 2 for d in diffs) / (n - 1))
    half = _t_quantile(level, n - 1) * sd / math.sqrt(n)
    ci = (effect - half, effect + half)
    status = _side(ci, margin, sign == ">")
    detail = (f"a − b = {_fmt(effect)} {_fmt_ci(ci)}, {claim}: {status} (paired t over the same runs, df {n - 1}, "
              f"level {level:g}, n {n} pairs)")
    return Verdict(status, "paired t", effect, ci, detail)


def ordering(cells: list[CellStats], direction: str, level: float = 0.95) -> Verdict:
    """Claim that ``cells`` strictly increase/decrease in order: a Bonferroni-corrected :func:`difference` (Welch, or
    paired over the same runs) per adjacent pair."""
    _check("direction", direction, _DIRECTIONS, level)
    if len(cells) < 2:
        raise ValueError(f"ordering needs at least 2 cells, got {len(cells)}")
    pair_level = 1.0 - (1.0 - level) / (len(cells) - 1)
    # Each gap is oriented so that a positive value agrees with the claim: later − earlier when increasing.
    pairs = [
        difference(nxt, cur, ">", pair_level) if direction == "increasing" else difference(cur, nxt, ">", pair_level)
        for cur, nxt in zip(cells[:-1], cells[1:], strict=True)
    ]
    statuses = [p.status for p in pairs]
    if all(s == "holds" for s in statuses):
        status = "holds"
    elif "contradicted" in statuses:
        status = "contradicted"
    else:
        status = "inconclusive"
    i = min(range(len(pairs)), key=lambda j: (math.isnan(pairs[j].effect), pairs[j].effect))
    op = "<" if direction == "increasing" else ">"
    test = " / ".join(sorted({p.test for p in pairs}, reverse=True))  # "Welch t", "paired t" or both
    links = ", ".join(f"{j}{op}{j + 1} {s}" for j, s in enumerate(statuses))
    detail = (
        f"{direction} over {len(cells)} cells: {links}; smallest gap ({i}→{i + 1}) = {_fmt(pairs[i].effect)} "
        f"{_fmt_ci(pairs[i].ci)} ({test} per pair, Bonferroni level {pair_level:.4g})"
    )
    return Verdict(status, f"{test} (Bonferroni)", pairs[i].effect, pairs[i].ci, detail)


def _satterthwaite_df(terms: list[float], dfs: list[int]) -> float:
    """Welch–Satterthwaite df of a sum of independent variance terms ``terms`` with ``dfs`` df each (zeros skipped)."""
    denom = sum(v * v / d for v, d in zip(terms, dfs, strict=True) if v > 0)
    return sum(terms) ** 2 / denom


def trend(x: list[float], cells: list[CellStats], direction: str, level: float = 0.95) -> Verdict:
    """Claim of a monotone trend of the cell means along ``x``: OLS slope, judged by the wider of the seed-SD
    (Welch–Satterthwaite) and the lack-of-fit (residual, t(k − 2)) intervals (see the module docstring for why)."""
    _check("direction", direction, _DIRECTIONS, level)
    if len(x) != len(cells):
        raise ValueError(f"x and cells must have the same length, got {len(x)} and {len(cells)}")
    xs = [float(v) for v in x]
    if not all(math.isfinite(v) for v in xs):
        raise ValueError(f"x must be finite, got {x!r}")
    if len(xs) >= 2 and len(set(xs)) < 2:
        raise ValueError(f"x needs at least two distinct values, got {x!r}")
    k = len(xs)
    why = None if k >= 3 else f"{k} points leave no df for a slope interval (need ≥ 3)"
    for j, c in enumerate(cells):
        why = why or _no_interval(c, f"cell {j}")
    if why:
        return Verdict("inconclusive", "OLS trend", _NAN, _NO_CI, f"{direction} trend: no interval, {why}")
    xbar = sum(xs) / k
    sxx = sum((xi - xbar) ** 2 for xi in xs)
    coef = [(xi - xbar) / sxx for xi in xs]  # slope = Σ coef_i · mean_i
    means = [c.mean for c in cells]
    slope = sum(ci * m for ci, m in zip(coef, means, strict=True))
    ybar = sum(means) / k
    resid = [m - ybar - slope * (xi - xbar) for m, xi in zip(means, xs, strict=True)]
    se2 = [c.std**2 / c.n for c in cells]  # squared standard error of each cell mean
    chi2 = sum(r * r / v if v > 0 else (0.0 if r == 0 else math.inf) for r, v in zip(resid, se2, strict=True))
    chi2_dof = chi2 / (k - 2)
    # Reading 1: the cells' own SDs (Welch–Satterthwaite df of the contrast's variance).
    terms = [ci * ci * v for ci, v in zip(coef, se2, strict=True)]
    var_sd = sum(terms)
    df_sd = _satterthwaite_df(terms, [c.n - 1 for c in cells]) if var_sd > 0 else math.nan
    half_sd = _t_quantile(level, df_sd) * math.sqrt(var_sd) if var_sd > 0 else 0.0
    # Reading 2: the scatter of the means about the line (lack of fit), k − 2 df.
    half_res = _t_quantile(level, k - 2) * math.sqrt(sum(r * r for r in resid) / (k - 2) / sxx)
    half = max(half_sd, half_res)
    ci = (slope - half, slope + half)
    status = _side(ci, 0.0, direction == "increasing")
    if half_res > half_sd:
        how = f"lack of fit sets the width: residual scatter, t df {k - 2}"
    else:
        how = "seed SDs set the width: Welch–Satterthwaite df " + (f"{df_sd:.1f}" if var_sd > 0 else "— (zero spread)")
    detail = (f"slope = {_fmt(slope)} {_fmt_ci(ci)}, claim {direction}: {status} (OLS trend, {k} points, "
              f"χ²/dof {_fmt(chi2_dof)} about the line; {how}; level {level:g})")
    return Verdict(status, "OLS trend", slope, ci, detail)


def within(a: CellStats, target: float, tol: float, level: float = 0.95, exact: bool = False) -> Verdict:
    """Claim that ``a`` equals ``target`` ± ``tol``: by its t interval (holds only inside the band, contradicted only
    wholly outside it), or directly if ``exact`` — deterministic values only: ``exact`` on n ≥ 2 seeds with std > 0
    raises ValueError."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if not (math.isfinite(target) and tol >= 0):
        raise ValueError(f"target must be finite and tol ≥ 0, got target={target!r}, tol={tol!r}")
    effect = a.mean - target
    band = f"{_fmt(target)} ± {_fmt(tol)}"
    if exact and a.n >= 2 and a.std > 0:
        raise ValueError(
            f"within: exact=True judges one deterministic value, but this cell has n = {a.n} seeds with std "
            f"{_fmt(a.std)} > 0, an empirical quantity: judge it by its interval (drop exact: true from the claim's "
            "check)")
    if exact:
        if not math.isfinite(a.mean):
            detail = f"no finite value to compare with {band} (exact vs tolerance)"
            return Verdict("inconclusive", "exact vs tolerance", effect, _NO_CI, detail)
        status = "holds" if abs(effect) <= tol else "contradicted"
        detail = f"value − target = {_fmt(effect)}, band {band}: {status} (exact vs tolerance, n {a.n})"
        return Verdict(status, "exact vs tolerance", effect, (effect, effect), detail)
    why = _no_interval(a, "the cell")
    if why:
        detail = f"mean − target = {_fmt(effect)}, no interval: {why} (band {band})"
        return Verdict("inconclusive", "interval vs tolerance", effect, _NO_CI, detail)
    half = _t_quantile(level, a.n - 1) * a.std / math.sqrt(a.n)
    ci = (effect - half, effect + half)
    if -tol <= ci[0] and ci[1] <= tol:
        status = "holds"
    elif ci[1] < -tol or ci[0] > tol:
        status = "contradicted"
    else:
        status = "inconclusive"
    detail = f"mean − target = {_fmt(effect)} {_fmt_ci(ci)}, band {band}: {status} (t, level {level:g}, n {a.n})"
    return Verdict(status, "interval vs tolerance", effect, ci, detail)


def spread_ratio(a: CellStats, b: CellStats, sign: str, level: float = 0.95) -> Verdict:
    """Claim that a's seed variance is ``sign`` (< or >) b's: F interval of std_a²/std_b² against 1 (n ≥ 3 per
    group, else inconclusive with the reason)."""
    _check("sign", sign, _SIGNS, level)
    why = _no_interval(a, "a") or _no_interval(b, "b") or next(
        (f"{label} has n = {c.n} < 3 seeds (an F test on 1 df per group cannot decide; need n ≥ 3 per group)"
         for label, c in (("a", a), ("b", b)) if c.n < 3), None) or ("both stds are 0" if a.std == b.std == 0 else None)
    if why:
        return Verdict("inconclusive", "F test", _NAN, _NO_CI, f"var(a)/var(b): no interval, {why} (n {a.n}/{b.n})")
    if b.std == 0:
        ratio, ci = math.inf, (math.inf, math.inf)
    else:
        ratio, d1, d2, alpha = a.std**2 / b.std**2, a.n - 1, b.n - 1, 1.0 - level
        ci = (ratio / float(special.fdtri(d1, d2, 1 - alpha / 2)), ratio / float(special.fdtri(d1, d2, alpha / 2)))
    status = _side(ci, 1.0, sign == ">")
    detail = (
        f"var(a)/var(b) = {_fmt(ratio)} {_fmt_ci(ci)}, claim {sign} 1: {status} "
        f"(F test, df {a.n - 1}/{b.n - 1}, level {level:g})"
    )
    return Verdict(status, "F test", ratio, ci, detail)
