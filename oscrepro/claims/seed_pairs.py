"""Seed-matched pairs of two models' runs (common random numbers), declared by a claim's spec.

The verdicts pair two cells only when they were measured on the same runs (:func:`oscrepro.claims.verdict.
paired_differences`): seeds of two different models are independent draws as far as the statistics know, and
pairing them because the numbers then look tighter would be an analysis chosen after the fact. Some designs pair
them by construction: fqo App. C's L3/L4 rows add a parameter initialised at the identity (δ = 0, β = 1, created
without drawing from the random stream), so at one seed the variant and the d_osc = 2 baseline start as the same
function from the same weights and see the same batches, and differ only by what the added parameter learns. Such
runs are *common random numbers* (Law & Kelton, *Simulation Modeling and Analysis*, ch. 11): the per-seed difference
removes the seed-to-seed spread both share (fqo App. C at cpu: ±2 PPL across seeds, a few tenths within a pair).

A claim declares it in its check::

    check: {kind: difference, a: ..., b: ..., sign: ">", margin: -1.0,
            pair_seeds: {from_look: 3, why: "<why these runs are seed-matched>"}}

and is then judged by the paired t over the seeds both cells hold (each run's seed read from its record,
``results/runs/<paper>/<experiment>/<run id>/config.yaml``), never by a silent fallback: cells whose seeds differ
raise :class:`~oscrepro.claims.scoreboard.ClaimError`. The paired t is valid for independent pairs whatever their
correlation; what must not happen is choosing it at a look already judged by Welch, which would be two tests at one
look. ``from_look`` says from which look of the claim's group-sequential design (:mod:`oscrepro.claims.sequential`)
the pairing applies: the looks taken before it stay judged, in the ledger, as they were (Welch), and each later look
spends its own alpha on the paired test only. A fixed-sample verdict (no ledger) is paired.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from oscrepro.claims.verdict import CellStats

FIELD = "pair_seeds"  # the check's field


def declared(check: dict[str, Any]) -> dict[str, Any] | None:
    """The check's seed pairing (``{from_look, why}``), or None."""
    return check.get(FIELD)


def validate(check: dict[str, Any]) -> str | None:
    """Why the check's ``pair_seeds`` is malformed (None when it is absent or well formed)."""
    spec = declared(check)
    if spec is None:
        return None
    if check.get("kind") != "difference":
        return f"{FIELD} pairs the two cells of a difference check, not kind {check.get('kind')!r}"
    if not isinstance(spec, dict) or set(spec) != {"from_look", "why"}:
        return f"{FIELD}={spec!r}; write it as {{from_look: <look number, 1 = from the start>, why: \"...\"}}"
    if not (isinstance(spec["from_look"], int) and spec["from_look"] >= 1):
        return f"{FIELD}.from_look={spec['from_look']!r}; a look number ≥ 1"
    if not (isinstance(spec["why"], str) and spec["why"].strip()):
        return f"{FIELD}.why is empty: say why the two cells' runs are seed-matched"
    return None


def applies(check: dict[str, Any], look: int | None) -> bool:
    """Whether the check pairs by seed at ``look`` (1-based; None: a fixed-sample verdict, paired)."""
    spec = declared(check)
    return spec is not None and (look is None or look >= int(spec["from_look"]))


@functools.cache
def _seed(results: Path, rid: str) -> int:
    """One run's seed from its record (cached: a run id names one config, and the planner asks once per look)."""
    found = sorted(results.glob(f"runs/*/*/{rid}/config.yaml"))
    if not found:
        raise FileNotFoundError(f"run {rid}: no record under {results / 'runs'} to read its seed from")
    return int(OmegaConf.load(found[0])["seed"])


def run_seeds(results: Path, run_ids: list[str]) -> dict[str, int]:
    """``{run id: seed}`` from the runs' records under ``results/runs``; a run without a record raises
    FileNotFoundError naming it (its seed cannot be guessed)."""
    return {rid: _seed(Path(results), rid) for rid in run_ids}


def by_seed(cell: CellStats, seeds: dict[str, int]) -> CellStats:
    """``cell`` with its per-run values keyed by seed (``seed 3``) instead of run id, so that two models' cells of
    the same seeds pair (:func:`oscrepro.claims.verdict.paired_differences`)."""
    return CellStats(cell.mean, cell.std, cell.n, tuple((f"seed {seeds[u]}", v) for u, v in cell.units))


def seed_matched(a: CellStats, b: CellStats, results: Path) -> tuple[CellStats, CellStats] | str:
    """(a, b) keyed by seed, or why they cannot be paired (no per-run values, or not the same seeds)."""
    if not a.units or not b.units:
        return "a cell keeps no per-run values (rebuild its table: its csv then carries them)"
    seeds = run_seeds(results, [u for u, _ in a.units + b.units])
    sa, sb = by_seed(a, seeds), by_seed(b, seeds)
    ka, kb = sorted(u for u, _ in sa.units), sorted(u for u, _ in sb.units)
    if ka != kb or len(set(ka)) != len(ka):
        return f"the cells hold different seeds (a: {ka}, b: {kb})"
    return sa, sb
