"""osciformer Figure 2a/2b (Sec. 7): per-epoch training time vs input length, OsciFormer vs ContiFormer.

For every input length L the bit-stream XOR task in its dense encoding (``data=xor_dense``, ``data.pad=L``: strings of
2..L-1 bits, one observation per bit) is built for each mechanism on ``conf/experiment/osciformer/xor.yaml`` and the
bare training step (forward, loss, backward, AdamW) is timed in this one process, the mechanisms alternating, by
:func:`oscrepro.bench.epoch_ratio.measure` (``repeats`` rounds). The epoch time is the median step time x the
batches of one epoch of ``epoch_examples`` strings (ODE-LSTM's XOR training set: 100,000), so every L is timed on
the same epoch. Rows: one per (L, mechanism), with the ratio to the reference (OsciFormer): **one ratio per
repeat**, the mechanism's step time over the reference's timed in the same round (load that drifts over the build
cancels in each), reported as mean ± std over the repeats with n = the repeats (``SeedStat``, :func:`repeat_ratios`).
The repeats are repeated measurements on this machine, not seeds; they are what the speed-up claims' intervals are
over (issue 32: "repeated measurements (the bench's repeats) for costs"; a ratio of medians had n = 1 and left the
ordering claim without an interval). The PNG draws Figure 2a (linear axes) and 2b (log-scale time) side by side,
and (c) the paired ratio with its std.

Choices where the paper is silent: the task (Figure 2a/b name no dataset; XOR dense is the one whose input length is
a free parameter), the lengths, and batch / width (sized so that ContiFormer's B x L^2 x d ODE states fit in memory
at the largest L: the spec says how).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from oscrepro.bench.epoch_ratio import measure, table_mechanisms
from oscrepro.bench.harness import paired_ratios
from oscrepro.tables.run_helpers import num_threads
from oscrepro.tables.values import Num, SeedStat

MECHANISM_ROWS = "osciformer/table4"  # the mechanisms (overrides, labels) are Table 4's rows, as its epoch time's


def mechanism_labels() -> dict[str, str]:
    """``{attention config name: its label}`` of :data:`MECHANISM_ROWS` (``osciformer`` -> ``OsciFormer``)."""
    return {m: row.label for m, row in table_mechanisms(MECHANISM_ROWS).items()}


def epoch_times(experiment: str, budget: str, lengths: list[int], mechanisms: list[str], overrides: list[str],
                epoch_examples: int, steps: int, warmup: int, repeats: int) -> list[dict[str, Any]]:
    """Per (L, mechanism): median s/step, every repeat's s/step (``s/step repeats``, in round order) and the implied
    epoch time (s) over ``epoch_examples`` strings."""
    rows_of = table_mechanisms(MECHANISM_ROWS)
    chosen = {m: rows_of[m].overrides for m in mechanisms}
    rows = []
    for length in lengths:
        extra = [o.format(length=length) for o in overrides]
        for r in measure(experiment, budget, chosen, extra, steps, warmup, repeats):
            batches = math.ceil(epoch_examples / r["batch"])
            rows.append({"L": length, "mechanism": r["mechanism"], "batch": r["batch"], "s/step": r["s/step"],
                         "s/step repeats": r["s/step repeats"], "epoch s": r["s/step"] * batches})
    return rows


def repeat_ratios(reference: list[float], value: list[float]) -> SeedStat:
    """The speed-up per repeat: the mechanism's step time over the reference's timed in the same round, as mean ±
    std over the repeats (n shown). Pairing by round keeps load that drifts between rounds out of each ratio."""
    return SeedStat.of(paired_ratios(value, reference, what="repeat"), 2, show_n=True)


def osciformer_fig2_time(out_dir: Path, budget: str, results_dir: Path, name: str, experiment: str,
                         lengths: list[int], mechanisms: list[str], overrides: list[str], epoch_examples: int,
                         reference: str = "osciformer", steps: int = 3, warmup: int = 1, repeats: int = 2,
                         threads: int = 1, figure: str = "fig2_time.png", paper: dict[str, Any] | None = None
                         ) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """osciformer Figure 2a/2b: per-epoch time vs input length per mechanism, ratio to ``reference``, and the PNG."""
    labels = mechanism_labels()
    with num_threads(threads):
        rows = epoch_times(experiment, budget, lengths, mechanisms, overrides, epoch_examples, steps, warmup, repeats)
    ref = {r["L"]: r["s/step repeats"] for r in rows if r["mechanism"] == reference}
    for r in rows:
        r["ratio"] = repeat_ratios(ref[r["L"]], r["s/step repeats"])
    columns = ["L", "Mechanism", "Batch", "s/step", "Epoch (s)", f"x {labels[reference]}"]
    out = [{"L": r["L"], "Mechanism": labels[r["mechanism"]], "Batch": r["batch"],
            "s/step": Num(r["s/step"], "{:.4f}"), "Epoch (s)": Num(r["epoch s"], "{:.1f}"),
            f"x {labels[reference]}": r["ratio"]} for r in rows]
    drawn = [{**r, "ratio": r["ratio"].mean, "ratio std": r["ratio"].std} for r in rows]
    png = plot_epoch_time(drawn, Path(out_dir) / figure, f"{name}, budget={budget}", **_figure_paper(name, budget))
    notes = [
        f"**Protocol:** `{experiment}` with {' '.join(overrides)} for L in {lengths}: bare training step (forward, "
        f"loss, backward, AdamW) on the first {steps} batches ({warmup} untimed), {repeats} alternations (repeats) "
        f"of the mechanisms in one process, {threads} thread(s) (oscrepro.bench.epoch_ratio.measure); s/step = the "
        f"median of the repeats, epoch = s/step x ceil({epoch_examples:,} / batch) batches (validation excluded). "
        f"Times depend on the machine and its load; the ratio column is the like-for-like comparison: per repeat, "
        f"the mechanism's step time over {labels[reference]}'s in the same round, mean ± std over the {repeats} "
        "repeats (n = repeated measurements on this machine, not seeds).",
        f"**Figure:** `{png.name}`: per-epoch time vs L, linear axes (Figure 2a) and log-scale time (Figure 2b), and "
        "(c) the ContiFormer / OsciFormer ratio (mean ± std of the per-repeat ratios) beside the paper's 3x-20x "
        "band.",
    ]
    notes += [f"**Paper:** {p}" for p in (paper or {}).get("reading", [])]
    return columns, out, notes


def _figure_paper(key: str, budget: str) -> dict[str, Any]:
    """The paper's values for the figure (the spec's ``figure.paper``, reference data) and the caption."""
    from oscrepro.analysis.figures import figure_block, spec_caption
    from oscrepro.tables.spec import load_spec

    spec = load_spec(key)
    paper = figure_block(spec.path).get("paper") or {}
    caption = (spec_caption(spec, budget) + " Epoch = measured s/step x batches of one epoch. Grey band: the "
               "speed-ups the paper reports (Sec. 7, 3x to 20x) drawn over our OsciFormer time; dotted: Table 4's XOR "
               "ratio (the paper gives no lengths for it).")
    return {"band": paper.get("speedup_band"), "paper_ratio": paper.get("xor_ratio"), "caption": caption}


def redraw_fig2_time(spec: Any, budget: str, out_dir: Path, rows: list[dict[str, str]]) -> Path:
    """Figure 2a/2b redrawn from the committed csv (``python -m oscrepro.tables.redraw osciformer/fig2_time``)."""
    back = {v: k for k, v in mechanism_labels().items()}
    a = spec.analysis
    col = f"x {mechanism_labels()[a.get('reference', 'osciformer')]}"
    parsed = [{"L": int(r["L"]), "mechanism": back[r["Mechanism"]], "epoch s": float(r["Epoch (s)"]),
               **({"ratio": float(r[col]), "ratio std": float(r[f"{col}__std"])} if f"{col}__std" in r else {})}
              for r in rows]
    return plot_epoch_time(parsed, out_dir / a.get("figure", "fig2_time.png"), f"{a['name']}, budget={budget}",
                           reference=a.get("reference", "osciformer"), **_figure_paper(spec.key, budget))


def plot_epoch_time(rows: list[dict[str, Any]], path: Path, title: str, reference: str = "osciformer",
                    band: list[float] | None = None, paper_ratio: float | None = None,
                    caption: str | None = None) -> Path:
    """Figure 2a (linear) and 2b (log-scale time): epoch seconds vs input length, one line per mechanism; (c) each
    mechanism's time over ``reference``'s: the rows' ``ratio`` ± ``ratio std`` (the per-repeat ratios) where they
    carry one, else the ratio of the epoch times. The paper's speed-up ``band`` ([low, high] x) is shaded over the
    reference's time in (b) and as a ratio in (c); ``paper_ratio`` (Table 4) is a dotted line in (c)."""
    from matplotlib.figure import Figure

    from oscrepro.analysis.figures import PAPER_BAND, PAPER_LINE, paper_label, save_figure

    labels = mechanism_labels()
    fig = Figure(figsize=(14, 4.2))
    axes = fig.subplots(1, 3)
    series = {}
    for mech in dict.fromkeys(r["mechanism"] for r in rows):
        pts = sorted((r["L"], r["epoch s"]) for r in rows if r["mechanism"] == mech)
        series[mech] = np.array(pts).T  # (2, n): L, epoch seconds
    for mech, (x, y) in series.items():
        for ax in axes[:2]:
            ax.plot(x, y, marker="o", label=f"{labels[mech]} (ours)")
    ref_x, ref_y = series[reference]
    if band is not None:
        axes[1].fill_between(ref_x, band[0] * ref_y, band[1] * ref_y, **PAPER_BAND,
                             label=paper_label(f"{band[0]:g}x to {band[1]:g}x {labels[reference]} (Sec. 7)"))
        axes[2].axhspan(band[0], band[1], **PAPER_BAND, label=paper_label(f"speed-ups {band[0]:g}x to {band[1]:g}x "
                                                                          "(Sec. 7)"))
    if paper_ratio is not None:
        axes[2].axhline(paper_ratio, **PAPER_LINE, label=paper_label(f"{paper_ratio:g}x, Table 4 XOR"))
    ratios = []
    for mech, (x, y) in series.items():
        if mech == reference:
            continue
        color, label = f"C{list(series).index(mech)}", f"{labels[mech]} / {labels[reference]} (ours)"
        paired = sorted((r["L"], r["ratio"], r["ratio std"]) for r in rows if r["mechanism"] == mech and "ratio" in r)
        if len(paired) == len(x):  # (3, n): L, mean and std of the per-repeat ratios
            _, mean, std = np.array(paired, dtype=float).T
            std = np.nan_to_num(std)  # one repeat: no std, no bar
            axes[2].errorbar(x, mean, yerr=std, marker="o", capsize=3, color=color,
                             label=f"{label}, mean ± std over repeats")
            ratios.append(np.concatenate([mean - std, mean + std]))
        else:
            axes[2].plot(x, y / ref_y, marker="o", color=color, label=label)
            ratios.append(y / ref_y)
    for ax, scale, tag in zip(axes[:2], ("linear", "log"), ("(a)", "(b) log scale"), strict=True):
        ax.set_yscale(scale)
        ax.set_ylabel("Per-epoch training time (s)")
        ax.set_title(f"{tag}", fontsize=9)
    axes[2].set_yscale("log")
    ratios = np.concatenate(ratios or [np.ones(1)])
    ratios = ratios[ratios > 0]  # a bar reaching below 0 would leave no log-scale limit
    low, high = min(1.0, ratios.min()), max(40.0, ratios.max())
    axes[2].set_ylim(low / 1.2, high * 1.2)
    ticks = [t for t in (1, 2, 3, 5, 10, 20, 50, 100) if low / 1.2 <= t <= high * 1.2]
    axes[2].set_yticks(ticks, [f"{t:g}x" for t in ticks])
    axes[2].minorticks_off()
    axes[2].set_ylabel(f"time / {labels[reference]} time")
    axes[2].set_title("(c) speed-up of OsciFormer, ours vs the paper's", fontsize=9)
    for ax in axes:
        ax.set_xlabel("Input length L")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle(f"Per-epoch training time vs input length ({title})", fontsize=9)
    return save_figure(fig, path, caption=caption)
