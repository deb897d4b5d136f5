"""Command line of the ODE convergence analysis on trained checkpoints (fqo Table 6 / Figure 7, Sec. 4.4).

    python -m oscrepro.analysis.ode_convergence ckpt=results/runs/fqo/lm_tinystories/<run-id>
    python -m oscrepro.analysis.ode_convergence ckpt=[<run d_osc=2>,<run d_osc=8>,<run d_osc=32>] out=results/ode
    python -m oscrepro.analysis.ode_convergence ckpt=<run> n_seqs=20 sweep=null inference=true inference_batches=4

Arguments are ``key=value`` (OmegaConf dotlist). ``ckpt`` is a run directory or a checkpoint file, or a list of
them. Every ODE constant defaults to the Table 6 spec (``conf/table/fqo/table6.yaml``: n_seqs, n_inits, t_max,
rtol, atol, method, seed, the three thresholds, scipy_subset, sequential, sweep.t_maxes/method), so the CLI and
the table run the same protocol. Extra keys: ``sweep`` (a list of T_max for Figure 7(a), run on the model with
d_osc = sweep_d_osc, or the first; ``null`` to skip), ``inference`` (also evaluate validation PPL with the
integrated fixed point, :func:`~oscrepro.analysis.ode_cli.ode_inference_ppl`), ``inference_batches``,
``inference_seeds``, ``inference_method``, ``threads`` (torch threads; default: the run's ``torch_threads``),
``out`` (directory for ``ode_convergence.json`` and ``fig7.png``; default: none written).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from oscrepro.analysis.checkpoints import first_val_inputs, load_run, num_threads
from oscrepro.analysis.ode_cli import ODE_KEYS, collect_problem, convergence_row, ode_inference_ppl, scipy_agreement
from oscrepro.analysis.ode_convergence import plot_figure7, tmax_sweep
from oscrepro.tables.spec import CONF_DIR

SPEC = CONF_DIR / "table" / "fqo" / "table6.yaml"


def defaults(spec_path: Path = SPEC) -> dict[str, Any]:
    """The ODE protocol of the Table 6 spec, flattened into CLI defaults."""
    ana = OmegaConf.to_container(OmegaConf.load(spec_path), resolve=True)["analysis"]
    out: dict[str, Any] = {k: ana[k] for k in (*ODE_KEYS, "n_seqs", "scipy_subset", "sequential")}
    out.update(sweep=list(ana["sweep"]["t_maxes"]), sweep_method=ana["sweep"]["method"],
               sweep_d_osc=int(ana["sweep"]["d_osc"]))
    out.update(ckpt=None, out=None, threads=None, inference=False, inference_batches=2,
               inference_seeds=[0, 1, 2, 3, 4], inference_method="rk45")
    return out


def parse_args(argv: list[str]) -> dict[str, Any]:
    """``key=value`` arguments over :func:`defaults`; unknown keys are an error that lists the valid ones."""
    base = defaults()
    args = OmegaConf.to_container(OmegaConf.from_dotlist(argv), resolve=True)
    unknown = sorted(set(args) - set(base))
    if unknown:
        raise SystemExit(f"unknown argument(s) {unknown}; valid: {', '.join(sorted(base))}")
    base.update(args)
    if not base["ckpt"]:
        raise SystemExit("ckpt=<run dir or checkpoint> (or ckpt=[a,b,...]) is required")
    if isinstance(base["ckpt"], str):
        base["ckpt"] = [base["ckpt"]]
    return base


def analyse(args: dict[str, Any]) -> dict[str, Any]:
    """Table 6 rows (one per checkpoint), the Figure 7(a) sweep and optionally ODE-inference perplexities."""
    ode = {k: args[k] for k in ODE_KEYS}
    rows, problems, inference = [], {}, {}
    for path in args["ckpt"]:
        run = load_run(path)
        with num_threads(args["threads"] if args["threads"] is not None else run.cfg.get("torch_threads")):
            problem = collect_problem(run.model, first_val_inputs(run, int(args["n_seqs"])))
            row = convergence_row(problem, sequential=bool(args["sequential"]), **ode)
            if int(args["scipy_subset"]) > 0:
                row.update(scipy_agreement(problem, int(args["scipy_subset"]), fast_method=ode["method"], **ode))
            if args["inference"]:
                batches = list(run.val_batches(args["inference_batches"]))
                inference[str(run.run_dir)] = ode_inference_ppl(
                    run.model, batches, t_max=float(args["t_max"]), method=args["inference_method"],
                    seeds=args["inference_seeds"], sequential=bool(args["sequential"]), rtol=ode["rtol"],
                    atol=ode["atol"])
        row["run_dir"] = str(run.run_dir)
        rows.append(row)
        problems[str(run.run_dir)] = problem
    sweep_rows: list[dict[str, Any]] = []
    if args["sweep"]:
        target = next((r for r in rows if r["d_osc"] == args["sweep_d_osc"]), rows[0])
        problem = problems[target["run_dir"]]
        kw = {k: v for k, v in ode.items() if k not in ("t_max", "method")}
        sweep_rows = tmax_sweep(problem.coupling, problem.anchors, args["sweep"], method=args["sweep_method"], **kw)
    return {"args": args, "rows": rows, "sweep": sweep_rows, "inference": inference}


def report(result: dict[str, Any]) -> str:
    """Plain-text summary of :func:`analyse`'s result."""
    lines = [f"{'d_osc':>5} {'conv %':>8} {'antip %':>8} {'degen %':>8} {'nfev/tok':>9} {'mean err':>9} "
             f"{'seq gain':>8} {'scipy ok %':>10}  run"]
    for r in result["rows"]:
        lines.append(f"{r['d_osc']:>5} {100 * r['frac_converged']:>8.2f} {100 * r['frac_apparent_antipodal']:>8.2f} "
                     f"{100 * r['frac_degenerate']:>8.2f} {r['nfev_per_token']:>9.1f} {r['mean_err']:>9.2e} "
                     f"{r.get('sequential_gain', float('nan')):>8.2f} "
                     f"{100 * r.get('agree_verdict_frac', float('nan')):>10.2f}  {r['run_dir']}")
    for s in result["sweep"]:
        lines.append(f"sweep d_osc={s['d_osc']} T_max={s['t_max']:g} ({s['method']}): "
                     f"converged {100 * s['frac_converged']:.2f} %")
    for run_dir, conds in result["inference"].items():
        for c in conds:
            lines.append(f"inference {Path(run_dir).name} {c['condition']:<15} seed={c['seed']}: "
                         f"PPL {c['ppl']:.4f} (Δ {c['delta']:+.4f})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point of ``python -m oscrepro.analysis.ode_convergence``; returns the result dict."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    result = analyse(args)
    print(report(result), flush=True)
    if args["out"]:
        out = Path(args["out"])
        out.mkdir(parents=True, exist_ok=True)
        (out / "ode_convergence.json").write_text(json.dumps(result, indent=2, default=float))
        plot_figure7(result["sweep"], result["rows"], out / "fig7.png")
        print(f"wrote {out / 'ode_convergence.json'} and {out / 'fig7.png'}", flush=True)
    return result


if __name__ == "__main__":
    main()
