"""Time the scipy RK45 reference against the batched torch paths for the fqo ODE check (Sec. 4.4).

Same random fqo tokens (softplus(N(0,1)) couplings scaled by --coupling-scale, causal, anchors
uniform on the sphere) and the same z(0) for every method, in one process. Prints per d_osc the
integration wall time, the speed-up over scipy, the Table-6 fractions, their absolute differences
in percentage points, and the share of (token, init) rows whose verdict differs.

Timing protocol: torch is pinned to --threads (default 1, like scipy) so the speed-up is
core-for-core; scipy runs once, the torch paths run --repeats times and the median is reported.

    python scripts/ode_speed.py --tokens 2000 --d-osc 2 8 32
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oscrepro.analysis.ode_convergence import convergence_table, random_problem  # noqa: E402

FRACS = ("frac_converged", "frac_apparent_antipodal", "frac_degenerate")
VERDICTS = ("converged", "apparent_antipodal", "degenerate", "intermediate")


def _verdict_codes(table: dict) -> torch.Tensor:
    return sum(i * table[k].long() for i, k in enumerate(VERDICTS))


def run(args: argparse.Namespace) -> list[dict]:
    torch.set_num_threads(args.threads)
    per_batch = args.heads * args.seq_len
    batch = max(1, args.tokens // per_batch)
    rows = []
    for d in args.d_osc:
        coupling, anchors = random_problem(
            batch,
            args.heads,
            args.seq_len,
            d,
            args.coupling_scale,
            causal=True,
            seed=args.seed,
            coupling_seed=args.seed,
        )
        common = dict(n_inits=args.n_inits, t_max=args.t_max, seed=args.seed, return_arrays=True)
        ref = convergence_table(coupling, anchors, method="scipy", **common)
        row = {
            "d_osc": d,
            "n_tokens": ref["n_tokens"],
            "n_solves": ref["n_solves"],
            "scipy_s": ref["wall_s"],
            "scipy_nfev_per_token": ref["nfev_per_token"],
            **{f"scipy_{k}": ref[k] for k in FRACS},
        }
        for method in ("batched", "batched_rd", "closed_form"):
            runs = [convergence_table(coupling, anchors, method=method, **common) for _ in range(args.repeats)]
            fast = runs[0]
            sec = statistics.median(r["wall_s"] for r in runs)
            row[f"{method}_s"] = sec
            row[f"{method}_speedup"] = ref["wall_s"] / sec
            row[f"{method}_max_pp_diff"] = max(100 * abs(fast[k] - ref[k]) for k in FRACS)
            row[f"{method}_row_verdict_mismatch"] = float((_verdict_codes(fast) != _verdict_codes(ref)).double().mean())
            row[f"{method}_max_err_diff"] = float((fast["err"] - ref["err"]).abs().max())
            if fast["nfev"] is not None:
                row[f"{method}_nfev_equal_frac"] = float((fast["nfev"] == ref["nfev"]).double().mean())
            row.update({f"{method}_{k}": fast[k] for k in FRACS})
        rows.append(row)
        print(
            f"d_osc={d:3d} solves={row['n_solves']} scipy {row['scipy_s']:.2f}s "
            f"(nfev/solve {row['scipy_nfev_per_token']:.1f}) | "
            + " | ".join(
                f"{m} {row[m + '_s']:.4f}s x{row[m + '_speedup']:.0f} dpp={row[m + '_max_pp_diff']:.3f} "
                f"rows!={row[m + '_row_verdict_mismatch']:.4f}"
                + (f" nfev=={row[m + '_nfev_equal_frac']:.4f}" if m + "_nfev_equal_frac" in row else "")
                for m in ("batched", "batched_rd", "closed_form")
            )
            + " | "
            + " ".join(f"{k[5:]}={100 * row['scipy_' + k]:.2f}%" for k in FRACS),
            flush=True,
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=2000)
    p.add_argument("--d-osc", type=int, nargs="+", default=[2, 8, 32])
    p.add_argument("--n-inits", type=int, default=5, help="z(0) draws per token (Table 6: 5)")
    p.add_argument("--t-max", type=float, default=30.0)
    p.add_argument("--coupling-scale", type=float, default=0.1)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", type=Path, default=None, help="optional path for the rows as JSON")
    args = p.parse_args()
    rows = run(args)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
