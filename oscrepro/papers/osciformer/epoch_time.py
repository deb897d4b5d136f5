"""osciformer Figure 2a/2b (Sec. 7): per-epoch training time vs input length, OsciFormer vs ContiFormer.

For every input length L the bit-stream XOR task in its dense encoding (``data=xor_dense``, ``data.pad=L``: strings of
2..L-1 bits, one observation per bit) is built for each mechanism on ``conf/experiment/osciformer/xor.yaml`` and the
bare training step (forward, loss, backward, AdamW) is timed in this one process, the mechanisms alternating, by
:func:`oscrepro.bench.epoch_ratio.measure` (median over ``repeats``). The epoch time is that step time x the
batches of one epoch of ``epoch_examples`` strings (ODE-LSTM's XOR training set: 100,000), so every L is timed on
the same epoch. Rows: one per (L, mechanism), with the ContiFormer / OsciFormer ratio; the PNG draws Figure 2a
(linear axes) and 2b (log-scale time) side by side.

Choices where the paper is silent: the task (Figure 2a/b name no dataset; XOR dense is the one whose input length is
a free parameter), the lengths, and batch / width (sized so that ContiFormer's B x L^2 x d ODE states fit in memory
at the largest L: the spec says how).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from oscrepro.bench.epoch_ratio import measure
from oscrepro.tables.run_helpers import num_threads

LABELS = {"osciformer": "OsciFormer", "contiformer": "ContiFormer", "softmax": "Transformer (softmax)"}


def epoch_times(experiment: str, budget: str, lengths: list[int], mechanisms: list[str], overrides: list[str],
                epoch_examples: int, steps: int, warmup: int, repeats: int) -> list[dict[str, Any]]:
    """Per (L, mechanism): median s/step and the implied epoch time (s) over ``epoch_examples`` strings."""
    rows = []
    for length in lengths:
        extra = [o.format(length=length) for o in overrides]
        for r in measure(experiment, budget, mechanisms, extra, steps, warmup, repeats):
            batches = math.ceil(epoch_examples / r["batch"])
            rows.append({"L": length, "mechanism": r["mechanism"], "batch": r["batch"], "s/step": r["s/step"],
                         "epoch s": r["s/step"] * batches})
    return rows


def osciformer_fig2_time(out_dir: Path, budget: str, results_dir: Path, name: str, experiment: str,
                         lengths: list[int], mechanisms: list[str], overrides: list[str], epoch_examples: int,
                         reference: str = "osciformer", steps: int = 3, warmup: int = 1, repeats: int = 2,
                         threads: int = 1, figure: str = "fig2_time.png", paper: dict[str, Any] | None = None
                         ) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """osciformer Figure 2a/2b: per-epoch time vs input length per mechanism, ratio to ``reference``, and the PNG."""
    with num_threads(threads):
        rows = epoch_times(experiment, budget, lengths, mechanisms, overrides, epoch_examples, steps, warmup, repeats)
    ref = {r["L"]: r["s/step"] for r in rows if r["mechanism"] == reference}
    columns = ["L", "Mechanism", "Batch", "s/step", "Epoch (s)", f"x {LABELS[reference]}"]
    out = [{"L": r["L"], "Mechanism": LABELS[r["mechanism"]], "Batch": r["batch"], "s/step": f"{r['s/step']:.4f}",
            "Epoch (s)": f"{r['epoch s']:.1f}", f"x {LABELS[reference]}": f"{r['s/step'] / ref[r['L']]:.2f}"}
           for r in rows]
    png = plot_epoch_time(rows, Path(out_dir) / figure, f"{name}, budget={budget}")
    notes = [
        f"**Protocol:** `{experiment}` with {' '.join(overrides)} for L in {lengths}: bare training step (forward, "
        f"loss, backward, AdamW) on the first {steps} batches ({warmup} untimed), median of {repeats} alternations "
        f"of the mechanisms in one process, {threads} thread(s) (oscrepro.bench.epoch_ratio.measure); epoch = "
        f"step x ceil({epoch_examples:,} / batch) batches (validation excluded). Times depend on the machine and its "
        f"load; the ratio column is the like-for-like comparison.",
        f"**Figure:** `{png.name}`: per-epoch time vs L, linear axes (Figure 2a) and log-scale time (Figure 2b).",
    ]
    notes += [f"**Paper:** {p}" for p in (paper or {}).get("reading", [])]
    return columns, out, notes


def plot_epoch_time(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Figure 2a (linear) and 2b (log-scale time): epoch seconds vs input length, one line per mechanism."""
    from matplotlib.figure import Figure

    from oscrepro.analysis.figures import save_figure

    fig = Figure(figsize=(10, 3.8))
    axes = fig.subplots(1, 2)
    for mech in dict.fromkeys(r["mechanism"] for r in rows):
        pts = sorted((r["L"], r["epoch s"]) for r in rows if r["mechanism"] == mech)
        x, y = np.array(pts).T
        for ax in axes:
            ax.plot(x, y, marker="o", label=LABELS[mech])
    for ax, scale, tag in zip(axes, ("linear", "log"), ("(a)", "(b) log scale"), strict=True):
        ax.set_yscale(scale)
        ax.set_xlabel("Input length L")
        ax.set_ylabel("Per-epoch training time (s)")
        ax.set_title(f"{tag}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle(f"Per-epoch training time vs input length ({title})", fontsize=9)
    return save_figure(fig, path)
