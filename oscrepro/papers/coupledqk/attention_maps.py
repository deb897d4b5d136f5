"""coupledqk Table 12 and Figure 3 (Sec. 3.5, App. D): the spectrum and spread of trained attention maps.

Both read the finished LM runs of Table 1 (``conf/table/coupledqk/table1.yaml``), run each model with
``need_weights=True`` on the first ``n_batches`` validation batches of its own data module (the paper: 25) and
reduce every causal attention matrix A (T x T, one per sequence and head) of every layer:

* effective rank (sum_i s_i)^2 / sum_i s_i^2 of A's singular values s (Table 12), and the top-1 ratio
  s_1 / sum_i s_i (App. D: 0.056 Standard vs 0.050 Coupled QK);
* Shannon entropy S_i = -sum_j a_ij log a_ij (nats) of each row i (Figure 3), averaged over the rows.

Per run, each layer's value is the mean over batches x sequences x heads; the table shows the mean over Table 1's
seeds ± their standard deviation. The layer columns are the model's layers (8 in the paper, 4 in the cpu GPT).

Choices where the paper is silent:
* Which rows count: all T of them, row i holding i + 1 causal entries (0 log 0 = 0), so the mean entropy of a
  uniform causal map is mean_i log(i + 1); the effective rank is of the full lower-triangular T x T matrix.
* Differential attention's map A1 - lambda A2 has negative entries and rows summing to 1 - lambda: its
  entropy is that of p_ij = |a_ij| / sum_j |a_ij| (for a softmax row p = a, so one formula serves every
  mechanism); its effective rank is that of the signed map itself.
* Singular values in float64 (``torch.linalg.svdvals``); the attention maps as the model computes them (fp32).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from oscrepro.tables.runs import MissingRunsError, load_run
from oscrepro.tables.sources import RunNeeds, SourceCell, SourceRuns, reads_runs
from oscrepro.tables.values import MISSING, Num, SeedStat


# ------------------------------------------------------------------------------------------------ reductions
def spectrum_stats(a: Tensor) -> tuple[Tensor, Tensor]:
    """(..., T, T) -> effective rank (sum s)^2 / sum s^2 and top-1 ratio s_1 / sum s, each (...) float64
    (App. D, Table 12). An identity gives T and 1/T; a rank-1 matrix 1 and 1."""
    s = torch.linalg.svdvals(a.double())  # (..., T), descending
    total = s.sum(-1)  # (...)
    return total**2 / (s**2).sum(-1), s[..., 0] / total


def effective_rank(a: Tensor) -> Tensor:
    """(..., T, T) -> (...): (sum_i s_i)^2 / sum_i s_i^2 (Table 12)."""
    return spectrum_stats(a)[0]


def row_entropy(a: Tensor) -> Tensor:
    """(..., T, T) -> (..., T): Shannon entropy (nats) of each row of p = |a| / sum_j |a| (Figure 3), 0 log 0 = 0.
    A softmax row is its own p; a signed (differential) row is read through its magnitudes."""
    p = a.double().abs()
    p = p / p.sum(-1, keepdim=True)  # rows sum to 1
    return -torch.xlogy(p, p).sum(-1)  # (..., T)


@dataclass
class AttentionProfile:
    """Per-layer means over every (sequence, head) matrix of the batches read; ``None`` where not computed."""

    entropy: np.ndarray  # (L,) nats
    effective_rank: np.ndarray | None  # (L,)
    top1_ratio: np.ndarray | None  # (L,)
    n_matrices: int  # per layer: sequences x heads
    n_batches: int
    seq_len: int


@torch.no_grad()
def attention_profile(model: nn.Module, batches: Iterable[Tensor], rank: bool = True) -> AttentionProfile:
    """Run ``model`` (tokens (B, T) -> (out, one aux per layer), aux['weights'] (B, H, T, T) with
    ``need_weights=True``) on ``batches`` and average each layer's entropy (and, with ``rank``, effective rank and
    top-1 ratio) over all its (sequence, head) matrices."""
    forward = getattr(model, "forward_hidden", model)  # GPTLM: skip the 50,257-way head, its logits are unused
    sums: dict[str, np.ndarray] = {}
    n = n_batches = seq_len = 0
    for x in batches:
        _, auxes = forward(x, need_weights=True)
        per_layer: dict[str, list[float]] = {"entropy": [], "effective_rank": [], "top1_ratio": []}
        for i, aux in enumerate(auxes):
            if "weights" not in aux:
                raise ValueError(f"layer {i} ({type(model).__name__}) returned no aux['weights'] with need_weights")
            w = aux["weights"]  # (B, H, T, T)
            per_layer["entropy"].append(float(row_entropy(w).mean(-1).sum()))
            if rank:
                er, top1 = spectrum_stats(w)  # (B, H) each
                per_layer["effective_rank"].append(float(er.sum()))
                per_layer["top1_ratio"].append(float(top1.sum()))
        for k, v in per_layer.items():
            if v:
                sums[k] = sums.get(k, 0.0) + np.asarray(v)
        n += int(w.shape[0] * w.shape[1])
        n_batches, seq_len = n_batches + 1, int(w.shape[-1])
    if not n:
        raise ValueError("no batches to read attention maps from")
    mean = {k: v / n for k, v in sums.items()}
    return AttentionProfile(mean["entropy"], mean.get("effective_rank"), mean.get("top1_ratio"), n, n_batches,
                            seq_len)


# ------------------------------------------------------------------------------------------ runs -> profiles
def _device(device: str) -> str:
    return ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device


def variant_runs(name: str, source: str, variants: list[dict[str, Any]], **_: Any) -> RunNeeds:
    """The cells of table ``source`` that Table 12 and Figure 3 read: one per variant (``{label, row[, column]}``)."""
    return RunNeeds(name, {v.get("label", v["row"]): SourceCell(source, v["row"], v.get("column")) for v in variants})


def variant_profiles(name: str, budget: str, found: SourceRuns, n_batches: int, device: str = "auto",
                     rank: bool = True) -> tuple[dict[str, list[AttentionProfile]], dict[str, list[Path]], list[str]]:
    """Profiles of every finished seed of each variant (``found``: the engine's runs of :func:`variant_runs`);
    runs that share a data config share one set-up data module (the same validation tokens)."""
    runs, notes = found.runs, list(found.notes)
    dev = _device(device)
    datamodules: dict[str, Any] = {}
    out: dict[str, list[AttentionProfile]] = {}
    for label, paths in runs.items():
        if not paths:
            raise MissingRunsError(f"{name}: {label} has no finished run at budget={budget} (all diverged?)")
        out[label] = []
        for path in paths:
            key = OmegaConf.to_yaml(OmegaConf.load(Path(path) / "config.yaml").data)
            run = load_run(path, datamodule=datamodules.get(key), map_location=dev)
            datamodules[key] = run.datamodule
            batches = (b[0].to(dev) for b in run.val_batches(n_batches))  # x (B, T); targets unused
            out[label].append(attention_profile(run.model, batches, rank=rank))
    return out, runs, notes


def _layer_names(profiles: dict[str, list[AttentionProfile]], attr: str) -> list[str]:
    return [f"L{i}" for i in range(max(len(getattr(p, attr)) for ps in profiles.values() for p in ps))]


def _per_layer(ps: list[AttentionProfile], attr: str, i: int) -> list[float]:
    return [float(getattr(p, attr)[i]) for p in ps if i < len(getattr(p, attr))]


def _units(vals: list[float], paths: list[Path]) -> list[str] | None:
    """The run id of each of a variant's per-seed values (its layers are measured on the same models, so a claim
    comparing two layers of one variant is paired: :mod:`oscrepro.claims.verdict`); None if they do not align."""
    return [Path(p).name for p in paths] if len(vals) == len(paths) else None


def _protocol_note(profiles: dict[str, list[AttentionProfile]], runs: dict[str, list[Path]], n_asked: int,
                   n_paper_layers: int) -> str:
    p = next(iter(profiles.values()))[0]
    n_layers = len(p.entropy)
    layers = (f"{n_layers} layers, as the paper's model" if n_layers == n_paper_layers else
              f"{n_layers} layers (the paper's model has {n_paper_layers}; one column per layer of ours)")
    seeds = ", ".join(f"{k} {len(v)}" for k, v in runs.items())
    return (f"**Protocol:** the first {p.n_batches} validation batches (asked {n_asked}) of each run's data module, "
            f"{p.n_matrices:,} matrices (sequences x heads) per layer of T = {p.seq_len} tokens; {layers}. "
            f"Seeds per variant: {seeds}; cells are mean ± std over seeds.")


# ---------------------------------------------------------------------------------------------- Table 12
@reads_runs(variant_runs)
def coupledqk_table12(out_dir: Path, budget: str, results_dir: Path, runs: SourceRuns, name: str, source: str,
                      variants: list[dict[str, Any]], paper: dict[str, dict[str, Any]], n_batches: int = 25,
                      device: str = "auto") -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """coupledqk Table 12 (App. D): per-layer effective rank of the attention maps, its layer mean and the top-1
    singular-value ratio, ours (Table 1's runs) above the paper's row for each variant."""
    profiles, found, notes = variant_profiles(name, budget, runs, n_batches, device, rank=True)
    layers = _layer_names(profiles, "effective_rank")
    columns = ["Attention", "Values", *layers, "Mean", "σ1/Σσ"]
    rows = []
    for label, ps in profiles.items():
        # the row label names no seed count (claims address the row; the planner may raise one variant's seeds):
        # each cell carries its n
        ours = {"Attention": label, "Values": "ours"}
        for i, col in enumerate(layers):
            vals = _per_layer(ps, "effective_rank", i)
            # 'mean ± std (n=k)' in the .md, numbers (and each run's value) in the csv
            ours[col] = SeedStat.of(vals, 1, show_n=True, units=_units(vals, found[label]))
        ours["Mean"] = SeedStat.of([float(p.effective_rank.mean()) for p in ps], 1, show_n=True)
        ours["σ1/Σσ"] = SeedStat.of([float(p.top1_ratio.mean()) for p in ps], 3, show_n=True)
        rows.append(ours)
        ref = paper.get(label)
        if ref:
            same = len(ref["layers"]) == len(layers)
            row = {"Attention": label, "Values": f"paper ({ref.get('name', label)})"}
            row.update({c: Num(ref["layers"][i], "{:.1f}") if same else MISSING for i, c in enumerate(layers)})
            row.update({"Mean": Num(ref["mean"], "{:.1f}"), "σ1/Σσ": Num(ref["top1"], "{:.3f}")})
            rows.append(row)
    n_paper = max(len(r["layers"]) for r in paper.values())
    notes.append(_protocol_note(profiles, found, n_batches, n_paper))
    for label, ref in paper.items():
        if len(ref["layers"]) != len(layers):
            notes.append(f"**Paper, {ref.get('name', label)} ({len(ref['layers'])} layers):** "
                         + " ".join(f"{v:.1f}" for v in ref["layers"]) + f" | mean {ref['mean']:.1f}")
    labels = list(profiles)
    if len(labels) == 2:  # the paper's comparison: the second variant against the first
        notes.append(_compare_note(profiles[labels[0]], profiles[labels[1]], labels, paper))
    notes.append("**Scale:** the effective rank is at most T; ours is at T = the run's validation seq-len, the "
                 "paper's at 512, so only the profile over layers and the ordering of variants compare.")
    return columns, rows, notes


def _compare_note(base: list[AttentionProfile], other: list[AttentionProfile], labels: list[str],
                  paper: dict[str, dict[str, Any]]) -> str:
    b = np.mean([p.effective_rank for p in base], axis=0)
    o = np.mean([p.effective_rank for p in other], axis=0)
    t_b, t_o = (np.mean([p.top1_ratio.mean() for p in ps]) for ps in (base, other))
    text = (f"**{labels[1]} vs {labels[0]} (seed means):** higher effective rank in {int((o > b).sum())} of {len(b)} "
            f"layers, mean {100 * (o.mean() / b.mean() - 1):+.1f} %, top-1 ratio {t_o:.3f} vs {t_b:.3f}")
    pb, po = paper.get(labels[0]), paper.get(labels[1])
    if pb and po:
        wins = sum(x > y for x, y in zip(po["layers"], pb["layers"], strict=True))
        text += (f" (paper: {wins} of {len(pb['layers'])} layers, mean {100 * (po['mean'] / pb['mean'] - 1):+.1f} %, "
                 f"top-1 {po['top1']:.3f} vs {pb['top1']:.3f})")
    return text + "."


# ---------------------------------------------------------------------------------------------- Figure 3
@reads_runs(variant_runs)
def coupledqk_fig3(out_dir: Path, budget: str, results_dir: Path, runs: SourceRuns, name: str, source: str,
                   variants: list[dict[str, Any]], paper: dict[str, Any], n_batches: int = 25,
                   device: str = "auto", figure: str = "fig3.png") -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """coupledqk Figure 3 (App. D): per-layer mean attention-row entropy of each variant, with the paper's
    reading at its dip layer beside ours and a PNG with one line per variant (seed std as error bars)."""
    profiles, found, notes = variant_profiles(name, budget, runs, n_batches, device, rank=False)
    layers = _layer_names(profiles, "entropy")
    dip = int(paper["dip_layer"])
    dip_col = f"L{dip} paper (≈)"
    columns = ["Attention", *layers, "Mean", "Lowest layer (ours)", dip_col]
    rows = []
    for label, ps in profiles.items():
        row: dict[str, Any] = {"Attention": label}
        for i, col in enumerate(layers):
            vals = _per_layer(ps, "entropy", i)
            row[col] = SeedStat.of(vals, 2, units=_units(vals, found[label]))
        mean = np.mean([p.entropy for p in ps], axis=0)
        row["Mean"] = SeedStat.of([float(p.entropy.mean()) for p in ps], 2)
        row["Lowest layer (ours)"] = Num(int(mean.argmin()), "L{} ({:.2f})", (float(mean.min()),))
        ref = paper["dip"].get(label)
        row[dip_col] = MISSING if ref is None else Num(ref, "{:.2f}")
        rows.append(row)
    from oscrepro.tables.spec import load_spec

    png = plot_entropy(profiles, Path(out_dir) / figure, paper, f"{name}, budget={budget}",
                       caption=fig3_caption(load_spec(name), budget))
    notes.append(f"**Figure:** `{png.name}` (one line per variant; error bars = seed std; hollow diamonds = the "
                 f"paper's values read off Figure 3a at layer {dip}).")
    notes.append(_protocol_note(profiles, found, n_batches, int(paper["n_layers"])))
    t = next(iter(profiles.values()))[0].seq_len
    notes.append(f"**Ceiling:** a uniform causal map has mean row entropy {uniform_causal_entropy(t):.2f} nats at "
                 f"T = {t} (ours), {uniform_causal_entropy(512):.2f} at the paper's 512.")
    notes += [f"**Paper (Fig. 3a):** {p}" for p in paper.get("reading", [])]
    return columns, rows, notes


def plot_entropy(profiles: dict[str, list[AttentionProfile]], path: Path, paper: dict[str, Any], title: str,
                 caption: str | None = None) -> Path:
    """Figure 3: entropy (nats) vs layer, one line per variant, seed mean ± std, paper dip values as markers."""
    curves = {}
    for label, ps in profiles.items():
        e = np.stack([p.entropy for p in ps])  # (seeds, L)
        curves[label] = (e.mean(0), e.std(0, ddof=1) if len(ps) > 1 else None)
    return plot_entropy_curves(curves, path, paper, title, caption)


def plot_entropy_curves(curves: dict[str, tuple[np.ndarray, np.ndarray | None]], path: Path, paper: dict[str, Any],
                        title: str, caption: str | None = None) -> Path:
    """Figure 3 from per-variant (mean, std) entropy per layer: our lines with seed-std error bars, the paper's
    values read off Figure 3a at its dip layer as hollow diamonds in the variant's colour, named in the legend."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from oscrepro.analysis.figures import PAPER, paper_label, save_figure

    fig = Figure(figsize=(9.5, 4.6))
    ax = fig.add_subplot()
    dip = int(paper["dip_layer"])
    for i, (label, (mean, std)) in enumerate(curves.items()):
        color = f"C{i}"  # the paper's marker of a variant in its line's colour
        ax.errorbar(np.arange(len(mean)), mean, yerr=std, marker="o", ms=4, capsize=3, color=color,
                    label=f"{label} (ours)")
        ref = paper["dip"].get(label)
        if ref is not None and dip < len(mean):
            ax.plot([dip], [ref], **{**PAPER, "mec": color}, label=paper_label(f"{label}, Fig. 3a layer {dip} (≈)"))
    ax.set_xlabel("Layer")
    ax.set_ylabel("Shannon entropy (nats)")
    ax.set_title(f"Attention entropy per layer ({title})", fontsize=9)
    ax.xaxis.get_major_locator().set_params(integer=True)
    handles, labels = ax.get_legend_handles_labels()
    if not any(lb.startswith("paper") for lb in labels):  # no paper value at our depth: say so in the legend
        handles.append(Line2D([], [], **PAPER))
        labels.append(paper_label(f"Fig. 3a layer {dip} (beyond our {max(len(m) for m, _ in curves.values())} "
                                  "layers)"))
    order = sorted(range(len(labels)), key=lambda k: labels[k].startswith("paper"))  # ours first, then the paper
    ax.legend([handles[k] for k in order], [labels[k] for k in order], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return save_figure(fig, path, caption=caption)


def redraw_fig3(spec: Any, budget: str, out_dir: Path, rows: list[dict[str, str]]) -> Path:
    """Figure 3 redrawn from the committed csv (``python -m oscrepro.tables.redraw coupledqk/fig3``): per-layer
    seed mean ± std of each variant; the paper's dip values from the spec (reference data)."""
    from oscrepro.analysis.figures import cell_stat

    layers = [c for c in rows[0] if c.startswith("L") and c[1:].isdigit()]
    curves = {}
    for r in rows:
        stats = [cell_stat(r, c) for c in layers]
        std = np.array([s for _, s in stats])
        curves[r["Attention"]] = (np.array([m for m, _ in stats]), None if np.isnan(std).all() else std)
    a = spec.analysis
    return plot_entropy_curves(curves, out_dir / a.get("figure", "fig3.png"), a["paper"],
                               f"{a['name']}, budget={budget}", caption=fig3_caption(spec, budget))


def fig3_caption(spec: Any, budget: str) -> str:
    """Figure 3's caption: the budget and how to read the markers."""
    from oscrepro.analysis.figures import spec_caption

    return (spec_caption(spec, budget) + " Lines: our seed mean per layer, error bars seed std. Hollow diamonds: "
            "the paper's layer-2 values read off Figure 3a (reference data; the paper's model has 8 layers).")


def uniform_causal_entropy(t: int) -> float:
    """Mean row entropy of the uniform causal T x T map, mean_i log(i + 1): the ceiling of Figure 3 at seq-len T."""
    return float(np.mean([math.log(i + 1) for i in range(t)]))
