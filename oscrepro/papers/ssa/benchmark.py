"""ssa Table 1 (Sec. IV.1-IV.2): single-block throughput and peak memory, transformer vs OSN dense vs OSN top-k.

Adapter of ``conf/table/ssa/table1.yaml`` over :func:`oscrepro.bench.harness.run_bench`, which times the
softmax ``TransformerBlock`` (TF) and the SSA block in alternation in one process. The dense (D) and top-k (S,
k = 64) runs each time their own transformer, so every ratio compares models measured side by side. The
paper's A100 numbers arrive as spec data (``paper``) and are only ever written into ``(paper)`` columns.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import torch

from oscrepro.bench.harness import run_bench

Table = tuple[list[str], list[dict[str, Any]], list[str]]


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible (the paper's protocol ran on an A100), else ``cpu``."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _paper_row(paper: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """The spec's Table 1 row for sequence length ``n`` (empty when the paper did not run it)."""
    return next((p for p in paper if int(p["N"]) == n), {})


def _get(p: dict[str, Any], kind: str, model: str) -> float:
    """A paper value as printed (an int in Table 1), NaN (rendered as a dash) for an N the paper did not run."""
    return p[kind][model] if p else math.nan


def _ratio(p: dict[str, Any], kind: str, num: str, den: str) -> float:
    return p[kind][num] / p[kind][den] if p else math.nan


def ssa_table1(out_dir: Path, budget: str, results_dir: Path, paper: list[dict[str, Any]], seq_lens: list[int],
               warmup: int, trials: int, d_model: int = 512, n_heads: int = 8, dense: str = "ssa",
               sparse: str = "ssa_topk", attention_overrides: dict[str, Any] | None = None,
               threads: int | None = None, device: str = "cpu", seed: int = 0) -> Table:
    """Table 1 rows (one per N): forward K tok/s and peak MB of TF / D / S beside the paper's, plus ratios.

    ``paper``: ``[{N, B, ktok_s: {TF, D, S}, mb: {TF, D, S}}, ...]`` from the spec. ``dense`` / ``sparse`` name
    ``conf/attention`` entries; ``attention_overrides`` go to both (e.g. ``compile_min_elems: 0``). ``threads``
    sets torch's intra-op threads for the build only. Batch per N follows the paper (Sec. IV.1). Also writes
    ``table1_runs.csv`` with every field :func:`run_bench` measured (forward+backward times and memory too).
    ``results_dir`` is unused: the benchmark reads no run records.
    """
    device = resolve_device(device)
    threads_before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        runs = {name: run_bench(cfg, seq_lens, 0, d_model, n_heads, warmup, trials, device, use_paper_batch=True,
                                overrides=attention_overrides or None, seed=seed)
                for name, cfg in (("D", dense), ("S", sparse))}
        used_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads_before)
    rows = []
    for d, s in zip(runs["D"], runs["S"], strict=True):
        n = d["seq_len"]
        p = _paper_row(paper, n)
        tput = {"TF": d["fwd_ktok_s_base"], "D": d["fwd_ktok_s_cand"], "S": s["fwd_ktok_s_cand"]}
        mem = {"TF": d["mem_fwd_mb_base"], "D": d["mem_fwd_mb_cand"], "S": s["mem_fwd_mb_cand"]}
        row: dict[str, Any] = {"N": n, "B": d["batch"], "B (paper)": int(p["B"]) if p else math.nan}
        for m in ("TF", "D", "S"):
            row[f"{m} K tok/s (ours)"] = tput[m]
            row[f"{m} K tok/s (paper)"] = _get(p, "ktok_s", m)
        row["TF K tok/s (ours, S run)"] = s["fwd_ktok_s_base"]
        # the paper reports throughput; TF/D of throughput ~ D/TF of forward time (mean vs median of the trials)
        row["D/TF time (ours)"] = d["ratio_fwd_time"]
        row["TF/D tput (paper)"] = _ratio(p, "ktok_s", "TF", "D")
        row["S/TF time (ours)"] = s["ratio_fwd_time"]
        row["TF/S tput (paper)"] = _ratio(p, "ktok_s", "TF", "S")
        for m in ("TF", "D", "S"):
            row[f"{m} MB (ours)"] = mem[m]
            row[f"{m} MB (paper)"] = _get(p, "mb", m)
        row["D/TF mem (ours)"] = d["ratio_mem_fwd"]
        row["D/TF mem (paper)"] = _ratio(p, "mb", "D", "TF")
        row["f+b D/TF time (ours)"] = d["ratio_fwdbwd_time"]
        row["f+b D/TF CPU-time (ours)"] = d["ratio_fwdbwd_cpu_time"]
        row["f+b D/TF mem (ours)"] = d["ratio_mem_fwdbwd"]
        rows.append(row)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs_csv = out_dir / "table1_runs.csv"
    fields = list(dict.fromkeys(k for r in runs["D"] + runs["S"] for k in r))
    with runs_csv.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(runs["D"] + runs["S"])
    missing = sorted(int(p["N"]) for p in paper if int(p["N"]) not in seq_lens)
    notes = [
        f"**Protocol:** one block (D={d_model}, H={n_heads}, d_ff=4D), batch per the paper's Sec. IV.1, "
        f"device `{device}`, {used_threads} torch thread(s); warm-up {warmup}, {trials} timed trials per model "
        "(paper: 10 / 50), TF and OSN alternated trial by trial; K tok/s from the mean trial time (as the paper), "
        "ratios of median wall time (and of median process CPU time for f+b).",
        f"**Models:** TF = softmax `TransformerBlock`; D = `conf/attention/{dense}.yaml`; S = "
        f"`conf/attention/{sparse}.yaml`; attention overrides {attention_overrides or {}}.",
        "**Memory:** " + ("`torch.cuda.max_memory_allocated`, as the paper." if device == "cuda" else
                          "CPU peak of torch allocations during one forward (torch.profiler memory events) + "
                          "parameters + input; the paper's A100 column is `torch.cuda.max_memory_allocated`."),
        "**Reading:** `D/TF time` (ours) and `TF/D tput` (paper) both exceed 1 when OSN is slower; `f+b` = "
        "forward+backward (beyond the paper, which times the forward pass only). The S run times its own TF "
        f"(`TF K tok/s (ours, S run)`). Every measured field: `{runs_csv.name}`.",
        f"**N not run:** {missing or 'none'}.",
    ]
    return list(rows[0]), rows, notes
