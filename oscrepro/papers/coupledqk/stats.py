"""Post hooks of the coupledqk runs tables: the Sec. 3.1 two-sample t-test (``mlp_only.yaml``) and Table 5's
"Coupled QK vs. Standard" relative-change row (``table5.yaml``).

The engine calls a post hook as ``fn(spec=, cells=, out_dir=, budget=, results_dir=, **post)``, where ``post`` is
the spec's ``post:`` block without ``_target_``, and ``cells[(row index, column name)]`` is an aggregated
:class:`~oscrepro.tables.aggregate.Cell` whose ``values`` are the finished seeds' metric values in seed order. A
hook returns note lines for the rendered table's header.

Every verdict word in those notes ("holds", "contradicted", "inconclusive") comes from the claims engine
(:mod:`oscrepro.claims.verdict`, the rules CLAIMS.md uses), never from a point comparison here: a header that said
"holds (p = 0.082)" where the scoreboard says inconclusive was two verdict systems disagreeing. The hooks' own
numbers (means, stds, t, dof, p) are unchanged.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from oscrepro.claims import verdict as V
from oscrepro.tables.aggregate import Cell
from oscrepro.tables.spec import TableSpec


def welch_dof(s1: float, n1: int, s2: float, n2: int) -> float:
    """Welch-Satterthwaite degrees of freedom of two samples with standard deviations s1, s2 (ddof 1)."""
    v1, v2 = s1**2 / n1, s2**2 / n2
    return (v1 + v2) ** 2 / (v1**2 / (n1 - 1) + v2**2 / (n2 - 1))


def two_sample_ttest(a: list[float], b: list[float]) -> dict[str, dict[str, float]]:
    """Student's (pooled variance) and Welch's two-sample t-tests of ``a`` vs ``b`` (``scipy.stats.ttest_ind``).

    Returns ``{"student": {t, dof, p}, "welch": {t, dof, p}}``; NaNs when a sample has fewer than 2 values or
    both have zero variance (t undefined).
    """
    out = {}
    for name, equal_var in (("student", True), ("welch", False)):
        if min(len(a), len(b)) < 2:
            out[name] = {"t": math.nan, "dof": math.nan, "p": math.nan}
            continue
        res = stats.ttest_ind(a, b, equal_var=equal_var)
        out[name] = {"t": float(res.statistic), "dof": float(res.df), "p": float(res.pvalue)}
    return out


def ttest_from_stats(a: list[float], b: list[float]) -> dict[str, dict[str, float]]:
    """The same two tests from summary statistics ``[mean, std, n]`` (``scipy.stats.ttest_ind_from_stats``)."""
    (m1, s1, n1), (m2, s2, n2) = a, b
    n1, n2 = int(n1), int(n2)
    out = {}
    for name, equal_var in (("student", True), ("welch", False)):
        res = stats.ttest_ind_from_stats(m1, s1, n1, m2, s2, n2, equal_var=equal_var)
        dof = n1 + n2 - 2 if equal_var else welch_dof(s1, n1, s2, n2)
        out[name] = {"t": float(res.statistic), "dof": float(dof), "p": float(res.pvalue)}
    return out


def _row(spec: TableSpec, label: str) -> int:
    labels = [r.label for r in spec.rows]
    if label not in labels:
        raise ValueError(f"{spec.path}: post row {label!r} is not a row label; rows: {labels}")
    return labels.index(label)


def _sample_text(label: str, vals: list[float]) -> str:
    if not vals:
        return f"{label} n 0"
    std = f"{np.std(vals, ddof=1):.3f}" if len(vals) > 1 else "—"
    return f"{label} n {len(vals)}, mean {np.mean(vals):.3f}, std {std}"


def _tests_text(res: dict[str, dict[str, float]]) -> str:
    return "; ".join(f"{name.capitalize()} t = {r['t']:.3f}, dof {r['dof']:.2f}, p = {r['p']:.3g}"
                     for name, r in res.items())


def ttest_notes(spec: TableSpec, cells: dict[tuple[int, str], Cell], out_dir: Path, budget: str,
                results_dir: Path, a: str, b: str, column: str, a_first_seeds: int | None = None,
                b_first_seeds: int | None = None, paper: dict[str, Any] | None = None) -> list[str]:
    """Sec. 3.1 "MLP capacity analysis": two-sample t-tests of row ``a`` vs row ``b`` on ``column``.

    Keys of the spec's ``post:`` block:

    * ``a``, ``b``: row labels (e.g. ``MLP-Only`` and ``Hamiltonian (coupled)``);
    * ``column``: a column name (its per-seed values are tested; ``Cell.values``);
    * ``a_first_seeds`` / ``b_first_seeds`` (optional): also test with only the first k finished seeds of that
      row (the paper tested 10 MLP-Only seeds against 3 Hamiltonian seeds);
    * ``paper`` (optional): ``{a: [mean, std, n], b: [mean, std, n], p_below: <float>}``, the paper's summary
      statistics; the same two tests are recomputed from them, and checked against the claimed bound.

    Each test is Student's (pooled variance) and Welch's (unequal variances), two-sided.
    """
    col = next((c for c in spec.columns if c.name == column), None)
    if col is None:
        raise ValueError(f"{spec.path}: post column {column!r} is not a column; columns: "
                         f"{[c.name for c in spec.columns]}")
    va, vb = cells[(_row(spec, a), column)].values, cells[(_row(spec, b), column)].values
    notes = []
    subsets = [(None, None)]
    if a_first_seeds is not None or b_first_seeds is not None:
        subsets.append((a_first_seeds, b_first_seeds))
    for ka, kb in subsets:
        sa, sb = va[:ka] if ka else va, vb[:kb] if kb else vb
        which = ("all finished seeds" if (ka, kb) == (None, None) else
                 "first " + ", ".join(f"{k} seeds of {lab}" for k, lab in ((ka, a), (kb, b)) if k))
        notes.append(f"**Two-sample t-test, {col.label}, {a} vs {b} ({which}):** {_sample_text(a, sa)}; "
                     f"{_sample_text(b, sb)}. {_tests_text(two_sample_ttest(sa, sb))} (two-sided).")
    if paper:
        res = ttest_from_stats(paper["a"], paper["b"])
        (m1, s1, n1), (m2, s2, n2) = paper["a"], paper["b"]
        bound = paper.get("p_below")
        stated = "" if bound is None else f" The paper states p < {bound:g}."
        notes.append(f"**The paper's test from its summary statistics** (Sec. 3.1: {a} {m1} ± {s1}, n {int(n1)}; "
                     f"{b} {m2} ± {s2}, n {int(n2)}): {_tests_text(res)}.{stated}")
    return notes


def relative_change_notes(spec: TableSpec, cells: dict[tuple[int, str], Cell], out_dir: Path, budget: str,
                          results_dir: Path, baseline: str, candidate: str, columns: list[str],
                          paper: dict[str, float] | None = None) -> list[str]:
    """Table 5's last row: (candidate - baseline) / baseline of the column means, in percent: ours, the paper's
    printed row, and the paper's recomputed from the rows' paper means.

    Keys: ``baseline``, ``candidate`` (row labels), ``columns`` (names), optional ``paper`` (``{column:
    percent}``, the paper's printed row; Table 5 prints +10.3 % for OpenWebText where its means give +10.4 %).
    """
    rb, rc = _row(spec, baseline), _row(spec, candidate)
    parts = []
    for name in columns:
        label = next(c.label for c in spec.columns if c.name == name)
        ours = 100 * (cells[(rc, name)].mean - cells[(rb, name)].mean) / cells[(rb, name)].mean
        pb, pc = (spec.rows[i].paper.get(name) for i in (rb, rc))
        mean = (lambda v: float(v[0]) if isinstance(v, (list, tuple)) else float(v))
        printed = (paper or {}).get(name)
        ref = "—" if printed is None else f"{float(printed):+.1f} %"
        if pb is not None and pc is not None:
            ref += f"; from the paper's means {100 * (mean(pc) - mean(pb)) / mean(pb):+.1f} %"
        parts.append(f"{label} {'—' if math.isnan(ours) else f'{ours:+.1f} %'} (paper {ref})")
    return [f"**{candidate} vs. {baseline}** (relative change of the mean): " + "; ".join(parts)]


def _mean_std(vals: list[float]) -> tuple[float, float]:
    return float(np.mean(vals)) if vals else math.nan, float(np.std(vals, ddof=1)) if len(vals) > 1 else math.nan


def _cell_stats(vals: list[float]) -> V.CellStats:
    """The seeds of one cell as the claims engine reads a cell: mean, sample std (ddof 1), n."""
    mean, std = _mean_std(vals)
    return V.CellStats(mean, std, len(vals))


def claim_notes(spec: TableSpec, cells: dict[tuple[int, str], Cell], out_dir: Path, budget: str,
                results_dir: Path, column: str, below: list[list[str]], spread: dict[str, Any] | None = None
                ) -> list[str]:
    """Table 1's claims (Sec. 3.1) checked on this build's runs, so the rendered table says which hold.

    Keys of the spec's ``post:`` block:

    * ``column``: the column the claims are about (lower is better, e.g. perplexity);
    * ``below``: pairs ``[lower, higher]`` of row labels: the claim is mean(lower) < mean(higher), judged by the
      claims engine (:func:`oscrepro.claims.verdict.difference`: Welch's 95 % interval of lower − higher below 0
      holds, above 0 contradicts, else inconclusive); the note also gives Welch's two-sided p of the two samples;
    * ``spread`` (optional): ``{narrow: row, wide: row, factor: f}``: the paper's std(wide) ≈ f · std(narrow); the
      verdict is the engine's :func:`oscrepro.claims.verdict.spread_ratio` on var(narrow) < var(wide) (an F
      interval against 1: the engine has no test against f), with the std ratio and the paper's beside it.

    The paper's own numbers are printed beside ours for reference, without a verdict (the paper gives means and
    stds, not the seeds an interval needs).
    """
    labels = [r.label for r in spec.rows]
    vals = {lab: cells[(_row(spec, lab), column)].values for lab in labels}
    paper = {lab: spec.rows[i].paper.get(column) for i, lab in enumerate(labels)}
    notes = []
    for lo, hi in below:
        (m_lo, _), (m_hi, _) = _mean_std(vals[lo]), _mean_std(vals[hi])
        welch = two_sample_ttest(vals[lo], vals[hi])["welch"]["p"]
        verdict = V.difference(_cell_stats(vals[lo]), _cell_stats(vals[hi]), "<")
        pl, ph = paper[lo], paper[hi]
        ref = "" if pl is None or ph is None else f"; paper {pl[0]} vs {ph[0]}"
        notes.append(f"**Claim {lo} < {hi}, fixed-sample 95 % reading of this build's seeds:** {verdict.status} "
                     f"({m_lo:.2f} vs {m_hi:.2f}, Welch p = {welch:.2g}, n {len(vals[lo])} / {len(vals[hi])}{ref}; "
                     f"claims engine: {verdict.detail}). The verdict is the claims section's (group-sequential where "
                     "the decide planner added seeds).")
    if spread:
        narrow, wide, factor = spread["narrow"], spread["wide"], float(spread["factor"])
        (_, s_n), (_, s_w) = _mean_std(vals[narrow]), _mean_std(vals[wide])
        ratio = s_w / s_n if s_n > 0 else math.inf
        verdict = V.spread_ratio(_cell_stats(vals[narrow]), _cell_stats(vals[wide]), "<")
        pn, pw = paper[narrow], paper[wide]
        ref = "" if pn is None or pw is None else f"; paper {pw[1]} / {pn[1]} = {pw[1] / pn[1]:.1f}x"
        notes.append(f"**Claim std({wide}) > std({narrow}) (the paper: about {factor:g} x):** {verdict.status} at "
                     f"this budget (std {s_w:.2f} / {s_n:.2f} = {ratio:.2f}x{ref}; claims engine: {verdict.detail}); "
                     f"with {len(vals[narrow])} and {len(vals[wide])} seeds a std is itself uncertain by about ±50 %.")
    return notes
