"""``python -m oscrepro.runs``: look at the run records of a results dir (``make runs ARGS='ls ...'``).

    python -m oscrepro.runs ls --experiment 'fqo/*' --status ok --where mechanism=fqo
    python -m oscrepro.runs show 3fa9c2
    python -m oscrepro.runs compare 3fa9c2 81be07
    python -m oscrepro.runs agg --experiment fqo/sva --budget cpu      # mean ± std over the seeds of each config

``ls`` prints one line per run: id, status, experiment, budget, seed, key metrics and the overrides that differ from
the experiment's defaults at the run's budget. ``agg`` groups runs that differ only in their seed. Filters:
``--experiment`` (a glob), ``--status``, ``--budget``, ``--where key=value`` (dotted keys of the resolved config,
``mechanism`` for the attention choice; repeatable). Exit status 2 on bad input (an unknown or ambiguous run id).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from oscrepro.runs import catalog as C
from oscrepro.runs.record import results_root


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def _metrics_text(metrics: dict) -> str:
    shown = [k for k in C.KEY_METRICS if k in metrics][:3]
    return " ".join(f"{k}={_fmt(metrics[k])}" for k in shown)


def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--experiment", default=None, help="experiment name glob, e.g. 'fqo/*'")
    p.add_argument("--status", default=None, choices=("ok", "diverged", "failed", "running"))
    p.add_argument("--budget", default=None, choices=("smoke", "cpu", "paper"))
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="config value to match (dotted key; repeatable)")


def cmd_ls(args: argparse.Namespace, results: Path) -> int:
    runs = C.select(C.scan(results), args.experiment, args.status, args.budget, C.parse_where(args.where))
    for r in runs:
        over = C.overrides(r, results) if not args.no_overrides else []
        over_text = "(experiment no longer composes)" if over is None else " ".join(over)
        print(f"{r.id}  {r.status.get('status', '?'):<8} {r.experiment:<28} {r.budget:<5} seed={r.seed!s:<3} "
              f"{_metrics_text(r.metrics):<40} {over_text}".rstrip())
    print(f"{len(runs)} run(s) under {C.runs_root(results)}", file=sys.stderr)
    return 0


def cmd_show(args: argparse.Namespace, results: Path) -> int:
    r = C.find(results, args.run)
    over = C.overrides(r, results)
    print(f"run {r.id}: {r.dir}")
    print(f"experiment {r.experiment}, budget {r.budget}, seed {r.seed}")
    print("overrides vs the experiment's defaults: "
          + ("(experiment no longer composes)" if over is None else " ".join(over) or "none"))
    print("status: " + json.dumps(r.status, indent=1, sort_keys=True))
    print("metrics: " + json.dumps(r.metrics, indent=1, sort_keys=True))
    return 0


def cmd_compare(args: argparse.Namespace, results: Path) -> int:
    a, b = C.find(results, args.a), C.find(results, args.b)
    print(f"A = {a.experiment}/{a.id}   B = {b.experiment}/{b.id}")
    cfg = C.diff(a.flat, b.flat)
    print(f"config: {len(cfg)} key(s) differ" + (":" if cfg else ""))
    for k, (va, vb) in cfg.items():
        print(f"  {k}: {C._short(va)} | {C._short(vb)}")
    met = {k: (a.metrics.get(k), b.metrics.get(k)) for k in sorted(set(a.metrics) | set(b.metrics))}
    print("metrics (A | B | B - A):")
    for k, (va, vb) in met.items():
        delta = _fmt(vb - va) if isinstance(va, (int, float)) and isinstance(vb, (int, float)) else ""
        print(f"  {k}: {_fmt(va)} | {_fmt(vb)} | {delta}")
    return 0


def cmd_agg(args: argparse.Namespace, results: Path) -> int:
    runs = C.select(C.scan(results), args.experiment, args.status, args.budget, C.parse_where(args.where))
    groups = C.aggregate(runs)
    for g in groups:
        first = g.runs[0]
        over = C.overrides(first, results)
        seeds = ",".join(str(r.seed) for r in g.runs)
        statuses = ",".join(sorted({str(r.status.get("status")) for r in g.runs}))
        print(f"{first.experiment} [{first.budget}] seeds {seeds} ({statuses})"
              + (f"  {' '.join(over)}" if over else ""))
        names = [k for k in C.KEY_METRICS if k in g.stats] or sorted(g.stats)[:6]
        for k in names:
            mean, std, n = g.stats[k]
            print(f"    {k}: {_fmt(mean)} ± {_fmt(std)} (n={n})")
    print(f"{len(groups)} config(s), {len(runs)} run(s)", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oscrepro.runs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results-dir", default=None, help="default: $OSCREPRO_RESULTS_DIR or results")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_ls = sub.add_parser("ls", help="list runs")
    _filters(p_ls)
    p_ls.add_argument("--no-overrides", action="store_true", help="skip the diff against the experiment defaults")
    p_show = sub.add_parser("show", help="one run's record")
    p_show.add_argument("run", help="run id (a unique prefix) or record dir")
    p_cmp = sub.add_parser("compare", help="config and metric diff of two runs")
    p_cmp.add_argument("a")
    p_cmp.add_argument("b")
    p_agg = sub.add_parser("agg", help="mean ± std over the seeds of each config")
    _filters(p_agg)
    args = parser.parse_args(argv)
    results = results_root(args.results_dir)
    commands = {"ls": cmd_ls, "show": cmd_show, "compare": cmd_compare, "agg": cmd_agg}
    try:
        return commands[args.cmd](args, results)
    except (LookupError, ValueError) as err:
        print(f"[runs] {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
