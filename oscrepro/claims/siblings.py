"""The level of a claim whose cells gained seeds for another claim's look (a *sibling* of a decided claim).

When the decide planner raises a table's seeds for one claim, every other claim on the same cells (its siblings:
Table 12's layer-2 rank claim beside the mean-rank one, fqo Table 6's convergence claims beside sequential init) is
judged again on more seeds. Its verdict is then the test on all of its seeds, which supersedes the one at the spec's
count. Were the raise independent of the sibling's own data, that one test at the fixed 95 % level would keep its
error rate; but the claim that caused the raise reads the same runs, so the raise may depend on the sibling's data,
and the sibling has in effect been looked at twice. So a sibling any of whose cells has more seeds than its spec's
count is judged at the level the group-sequential design (:mod:`oscrepro.claims.sequential`) gives the look its
largest cell's seed count has reached (one raised cell already changed the claim's data), over the schedule the
planner would plan for it (``plan_looks(base, cap)``): the stricter level of a later look. What that guarantees: a
false verdict at most α_k (the look's share) when the raise did not depend on its data, and at most 0.05 + α_k in
the worst case where it depended on it wholly (its first look was at the fixed level, not the design's first; e.g.
0.05 + 0.0102 at look 2 of [3, 5, 8, 10]). A sibling that the planner then takes up itself starts its own design at
its current seed count (:mod:`oscrepro.claims.candidates`).

The *base* count is the spec's own, without the planner's raises: the seeds of the claim's rows for a runs table
(a row's own lower ``seeds`` counted), the adapter's own seed or trial count for an analysis table that trains or
times its own, and the source rows' spec count for an analysis that reads another table's seeds (coupledqk Table 12
reads Table 1's LMs). None when it cannot be said (the claim is then judged at its fixed level).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from oscrepro.claims import sequential as S
from oscrepro.claims.reach import DEFAULT_CAP, TRIAL_CAP_FACTOR, source_rows
from oscrepro.runs.compose import CONF_DIR
from oscrepro.tables.spec import SEEDS_ARG, TRIALS_ARG, SpecError, TableSpec, load_spec


def _runs_base(spec: TableSpec, budget: str, rows: list[str]) -> int | None:
    """The spec's seed count at ``budget`` over ``rows`` (the smallest, a row's own ``seeds`` counted), without
    the planner's raises; None when a row is not in the spec or the budget has no count."""
    if budget not in spec.seeds:
        return None
    labels = [r.label for r in spec.rows]
    if any(r not in labels for r in rows):
        return None
    n = int(spec.seeds[budget])
    return min((min(n, int(spec.rows[labels.index(r)].seeds.get(budget, n))) for r in rows), default=None)


def base_count(spec: TableSpec, budget: str, rows: list[str], results: Path, conf_dir: Path = CONF_DIR
               ) -> tuple[int, bool] | None:
    """(the spec's own count of the claim's seeds or trials at ``budget``, whether they are trials); None when it
    cannot be said (module docstring)."""
    if spec.kind == "runs":
        n = _runs_base(spec, budget, rows)
        return (n, False) if n else None
    try:
        if spec.analysis.get(TRIALS_ARG):
            return spec.analysis_trials(budget, decided=False), True
        if spec.analysis.get(SEEDS_ARG):
            return spec.analysis_seeds(budget, decided=False), False
    except SpecError:
        return None
    try:
        source = source_rows(spec, budget, results, rows)
    except Exception as err:  # noqa: BLE001  said; its claims keep the fixed level (one unreadable plan stops none)
        print(f"[claims] {spec.key}: the source rows behind {rows} cannot be read here ({err}); its claims are "
              "judged at their fixed level", file=sys.stderr, flush=True)
        return None
    if source is None:
        return None
    n = _runs_base(load_spec(source[0], conf_dir), budget, source[1])
    return (n, False) if n else None


def sibling_level(table: str, budget: str, rows: list[str], n: int, results: Path, conf_dir: Path = CONF_DIR
                  ) -> tuple[float, str] | None:
    """The design's level for a claim on ``rows`` of ``table`` whose largest cell has ``n`` seeds (or trials), and
    the words that say why; None when ``n`` is not above the spec's own count (the fixed level stands)."""
    base = base_count(load_spec(table, conf_dir), budget, rows, results, conf_dir)
    if base is None or not math.isfinite(n) or base[0] < 2 or n <= base[0]:
        return None
    count, trials = base
    cap = TRIAL_CAP_FACTOR * count if trials else DEFAULT_CAP
    schedule = S.plan_looks(count, max(cap, n))
    k = max(i for i, m in enumerate(schedule) if m <= n)
    level = S.look_levels(schedule)[k]
    what = "trials" if trials else "seeds"
    return level, (f"judged at level {level:.4g}, look {k + 1} of the design {schedule} over its {what}: its cells "
                   f"have up to n = {n}, above the spec's {count} (raised for another claim's look), so it has been "
                   f"looked at more than once")
