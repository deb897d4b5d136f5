"""fsn Table 2 and Figure 3 (§4.6): wall-clock for the FSN to reach the transformer's final validation loss.

Reproduces the paper's cross-seed wall-clock comparison on the enwik8 scale ladder (``conf/table/fsn/table2.yaml``):
per rung, each FSN seed's time to first reach the transformer's final validation bpc (linear between epoch ends)
over the transformer's total wall-clock, against the mean transformer and against its lowest-loss seed, plus the
per-epoch slowdown; Figure 3 plots the validation curves against cumulative wall-clock.

It is its own module because this protocol (per-epoch curves, crossing times, ratios) shares nothing with the other
fsn analyses but the run lookup: the ladder's cells are declared (:func:`table2_runs`) and the engine locates,
trains and passes them (:mod:`oscrepro.tables.sources`); it raises :class:`~oscrepro.tables.runs.MissingRunsError`
when they are not there and may not be trained.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from oscrepro.analysis.figures import save_figure
from oscrepro.tables.sources import RunNeeds, SourceCell, SourceRuns, reads_runs
from oscrepro.tables.values import MISSING, Num


# ----------------------------------------------------------------------------------- Table 2: wall-clock
@dataclass(frozen=True)
class Curve:
    """Validation curve of one run: value at the end of each epoch and the cumulative wall-clock (s) there."""

    values: np.ndarray  # (E,)
    times: np.ndarray  # (E,)

    @property
    def final(self) -> float:
        return float(self.values[-1])

    @property
    def total(self) -> float:
        return float(self.times[-1])


def read_curve(run_dir: Path, metric: str = "val/bpc", time_column: str | None = None) -> Curve:
    """Per-epoch ``metric`` from history.csv; times from ``time_column`` if logged, else the run's
    ``train_wall_time_s`` split uniformly over its epochs (epoch e ends at wall * (e + 1) / E)."""
    by_epoch: dict[int, tuple[float, float]] = {}
    with open(Path(run_dir) / "history.csv") as fh:
        for r in csv.DictReader(fh):
            if r.get(metric):
                t = float(r[time_column]) if time_column and r.get(time_column) else math.nan
                by_epoch[int(r["epoch"])] = (float(r[metric]), t)
    if not by_epoch:
        raise ValueError(f"{run_dir}/history.csv has no {metric!r} rows")
    vals = np.array([by_epoch[e][0] for e in sorted(by_epoch)])
    times = np.array([by_epoch[e][1] for e in sorted(by_epoch)])
    if np.isnan(times).any():
        wall = float(json.loads((Path(run_dir) / "metrics.json").read_text())["train_wall_time_s"])
        times = wall * np.arange(1, vals.size + 1) / vals.size
    return Curve(vals, times)


def crossing_time(curve: Curve, target: float) -> float:
    """First time the curve is at or below ``target``: linear between epoch ends (the first epoch end if already
    below there); ``inf`` if never reached."""
    hit = np.flatnonzero(curve.values <= target)
    if hit.size == 0:
        return math.inf
    i = int(hit[0])
    if i == 0:
        return float(curve.times[0])
    v0, v1, t0, t1 = curve.values[i - 1], curve.values[i], curve.times[i - 1], curve.times[i]
    return float(t0 + (t1 - t0) * (v0 - target) / (v0 - v1))


def _ratios(fsn: list[Curve], target: float, wall: float) -> dict[str, float]:
    r = np.array([crossing_time(c, target) / wall for c in fsn])
    ok = r[np.isfinite(r)]
    return {"median": float(np.median(r)) if ok.size == r.size else math.nan, "min": float(ok.min(initial=math.inf)),
            "max": float(ok.max(initial=-math.inf)), "n": int(r.size), "n_reached": int(ok.size)}


def crossing_ratios(fsn: list[Curve], xf: list[Curve]) -> dict[str, Any]:
    """Table 2 row (§4.6): per-epoch slowdown (mean FSN / mean XF wall per epoch); FSN time to reach the mean
    transformer's final loss over the mean transformer wall-clock, and likewise for the lowest-loss transformer
    seed; median [min, max] over FSN seeds (the median is nan when some seed never reaches the target)."""
    per_epoch = lambda cs: float(np.mean([c.total / c.values.size for c in cs]))
    target_mean, wall_mean = float(np.mean([c.final for c in xf])), float(np.mean([c.total for c in xf]))
    best = min(xf, key=lambda c: c.final)
    return {"slowdown": per_epoch(fsn) / per_epoch(xf), "target_mean": target_mean,
            "vs_mean": _ratios(fsn, target_mean, wall_mean), "vs_lowest": _ratios(fsn, best.final, best.total)}


def plot_figure3(panels: list[tuple[str, list[Curve], list[Curve], dict[str, Any]]], path: Path,
                 paper: dict[str, dict[str, Any]] | None = None, caption: str | None = None) -> Path:
    """Figure 3: validation loss against cumulative wall-clock per rung (FSN blue, transformer grey, a marker at every
    epoch end: a one-epoch run is a point), the mean transformer target dashed, and where the paper's FSN reached
    it: its Table 2 ratio (``paper[rung]["vs_mean"]``, reference data) times our mean transformer wall-clock."""
    from matplotlib.figure import Figure

    from oscrepro.analysis.figures import PAPER_LINE, paper_label

    fig = Figure(figsize=(4.2 * len(panels), 3.9))
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    for ax, (label, fsn, xf, res) in zip(axes, panels, strict=True):
        for curves, color, name in ((fsn, "C0", "FSN (ours)"), (xf, "gray", "transformer (ours)")):
            for i, c in enumerate(curves):
                ax.plot(c.times, c.values, color=color, alpha=0.8, marker="o", ms=4, label=name if i == 0 else None)
        ax.axhline(res["target_mean"], ls="--", color="gray", lw=0.8, label="target: mean transformer final")
        ratio = (paper or {}).get(label, {}).get("vs_mean")
        if ratio is not None:
            wall = float(np.mean([c.total for c in xf]))
            r = ratio[0] if isinstance(ratio, (list, tuple)) else float(ratio)
            ax.axvline(r * wall, **PAPER_LINE, label=paper_label(f"FSN reaches it at {r:.2f}x (Table 2)"))
        ax.set(title=f"{label} ({len(fsn)}×{len(xf)} seeds)", xlabel="cumulative wall-clock (s)", ylabel="val bpc")
        ax.legend(fontsize=7)
    return save_figure(fig, path, caption=caption)


# ------------------------------------------------------------------------------------------------ Table 2
RATIO = "{:.2f}× [{:.2f}, {:.2f}]"  # a median ratio and its [min, max] over seeds


def _ratio_text(r: dict[str, float]) -> Num | str:
    if r["n_reached"] == 0:
        return f"not reached (0/{r['n']})"
    if r["n_reached"] < r["n"]:
        return Num(r["n"] - r["n_reached"], "{} of {} not reached; reached [{:.2f}, {:.2f}]",
                   (r["n"], r["min"], r["max"]))
    return Num(r["median"], RATIO, (r["min"], r["max"]))


def table2_runs(source: str, rungs: list[dict[str, Any]], fsn_column: str, transformer_column: str, **_: Any
                ) -> RunNeeds:
    """The ladder cells Table 2 reads: each rung's FSN and transformer (metrics and history only: no weights)."""
    cells = {f"{r['row']}|fsn": SourceCell(source, r["row"], fsn_column, checkpoints=False) for r in rungs}
    cells.update({f"{r['row']}|xf": SourceCell(source, r["row"], transformer_column, checkpoints=False)
                  for r in rungs})
    return RunNeeds("fsn/table2", cells)


@reads_runs(table2_runs)
def fsn_table2(out_dir: Path, budget: str, results_dir: Path, runs: SourceRuns, source: str,
               rungs: list[dict[str, Any]], fsn_column: str, transformer_column: str, metric: str = "val/bpc",
               time_column: str | None = None) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """fsn Table 2 (§4.6): wall-clock for each FSN seed to reach the transformer's final validation loss, per rung
    of ``source`` (the ladder, :func:`table2_runs`); also writes Figure 3 (``fig3.png``). Protocol:
    :func:`crossing_ratios`."""
    notes = list(runs.notes)
    rows, panels = [], []
    for rung in rungs:
        fsn = [read_curve(p, metric, time_column) for p in runs[f"{rung['row']}|fsn"]]
        xf = [read_curve(p, metric, time_column) for p in runs[f"{rung['row']}|xf"]]
        paper = rung.get("paper", {})
        row = {"Params": rung["row"], "seeds FSN × XF (ours)": f"{len(fsn)}×{len(xf)}",
               "seeds (paper)": paper.get("seeds", "—")}
        if fsn and xf:
            res = crossing_ratios(fsn, xf)
            row.update({"per-epoch slowdown (ours)": Num(res["slowdown"], "{:.2f}×"),
                        "per-epoch slowdown (paper)": _paper_x(paper.get("slowdown")),
                        "vs mean transf. (ours)": _ratio_text(res["vs_mean"]),
                        "vs mean transf. (paper)": _paper_x(paper.get("vs_mean")),
                        "vs lowest-loss transf. (ours)": _ratio_text(res["vs_lowest"]),
                        "vs lowest-loss transf. (paper)": _paper_x(paper.get("vs_lowest")),
                        f"target {metric} (mean XF final)": Num(res["target_mean"], "{:.4f}")})
            panels.append((rung["row"], fsn, xf, res))
        rows.append(row)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    rows = [{c: r.get(c, MISSING) for c in columns} for r in rows]
    if panels:
        from oscrepro.analysis.figures import spec_caption
        from oscrepro.tables.spec import load_spec

        caption = (spec_caption(load_spec("fsn/table2"), budget) + " Dotted: the paper's Table 2 ratio (FSN time to "
                   "the mean transformer's final loss) times our mean transformer wall-clock.")
        png = plot_figure3(panels, Path(out_dir) / "fig3.png", {r["row"]: r.get("paper", {}) for r in rungs}, caption)
        notes.append(f"**Figure 3:** `{png.name}`.")
    uniform = ("epoch e ends at train_wall_time_s × (e + 1) / epochs (uniform epochs; includes data setup and "
               "the test pass)")
    clock = (f"history column `{time_column}` (seconds since fit start) where the run logged it, else {uniform}"
             if time_column else uniform)
    notes += [f"**Protocol (§4.6):** target = each transformer's final {metric}; FSN crossing = first epoch end "
              "at or below it, linearly interpolated between epoch ends (the first epoch end if already below); "
              "ratio = FSN crossing time / transformer total time; median [min, max] over FSN seeds. "
              f"Wall-clock: {clock}.",
              f"**Runs:** table `{source}`, columns `{fsn_column}` / `{transformer_column}`."]
    return columns, rows, notes


def _paper_x(value: Any) -> Num | str:
    if value is None:
        return MISSING
    if isinstance(value, (list, tuple)):
        return Num(value[0], RATIO, (value[1], value[2])) if len(value) == 3 else Num(value[0], "{:.2f}×")
    return Num(float(value), "{:.2f}×")
