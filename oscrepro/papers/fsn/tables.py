"""Analysis adapters and post hooks of the fsn tables (``conf/table/fsn/*.yaml``): Tables 3-5, Figure 2, ladder;
Table 2 / Figure 3 (wall-clock) live in :mod:`oscrepro.papers.fsn.wallclock`, step time in
:mod:`oscrepro.papers.fsn.step_time`.

The engine calls an analysis adapter as ``fn(out_dir=..., budget=..., results_dir=..., **spec.analysis)``; it
returns ``(columns, rows, notes)`` with numbers, which the engine formats (:mod:`oscrepro.tables.render`). Tables
4, 5 and Figure 2 read the run records of another table's cells (Table 1) for the same budget: each declares them
(:func:`oscrepro.tables.sources.reads_runs`) and the engine plans, trains (unless the spec's ``train_missing`` is
false: then missing runs raise :class:`~oscrepro.tables.runs.MissingRunsError` naming the table that trains them;
the smoke budget trains them, seconds, so that every fsn table builds on its own at smoke) and passes them as
``runs``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from oscrepro.analysis.figures import figure_notes
from oscrepro.papers.fsn.ngram import ngram_notes
from oscrepro.runs.compose import compose_run
from oscrepro.tables.runs import MissingRunsError, load_run
from oscrepro.tables.sources import RunNeeds, SourceCell, SourceRuns, reads_runs
from oscrepro.tables.spec import load_spec
from oscrepro.tables.values import MISSING, Num


def _seed(run_dir: Path) -> int:
    return int(OmegaConf.load(Path(run_dir) / "config.yaml").seed)


# ------------------------------------------------------------------------------------------------ Table 3
def fsn_table3(out_dir: Path, budget: str, results_dir: Path, experiment: str, models: list[dict[str, Any]],
               vocab: dict[str, int], recipe: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """fsn Table 3 (App. A): configuration and realised parameter count of each model, from ``experiment`` with
    each model's per-corpus overrides composed at budget=paper and instantiated at the paper's vocabulary sizes;
    the shared recipe is checked against the paper's lower block."""
    from hydra.utils import instantiate

    rows, cfgs = [], []
    for m in models:
        for corpus, overrides in m["overrides"].items():
            cfg = compose_run([f"experiment={m.get('experiment', experiment)}", "budget=paper", *overrides])
            cfgs.append(cfg)
            model = instantiate(cfg.model, vocab_size=int(vocab[corpus]))
            n = sum(p.numel() for p in model.parameters())
            paper = (m.get("paper") or {}).get(corpus)
            att = cfg.model.get("attention")
            rows.append({
                "Model": m["label"], "Corpus": f"{corpus} (V={vocab[corpus]})",
                "overrides": " ".join([f"experiment={m.get('experiment', experiment)}", *overrides]),
                "Width": f"k={model.k} phases" if hasattr(model, "k") else f"d={model.d_model}",
                "Layers": int(cfg.model.n_layers),
                "Feed-forward": _ffn_text(cfg, model),
                "Coupling": "RoPE softmax, 1 head" if att is None else _coupling_text(att),
                "Params (ours)": n, "Params (paper)": None if paper is None else int(paper),
                "Δ": None if paper is None else n - int(paper)})
    notes = [f"**Composed at budget=paper** (the paper's configuration at every budget; no training). "
             f"Vocabulary sizes are the paper's ({', '.join(f'{k} {v}' for k, v in vocab.items())})."]
    for key, want in recipe.items():
        got = sorted({str(OmegaConf.select(c, key)) for c in cfgs})
        ok = got == [str(want)] or (isinstance(want, list) and set(got) == {str(w) for w in want})
        notes.append(f"**Recipe `{key}`:** ours {', '.join(got)} / paper {want} — {'same' if ok else 'DIFFERENT'}")
    return list(rows[0]), rows, notes


def _ffn_text(cfg: Any, model: Any) -> str:
    if not hasattr(model, "layers"):
        return f"SwiGLU ×{cfg.model.ffn_mult}"
    ffn = model.layers[0].ffn
    name = type(ffn).__name__
    if name == "SwiGLUPhaseFFN":
        return f"SwiGLU ×{cfg.model.ffn.hidden_mult} on raw phases"
    reg = f" + {cfg.model.ffn.n_register} register" if name == "WindingRegisterFFN" else ""
    return f"collective modes M={ffn.n_modes}{reg}"


def _coupling_text(att: Any) -> str:
    target = str(att._target_).rsplit(".", 1)[-1]
    if target == "KuramotoAttention":
        return "Kuramoto (base layer)"
    kind = "complex" if att.get("static_phases", True) else "real"
    return f"FSN kernel N={att.n_harmonics} {kind}{', delay' if att.get('delay', True) else ''}"


# ------------------------------------------------------------------------------------------ Tables 4 / 5
def paper_bin_means(paper: dict[str, Any]) -> dict[str, list[float]]:
    """Family -> the paper's seed-mean margin per bin, from the spec's ``paper.families.<name>.<seed>.mean``."""
    out = {}
    for fam, seeds in (paper.get("families") or {}).items():
        means = [s["mean"] for s in seeds.values() if s.get("mean") is not None]
        if means:
            out[fam] = [sum(v) / len(v) for v in zip(*means, strict=True)]
    return out


def bins_caption(key: str, budget: str) -> str:
    """The bin figure's caption: the budget (the spec's notes) and how the paper's values are drawn."""
    from oscrepro.analysis.figures import spec_caption
    from oscrepro.tables.spec import load_spec

    return (spec_caption(load_spec(key), budget) + " Bars: our seed mean, whiskers the per-seed range; hollow "
            "diamonds: the paper's seed-mean margins (App. C, reference data).")


def redraw_bins(spec: Any, budget: str, out_dir: Path, rows: list[dict[str, str]]) -> Path:
    """The copy-depth bin figure redrawn from the committed csv (``python -m oscrepro.tables.redraw fsn/table4``):
    each seed row's ``<bin> (ours)`` margin (the text before its interval)."""

    from oscrepro.papers.fsn.copy_depth import plot_bin_bars

    labels = [c.removesuffix(" (ours)") for c in rows[0] if c.endswith(" (ours)")]
    seeds: dict[str, list[list[float]]] = {}
    for r in rows:
        if r["Row"].startswith("s") and r["Row"][1:].isdigit():
            seeds.setdefault(r["Model"], []).append([float(r[f"{b} (ours)"].split()[0]) for b in labels])
    stats = {fam: (np.mean(v, 0), np.min(v, 0), np.max(v, 0)) for fam, v in seeds.items()}  # (bins,) each
    a = spec.analysis
    path = out_dir / a["figures"]["bins"]
    return plot_bin_bars(labels, stats, path, f"{a['name']}, budget={budget}", paper_bin_means(a.get("paper", {})),
                         bins_caption(spec.key, budget))


def copy_depth_runs(name: str, source: str, reference: dict[str, Any], families: list[dict[str, Any]],
                    overrides: list[str] | None = None, **_: Any) -> RunNeeds:
    """The Table-1 cells Tables 4 / 5 read: the reference row and each family's row. ``overrides``: the extra
    overrides of a variant build of ``source`` (e.g. ``+lr_schedule=cosine``): the margins are then those of the
    variant's models."""
    over = tuple(overrides or ())
    cells = {"__ref__": SourceCell(source, reference["row"], reference.get("column"), overrides=over)}
    cells.update({f["name"]: SourceCell(source, f["row"], f.get("column"), overrides=over,  # a family's seeds
                                        seeds=tuple(f["seeds"]) if f.get("seeds") is not None else None)
                  for f in families})
    return RunNeeds(name, cells)


@reads_runs(copy_depth_runs)
def fsn_copy_depth(out_dir: Path, budget: str, results_dir: Path, runs: SourceRuns, name: str, source: str,
                   reference: dict[str, Any], families: list[dict[str, Any]], paper: dict[str, Any],
                   n_standard: int = 1024, n_enriched: int = 192, n_resamples: int = 4000, seed: int = 0,
                   cap: int = 32, batch_size: int = 64, device: str = "auto", figures: dict[str, Any] | None = None
                   ) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """fsn Tables 4 / 5 (App. C): per-seed copy-depth margins of ``families`` (Table-1 cells of ``source``,
    :func:`copy_depth_runs`) against ``reference`` (``mode`` best | mean), computed by
    :mod:`oscrepro.papers.fsn.copy_depth_eval`."""
    from oscrepro.papers.fsn.copy_depth import per_depth_curve, plot_bin_margins, plot_depth_curves, table_rows
    from oscrepro.papers.fsn.copy_depth_eval import best_epoch, copy_depth_battery

    notes = list(runs.notes)
    fam_runs = {f["name"]: [p for p in runs[f["name"]] if f.get("seeds") is None or _seed(p) in f["seeds"]]
                for f in families}
    fam_runs = {k: v for k, v in fam_runs.items() if v}
    if not runs["__ref__"] or not fam_runs:
        raise MissingRunsError(f"{name}: no finished reference or model run (all diverged?)")
    bat = copy_depth_battery(runs["__ref__"], fam_runs, reference.get("mode", "best"), n_standard, n_enriched,
                             n_resamples, seed, cap, batch_size, device)
    bins = [m.label for m in next(iter(bat.families.values()))[0]]
    columns = ["Model", "Row", "Checkpoint"] + [f"{b} {s}" for b in bins for s in ("(ours)", "(paper)")]
    rows = []
    for r in table_rows(bat.families):
        fam = "Tokens" if r["row"] == "count" else r["model"]
        pap = paper.get("tokens") if fam == "Tokens" else (paper.get("families", {}).get(fam) or {}).get(r["row"])
        row = {"Model": fam, "Row": "" if fam == "Tokens" else r["row"], "Checkpoint": ""}
        if r["row"].startswith("s"):  # table_rows numbers seeds by position: relabel with the run's own seed
            path = bat.runs[fam][int(r["row"][1:])]
            row["Row"] = f"s{_seed(path)}"
            pap = (paper.get("families", {}).get(fam) or {}).get(row["Row"])
            row["Checkpoint"] = f"last ({path.name}; best val epoch {best_epoch(path)[0]})"
        for i, b in enumerate(bins):
            row[f"{b} (ours)"] = _margin_text(r, i)
            row[f"{b} (paper)"] = _paper_margin(pap, i, fam == "Tokens")
        rows.append(row)
    figures = figures or {}
    if figures.get("bins"):
        png = plot_bin_margins(bat.families, Path(out_dir) / figures["bins"], f"{name}, budget={budget}",
                               paper_bin_means(paper), bins_caption(name, budget))
        notes.append(f"**Figure (bins, seed mean, whiskers = per-seed range):** `{png.name}`")
    if figures.get("curves"):
        curves = {f: per_depth_curve([d["standard"] for d in bat.deltas[f]], bat.depth["standard"],
                                     [d["enriched"] for d in bat.deltas[f]], bat.depth["enriched"], seed=seed)
                  for f in figures.get("curve_families", list(bat.deltas)) if f in bat.deltas}
        png = plot_depth_curves(curves, Path(out_dir) / figures["curves"], f"{name} (Figure 4), budget={budget}",
                                **depth_curves_paper(name, budget, paper, list(curves)))
        notes.append(f"**Figure (exact depth 0..32, position bootstrap):** `{png.name}`")
        notes += figure_notes(load_spec(name))  # what the figure draws of the paper (the spec's figure.note)
    ref_txt = ", ".join(p.name for p in bat.reference)
    notes += [f"**Reference ({reference.get('mode', 'best')}):** {reference['row']} → {ref_txt}; margins = model − "
              "reference in bits per character, negative favours the model.",
              f"**Slices (App. C):** {bat.n_windows['standard']} standard + {bat.n_windows['enriched']} enriched "
              f"validation windows (asked {n_standard} + {n_enriched}); bins ≥ 16 pool both; window-cluster "
              f"bootstrap, {n_resamples} resamples. Data: {bat.source}.",
              "**Checkpoints:** the final epoch (`last.ckpt`); the paper uses each seed's best-validation epoch."]
    return columns, rows, notes


MARGIN_CI = "{:+.4f} [{:+.4f}, {:+.4f}]"  # a margin and its 95 % interval
MARGIN_RANGE = "{:+.4f} (range {:.4f})"  # a seed mean and the seeds' range
TOKENS = "{:,}"  # a token count


def depth_curves_paper(key: str, budget: str, paper: dict[str, Any], families: list[str]) -> dict[str, Any]:
    """The per-depth figure's paper values for ``families`` (Table 4's bin seed means from the spec's
    ``analysis.paper``; the depths §4.3 quotes from ``figure.paper.depth_points``) and its caption."""
    from oscrepro.analysis.figures import figure_block, paper_caption

    spec = load_spec(key)
    points = (figure_block(spec.path).get("paper") or {}).get("depth_points") or {}
    bins = paper_bin_means(paper)
    return {"paper_bins": {f: bins[f] for f in families if f in bins},
            "paper_points": {f: {int(d): float(v) for d, v in points[f].items()} for f in families if f in points},
            "caption": paper_caption(spec, budget, "curves")}


def _margin_text(r: dict[str, Any], i: int) -> Num | str:
    if r["row"] == "count":
        return Num(int(r["cells"][i]), TOKENS)
    v = r["cells"][i]
    if not math.isfinite(v):
        return "— (no tokens)"
    if "ci" in r:
        return Num(v, MARGIN_CI, tuple(r["ci"][i]))
    return Num(v, MARGIN_RANGE, (r["range"][i],))


def _paper_margin(p: Any, i: int, tokens: bool) -> Num | str:
    if p is None:
        return MISSING
    if tokens:
        return Num(int(p[i]), TOKENS)
    if "ci" in p:
        return Num(p["mean"][i], MARGIN_CI, tuple(p["ci"][i]))
    return Num(p["mean"][i], MARGIN_RANGE, (p["range"][i],)) if "range" in p else Num(p["mean"][i], "{:+.4f}")


# ---------------------------------------------------------------------------------------------- Figure 2
def figure2_runs(source: str, row: str, column: str | None = None, seed: int = 0, **_: Any) -> RunNeeds:
    """The Table-1 cell Figure 2 reads: its one FSN model (``seed``), so that only that seed's weights are
    recovered (a 2,000-step enwik8 run is ~40 core-minutes to retrain)."""
    return RunNeeds("fsn/fig2", {"fsn": SourceCell(source, row, column, seeds=(int(seed),))})


@reads_runs(figure2_runs)
def fsn_figure2(out_dir: Path, budget: str, results_dir: Path, runs: SourceRuns, source: str, row: str,
                seed: int = 0, column: str | None = None, gate_windows: int = 8, paper: list[str] | None = None
                ) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """fsn Figure 2 (§4.4): per-layer coupling functions and harmonic magnitudes read from a trained FSN."""
    import torch

    from oscrepro.papers.fsn.kernel_reading import (
        kernel_coefficients,
        layer_summary,
        plot_figure2,
        value_gate_negative_fraction,
    )

    notes = list(runs.notes)
    picked = [p for p in runs["fsn"] if _seed(p) == seed]
    if not picked:
        raise MissingRunsError(f"fsn/fig2: {row} has no finished seed {seed} at budget={budget}")
    run = load_run(picked[0])
    kernels = kernel_coefficients(run.model)
    rows = layer_summary(kernels)
    _, chunks = run.datamodule.eval_chunks("val", gate_windows)
    fractions = value_gate_negative_fraction(run.model, torch.from_numpy(chunks[:, :-1].astype(np.int64)))
    for r, f in zip(rows, fractions, strict=True):
        r["value gate < 0 (fraction)"] = f
    png = plot_figure2(kernels, Path(out_dir) / "fig2.png", f"fsn Figure 2: {row}, seed {seed}, budget={budget}",
                       **figure2_paper(budget))
    notes += [f"**Run:** {run.label}; **figure:** `{png.name}`. f_l = (1/k) Σ_a Σ_n [Re w0 sin nΔ + Im w0 cos nΔ]; "
              "rms|w^n| over coordinates; value-gate fraction on the first "
              f"{len(chunks)} validation windows."]
    notes += [f"**Paper (§4.4):** {p}" for p in (paper or [])]
    notes += figure_notes(load_spec("fsn/fig2"))  # what the figure draws of the paper (the spec's figure.note)
    columns = list(rows[0])
    return columns, [{c: r.get(c, math.nan) for c in columns} for r in rows], notes


def figure2_paper(budget: str) -> dict[str, Any]:
    """Figure 2's caption (budget, the paper's statements) and the present-field (layer, harmonic) pairs whose
    coordinate-mean real coefficient §4.4 states negative (the spec's ``figure.paper``; reference data)."""
    from oscrepro.analysis.figures import figure_block, paper_caption

    spec = load_spec("fsn/fig2")
    paper = figure_block(spec.path).get("paper") or {}
    return {"caption": paper_caption(spec, budget, "fig2"),
            "paper_negative": [tuple(p) for p in paper.get("negative_mean_re_present", [])]}


# -------------------------------------------------------------------------------------------- ladder post
def fsn_ladder_notes(spec: Any, cells: dict, out_dir: Path, budget: str, results_dir: Path, fsn_params: str,
                     transformer_params: str, paper_lighter_percent: dict[str, float],
                     corpora: dict[str, list[str]] | None = None) -> list[str]:
    """Ladder post hook: how much lighter each FSN rung is than its transformer partner, ours vs §4.5; with
    ``corpora``, the corpus's unigram / bigram levels (:func:`oscrepro.papers.fsn.ngram.ngram_notes`)."""
    notes = ngram_notes(spec, cells, out_dir, budget, results_dir, corpora) if corpora else []
    for ri, row in enumerate(spec.rows):
        f, x = cells[(ri, fsn_params)].mean, cells[(ri, transformer_params)].mean
        ours = "—" if not (np.isfinite(f) and np.isfinite(x)) else f"{100 * (x - f) / x:+.2f} %"
        ref = paper_lighter_percent.get(row.label)
        notes.append(f"**{row.label}: FSN lighter than the transformer by** {ours} (paper "
                     f"{'—' if ref is None else f'{ref:+.2f} %'})")
    return notes
