"""``python -m oscrepro.leaderboard.bench``: the leaderboard's cost columns. One TransformerBlock per mechanism vs
the softmax block at the char-LM task's shape (D = 128, H = 4, N = 256, B = 8), forward+backward time and peak
memory as ratios measured in one process (``oscrepro.bench.harness``, alternating trials), written to
``results/bench/leaderboard.{md,csv}``. The mechanisms and their attention configs are the leaderboard specs' rows
(diff = ``diff_paper``)."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import torch

from oscrepro.bench.harness import run_bench
from oscrepro.leaderboard.board import mechanisms
from oscrepro.utils.provenance import provenance

COLUMNS = ("mechanism", "ratio_fwdbwd_time", "ratio_mem_fwdbwd", "fwdbwd_ms_median_base", "fwdbwd_ms_median_cand",
           "mem_fwdbwd_mb_base", "mem_fwdbwd_mb_cand")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m oscrepro.leaderboard.bench", description=__doc__)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--n-heads", type=int, default=4)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip", default="contiformer", help="comma-separated mechanisms not benchmarked")
    parser.add_argument("--out-dir", default="results/bench")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    skip = set(args.skip.split(",")) if args.skip else set()
    rows = []
    for mech, conf in mechanisms().items():  # the leaderboard specs' rows: {label: attention config}
        if mech in skip or conf == "softmax":  # softmax is the baseline every ratio divides by
            continue
        (row,) = run_bench(conf, [args.seq_len], args.batch, args.d_model, args.n_heads, 2, args.trials, "cpu")
        rows.append({"mechanism": mech, **{k: row[k] for k in COLUMNS[1:]}})
        print(f"[leaderboard bench] {mech}: time x{row['ratio_fwdbwd_time']:.2f}, "
              f"memory x{row['ratio_mem_fwdbwd']:.2f}", flush=True)
    prov = provenance()
    header = [f"{k}: {v}" for k, v in prov.items()] + [
        f"TransformerBlock(d_model={args.d_model}, n_heads={args.n_heads}) forward+backward at N={args.seq_len}, "
        f"B={args.batch}, {args.threads} thread(s), {args.trials} alternating trials; ratios = mechanism / softmax "
        f"(median time, peak memory); not benchmarked: {', '.join(sorted(skip)) or 'none'}"]
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "leaderboard.csv", "w", newline="") as fh:
        fh.writelines(f"# {h}\n" for h in header)
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    md = ["# Leaderboard cost columns: one block vs the softmax block", "", *[f"- {h}" for h in header], "",
          "| Mechanism | Fwd+bwd time ×softmax | Peak memory ×softmax | softmax ms | mechanism ms |",
          "|---|---|---|---|---|"]
    md += [f"| {r['mechanism']} | {r['ratio_fwdbwd_time']:.2f} | {r['ratio_mem_fwdbwd']:.2f} | "
           f"{r['fwdbwd_ms_median_base']:.1f} | {r['fwdbwd_ms_median_cand']:.1f} |" for r in rows]
    (out / "leaderboard.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
