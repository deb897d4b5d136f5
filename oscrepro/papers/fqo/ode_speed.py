"""fqo ODE integrators, speed and agreement: scipy's RK45 (the App. B protocol) against the batched torch paths.

Same random fqo tokens (softplus(N(0,1)) couplings times ``coupling_scale``, causal, anchors uniform on the
sphere) and the same z(0) for every method, in one process. Per d_osc: integration wall time, speed-up over
scipy, the Table 6 fractions, their largest difference in percentage points, and the share of (token, init) rows
whose verdict differs. Torch is pinned to ``threads`` (1, like scipy) so the speed-up is core for core; scipy runs
once, the torch paths ``repeats`` times and the median is reported. Built by
``python -m oscrepro.table fqo/ode_speed`` (spec ``conf/table/fqo/ode_speed.yaml``).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import torch

from oscrepro.papers.fqo.ode_convergence import convergence_table, random_problem
from oscrepro.tables.run_helpers import num_threads
from oscrepro.tables.values import MISSING

FRACS = ("frac_converged", "frac_apparent_antipodal", "frac_degenerate")
VERDICTS = ("converged", "apparent_antipodal", "degenerate", "intermediate")
METHODS = ("batched", "batched_rd", "closed_form")


def _verdict_codes(table: dict) -> torch.Tensor:
    return sum(i * table[k].long() for i, k in enumerate(VERDICTS))


def speed_rows(d_oscs: list[int], tokens: int, n_inits: int, t_max: float, coupling_scale: float, heads: int,
               seq_len: int, seed: int, repeats: int) -> list[dict[str, Any]]:
    """One row per (d_osc, method): wall time vs scipy and the agreement of the verdicts."""
    rows = []
    batch = max(1, tokens // (heads * seq_len))
    for d in d_oscs:
        coupling, anchors = random_problem(batch, heads, seq_len, d, coupling_scale, causal=True, seed=seed,
                                           coupling_seed=seed)
        common = dict(n_inits=n_inits, t_max=t_max, seed=seed, return_arrays=True)
        ref = convergence_table(coupling, anchors, method="scipy", **common)
        for method in METHODS:
            runs = [convergence_table(coupling, anchors, method=method, **common) for _ in range(repeats)]
            fast, sec = runs[0], statistics.median(r["wall_s"] for r in runs)
            rows.append({
                "d_osc": d, "method": method, "solves": ref["n_solves"],
                "scipy s": round(ref["wall_s"], 3), "method s": round(sec, 4),
                "speed-up": round(ref["wall_s"] / sec, 1),
                "max Δ fraction (pp)": round(max(100 * abs(fast[k] - ref[k]) for k in FRACS), 4),
                "rows with another verdict": round(float((_verdict_codes(fast) != _verdict_codes(ref))
                                                         .double().mean()), 5),
                "max abs err diff": float((fast["err"] - ref["err"]).abs().max()),  # spec formats: .1e
                "nfev equal": (MISSING if fast["nfev"] is None
                               else round(float((fast["nfev"] == ref["nfev"]).double().mean()), 4)),
                "scipy converged (%)": round(100 * ref["frac_converged"], 2),
            })
            print(f"[fqo/ode_speed] d_osc={d} {method}: x{rows[-1]['speed-up']}", flush=True)
    return rows


def fqo_ode_speed(out_dir: Path, budget: str, results_dir: Path, d_oscs: list[int], tokens: int, n_inits: int,
                  t_max: float, coupling_scale: float, heads: int, seq_len: int, seed: int, repeats: int,
                  threads: int) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """Analysis adapter: the speed table plus a note on the protocol."""
    with num_threads(threads):
        rows = speed_rows(d_oscs, tokens, n_inits, t_max, coupling_scale, heads, seq_len, seed, repeats)
    notes = [f"**Protocol:** {tokens} random causal fqo tokens ({heads} heads × {seq_len} positions, coupling "
             f"scale {coupling_scale}), {n_inits} z(0) per token, T_max={t_max:g}, torch threads {threads} (scipy "
             f"is single-threaded); scipy once, each torch path {repeats}× (median). Speed-ups are ratios measured "
             "in one process, not bare seconds to compare across machines.",
             "**Paper:** App. B integrates with scipy RK45; it gives no timings (this table checks our fast paths)."]
    return list(rows[0]), rows, notes
