"""Per-epoch training time of continuous-time mechanisms, measured as ratios in one process.

osciformer's speed claim is a ratio of epoch times: ContiFormer 3.83 min vs OsciFormer 0.56 min per XOR epoch
(Table 4), "3x to 20x" across benchmarks (Sec. 7). Timing separate training runs would compare machines and loads,
so this benchmark builds every mechanism on the same experiment (``experiment=... budget=...``, the same seed and
so the same batches), times the bare training step (forward, loss, backward, AdamW step; ``bench.loop``'s
``bare_step_s``) in alternation over ``--repeats`` rounds, and reports the median step time, the epoch time it
implies (step time x training batches per epoch, validation excluded) and each mechanism's ratio to the reference
mechanism (``--reference``, default osciformer).

The mechanisms and their overrides are the rows of a runs table's spec (``--table``, default osciformer Table 4:
``conf/table/osciformer/table4.yaml``), each named by its ``attention=`` choice; a row added there is benchmarked
with no edit here. The experiment defaults to the table's.

    python -m oscrepro.bench.epoch_ratio --experiment osciformer/xor --budget cpu \
        --out results/bench/osciformer_xor_epoch_ratio.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from oscrepro.bench.harness import device_line, emit
from oscrepro.bench.loop import bare_step_s
from oscrepro.data.integrity import instantiate_data
from oscrepro.runs.compose import compose_run, path_override
from oscrepro.tables.spec import Row, load_spec
from oscrepro.utils.quiet import quiet_third_party

DEFAULT_TABLE = "osciformer/table4"  # the table whose speed claim this benchmark measures (Table 4's epoch time)


def table_mechanisms(table: str) -> dict[str, Row]:
    """The mechanisms a runs table compares: ``{attention config name: its row}`` (the row's label and overrides),
    in the spec's row order; rows that choose no ``attention=`` are not mechanisms and are left out."""
    return {row.attention: row for row in load_spec(table).rows if row.attention is not None}


def measure(experiment: str, budget: str, mechanisms: dict[str, list[str]], extra: list[str], steps: int,
            warmup: int, repeats: int) -> list[dict[str, Any]]:
    """Median bare step time per mechanism (``{name: its overrides}``) over ``repeats`` alternations, and the
    implied epoch time; ``s/step repeats``: every repeat's step time in round order (repeat i of every mechanism
    timed in the same round, so a ratio of two mechanisms can be taken repeat by repeat)."""
    times: dict[str, list[float]] = {m: [] for m in mechanisms}
    with tempfile.TemporaryDirectory() as tmp:
        cfgs = {m: compose_run([f"experiment={experiment}", f"budget={budget}", *overrides, *extra,
                                path_override("paths.results_dir", tmp), "trainer.enable_progress_bar=false"])
                for m, overrides in mechanisms.items()}
        for r in range(repeats):  # alternate, so background load hits every mechanism alike
            for m in mechanisms:
                times[m].append(bare_step_s(cfgs[m], steps, warmup))
                print(f"[bench.epoch_ratio] round {r + 1}/{repeats} {m}: {times[m][-1]:.3f} s/step", flush=True)
    rows = []
    for m in mechanisms:
        batches = batches_per_epoch(cfgs[m])
        step = statistics.median(times[m])
        rows.append({"mechanism": m, "batch": int(cfgs[m].data.batch_size), "batches/epoch": batches,
                     "s/step": step, "epoch min": step * batches / 60, "s/step repeats": list(times[m])})
    return rows


def batches_per_epoch(cfg: Any) -> int:
    """Training batches of one epoch of the run ``cfg`` describes (its data module's loader, after any limit)."""
    dm = instantiate_data(cfg.data)[0]
    dm.setup("fit")
    n = len(dm.train_dataloader())
    limit = cfg.trainer.get("limit_train_batches")
    if limit is not None:
        n = min(n, int(limit)) if isinstance(limit, int) or float(limit) > 1 else max(1, int(n * float(limit)))
    return n


def render(rows: list[dict[str, Any]], reference: str, args: argparse.Namespace) -> str:
    ref = next(r for r in rows if r["mechanism"] == reference)
    head = [f"# Per-epoch training time, {args.experiment} at budget={args.budget}", "",
            f"- **Protocol:** `python -m oscrepro.bench.epoch_ratio {' '.join(args.argv)}`: bare training step "
            f"(forward, loss, backward, AdamW) on the experiment's first {args.steps} batches ({args.warmup} "
            f"untimed), median of {args.repeats} alternations of the mechanisms in one process, "
            f"{torch.get_num_threads()} thread(s); epoch = step x batches per epoch (validation excluded).",
            device_line(), ""]
    cols = ["mechanism", "batch", "batches/epoch", "s/step", "epoch min", f"x {reference}"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append(f"| {r['mechanism']} | {r['batch']} | {r['batches/epoch']} | {r['s/step']:.4f} | "
                     f"{r['epoch min']:.2f} | {r['s/step'] / ref['s/step']:.2f} |")
    return "\n".join(head + lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m oscrepro.bench.epoch_ratio", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", default=DEFAULT_TABLE, help="the runs table whose rows are the mechanisms")
    parser.add_argument("--experiment", default=None, help="default: the table's experiment")
    parser.add_argument("--budget", default="cpu")
    parser.add_argument("--mechanisms", nargs="+", default=None, help="default: every row of the table")
    parser.add_argument("--reference", default="osciformer")
    parser.add_argument("--steps", type=int, default=6, help="training batches timed per round (incl. warm-up)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every mechanism")
    args = parser.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    rows_of = table_mechanisms(args.table)
    args.experiment = args.experiment or load_spec(args.table).experiment
    chosen = args.mechanisms or [args.reference, *(m for m in rows_of if m != args.reference)]  # reference first
    unknown = [m for m in [*chosen, args.reference] if m not in rows_of]
    if unknown:
        parser.error(f"{', '.join(unknown)}: not a mechanism of {args.table} (its rows: {', '.join(rows_of)})")
    if args.reference not in chosen:
        parser.error(f"--reference {args.reference} is not among --mechanisms")
    quiet_third_party()
    torch.set_num_threads(args.threads)
    rows = measure(args.experiment, args.budget, {m: rows_of[m].overrides for m in chosen}, args.overrides,
                   args.steps, args.warmup, args.repeats)
    text = render(rows, args.reference, args)
    emit(text, args.out)


if __name__ == "__main__":
    main()
