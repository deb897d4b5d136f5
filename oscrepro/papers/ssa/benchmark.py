"""ssa Table 1 (Sec. IV.1-IV.2): single-block throughput and peak memory, transformer vs OSN dense vs OSN top-k.

Adapter of ``conf/table/ssa/table1.yaml`` over :func:`oscrepro.bench.harness.run_bench`, which times the
softmax ``TransformerBlock`` (TF) and the SSA block in alternation in one process. The dense (D) and top-k (S,
k = 64) runs each time their own transformer, so every ratio compares models measured side by side. The
paper's A100 numbers arrive as spec data (``paper``) and are only ever written into ``(paper)`` columns.

**A trial** is one alternation round of :func:`oscrepro.bench.harness.measure_alternating`: TF's pass, then the
OSN block's, timed back to back (after the warm-up), ``trials`` rounds per pass (forward; forward + backward) and N.
The time ratios (``D/TF time``, ``S/TF time``, their CPU-time and f+b twins) are **one ratio per trial**, the OSN
block's time over TF's in the same round, shown as mean ± std over the trials with n = trials (:class:`SeedStat`,
csv ``<col>``, ``<col>__std``, ``<col>__n``): load that drifts between rounds hits both models of a round and
cancels in its ratio. These are the repeated measurements the claims judge (issue 32): they estimate this
machine's ratio, not a spread over machines. Only ratios within one run are paired: the D run and the S run are
separate runs with their own TF, so no D-vs-S ratio is taken. Throughput (K tok/s) stays the paper's single number,
tokens over the mean trial time. Peak memory stays one value per model: it is the byte count of one pass over fixed
shapes (the same ops allocate the same tensors every time; no timing enters it), measured once, untimed, after the
timed trials; a repeat would measure the same allocation sequence, and the claims read it as a deterministic value
(``exact``).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import torch

from oscrepro.bench.harness import paired_ratios, run_bench
from oscrepro.tables.values import SeedStat

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


def paired_time_ratios(base: list[float], cand: list[float]) -> SeedStat:
    """OSN over TF time per trial: ``cand[i] / base[i]``, the two timed back to back in alternation round ``i``
    (ratio of times > 1: the OSN block is slower), as mean ± std over the trials (3 decimals, n shown). Pairing by
    round, not comparing medians, is what cancels load that drifts over the build."""
    return SeedStat.of(paired_ratios(cand, base), 3, show_n=True)


def _ratios(run: dict[str, Any], pass_: str, clock: int) -> SeedStat:
    """Per-trial OSN/TF ratios of one run row's ``pass_`` (``fwd`` / ``fwdbwd``); ``clock`` 0 = wall, 1 = CPU."""
    times = run["trial_times"][pass_]
    return paired_time_ratios(times["base"][clock], times["cand"][clock])


def _trial_lines(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per (run, N, pass, trial, model) with its wall and process-CPU seconds: the raw trials."""
    lines = []
    for run in runs:
        for pass_, times in run["trial_times"].items():
            for model, (walls, cpus) in times.items():
                lines += [{"attention": run["attention"], "seq_len": run["seq_len"], "pass": pass_, "trial": i,
                           "model": model, "wall_s": w, "cpu_s": c}
                          for i, (w, c) in enumerate(zip(walls, cpus, strict=True))]
    return lines


def _write_csv(path: Path, lines: list[dict[str, Any]]) -> None:
    """Every key of every line as a column (in first-seen order)."""
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in lines for k in r)))
        writer.writeheader()
        writer.writerows(lines)


def ssa_table1(out_dir: Path, budget: str, results_dir: Path, paper: list[dict[str, Any]], seq_lens: list[int],
               warmup: int, trials: int, d_model: int = 512, n_heads: int = 8, dense: str = "ssa",
               sparse: str = "ssa_topk", attention_overrides: dict[str, Any] | None = None,
               threads: int | None = None, device: str = "cpu", seed: int = 0) -> Table:
    """Table 1 rows (one per N): forward K tok/s and peak MB of TF / D / S beside the paper's, plus ratios.

    ``paper``: ``[{N, B, ktok_s: {TF, D, S}, mb: {TF, D, S}}, ...]`` from the spec. ``dense`` / ``sparse`` name
    ``conf/attention`` entries; ``attention_overrides`` go to both (e.g. ``compile_min_elems: 0``). ``threads``
    sets torch's intra-op threads for the build only. Batch per N follows the paper (Sec. IV.1). Time ratios are
    per-trial (module docstring). Also writes ``table1_runs.csv`` with every field :func:`run_bench` measured
    (forward+backward times and memory too) and ``table1_trials.csv`` with every timed trial.
    ``results_dir`` is unused: the benchmark reads no run records.
    """
    device = resolve_device(device)
    threads_before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        runs = {name: run_bench(cfg, seq_lens, 0, d_model, n_heads, warmup, trials, device, use_paper_batch=True,
                                overrides=attention_overrides or None, seed=seed, keep_trials=True)
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
        # the paper reports throughput; its TF/D of throughput = D/TF of forward time, ours one ratio per trial
        row["D/TF time (ours)"] = _ratios(d, "fwd", 0)
        row["D/TF CPU-time (ours)"] = _ratios(d, "fwd", 1)
        row["TF/D tput (paper)"] = _ratio(p, "ktok_s", "TF", "D")
        row["S/TF time (ours)"] = _ratios(s, "fwd", 0)
        row["TF/S tput (paper)"] = _ratio(p, "ktok_s", "TF", "S")
        for m in ("TF", "D", "S"):
            row[f"{m} MB (ours)"] = mem[m]
            row[f"{m} MB (paper)"] = _get(p, "mb", m)
        row["D/TF mem (ours)"] = d["ratio_mem_fwd"]
        row["D/TF mem (paper)"] = _ratio(p, "mb", "D", "TF")
        row["f+b D/TF time (ours)"] = _ratios(d, "fwdbwd", 0)
        row["f+b D/TF CPU-time (ours)"] = _ratios(d, "fwdbwd", 1)
        row["f+b D/TF mem (ours)"] = d["ratio_mem_fwdbwd"]
        rows.append(row)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs_csv, trials_csv = out_dir / "table1_runs.csv", out_dir / "table1_trials.csv"
    _write_csv(runs_csv, [{k: v for k, v in r.items() if k != "trial_times"} for r in runs["D"] + runs["S"]])
    _write_csv(trials_csv, _trial_lines(runs["D"] + runs["S"]))
    missing = sorted(int(p["N"]) for p in paper if int(p["N"]) not in seq_lens)
    notes = [
        f"**Protocol:** one block (D={d_model}, H={n_heads}, d_ff=4D), batch per the paper's Sec. IV.1, "
        f"device `{device}`, {used_threads} torch thread(s); warm-up {warmup}, {trials} timed trials per model "
        "(paper: 10 / 50), TF and OSN alternated trial by trial; K tok/s from the mean trial time (as the paper). "
        "Time ratios are one per trial (the OSN block's time over TF's in the same alternation round), mean ± std "
        f"over the {trials} trials (n = trials: repeated measurements on this machine, not seeds), of wall time and "
        "of process CPU time (`CPU-time`, the steadier one on a shared CPU).",
        f"**Models:** TF = softmax `TransformerBlock`; D = `conf/attention/{dense}.yaml`; S = "
        f"`conf/attention/{sparse}.yaml`; attention overrides {attention_overrides or {}}.",
        "**Memory:** " + ("`torch.cuda.max_memory_allocated`, as the paper." if device == "cuda" else
                          "CPU peak of torch allocations during one forward (torch.profiler memory events) + "
                          "parameters + input; the paper's A100 column is `torch.cuda.max_memory_allocated`."),
        "**Reading:** `D/TF time` (ours) and `TF/D tput` (paper) both exceed 1 when OSN is slower; `f+b` = "
        "forward+backward (beyond the paper, which times the forward pass only). The S run times its own TF "
        f"(`TF K tok/s (ours, S run)`). Peak memory: one pass per model (a byte count over fixed shapes, no "
        f"timing), one value. Every measured field: `{runs_csv.name}`; every timed trial: `{trials_csv.name}`.",
        f"**N not run:** {missing or 'none'}.",
    ]
    return list(rows[0]), rows, notes
