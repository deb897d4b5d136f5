"""Analysis adapters and post hooks of the fsn tables (``conf/table/fsn/*.yaml``): Tables 3-5, Figure 2, ladder;
Table 2 / Figure 3 (wall-clock) live in :mod:`oscrepro.tables.fsn_wallclock` and locate their runs here.

Analysis adapters are called by :func:`oscrepro.table.build_table` as ``fn(out_dir=..., **spec.analysis)`` and
return ``(columns, rows, notes)``. The table engine passes no budget to them, so every fsn analysis spec sets
``budget`` per budget under ``analysis.budgets`` (default ``paper``); the results root is ``results_root(out_dir)``
(``build_table`` writes to ``<results>/<paper>``).

Tables 2, 4, 5 and Figure 2 read the run records of another table's cells (Table 1 or the ladder) for the same
budget (:func:`source_runs`). A record is taken from its exact run id; failing that, from a finished record of
the same experiment whose config differs only in device keys (:data:`DEVICE_KEYS`), e.g. runs trained with
``trainer=gpu``. If runs are still missing the adapter raises :class:`MissingRunsError` naming the table that
trains them, unless ``train_missing`` is set (the smoke budget sets it: seconds of training, so that every fsn
table builds on its own at smoke).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from oscrepro.tables.plan import RunRequest, cell_overrides, compose_run
from oscrepro.tables.spec import load_spec, results_root
from oscrepro.utils.run_record import IGNORED_KEYS, run_id

DEVICE_KEYS = ("trainer.accelerator", "trainer.devices", "trainer.deterministic", "trainer.strategy")


class MissingRunsError(RuntimeError):
    """An fsn analysis table needs finished runs of another table that are not there."""


# ----------------------------------------------------------------------------------------- locating runs
def _normalised(container: dict) -> str:
    c = copy.deepcopy(container)
    for dotted in (*IGNORED_KEYS, *DEVICE_KEYS):
        *parents, leaf = dotted.split(".")
        d = c
        for p in parents:
            d = d.get(p) if isinstance(d, dict) else None
        if isinstance(d, dict):
            d.pop(leaf, None)
    return json.dumps(c, sort_keys=True, default=str)


def find_record(req: RunRequest) -> Path | None:
    """The finished record of ``req``: its exact run dir, else a device-only variant (latest first)."""
    if req.record.finished():
        return req.run_dir
    if not req.run_dir.parent.is_dir():
        return None
    want = _normalised(OmegaConf.to_container(req.cfg, resolve=True))
    hits = []
    for cfg_path in req.run_dir.parent.glob("*/config.yaml"):
        status = cfg_path.parent / "status.json"
        if status.exists() and json.loads(status.read_text()).get("status") in ("ok", "diverged"):
            if _normalised(OmegaConf.to_container(OmegaConf.load(cfg_path), resolve=True)) == want:
                hits.append(cfg_path.parent)
    return max(hits, key=lambda p: p.stat().st_mtime) if hits else None


def cell_requests(source: str, budget: str, row: str, column: str | None, results: Path) -> list[RunRequest]:
    """Run requests (one per seed) of cell (``row`` label, ``column`` name) of table ``source`` at ``budget``."""
    spec = load_spec(source)
    labels = [r.label for r in spec.rows]
    if row not in labels:
        raise KeyError(f"table {source} has no row {row!r}; rows: {labels}")
    col = column or next(c.name for c in spec.columns if c.delta is None)
    base = cell_overrides(spec, labels.index(row), col, budget, [f"paths.results_dir={results}"])
    reqs = []
    for s in spec.seeds_for(budget):
        cfg = compose_run([*base, f"seed={s}"])
        reqs.append(RunRequest([*base, f"seed={s}"], cfg, Path(cfg.paths.runs_dir) / cfg.experiment_name / run_id(cfg)))
    return reqs


def source_runs(table: str, source: str, budget: str, cells: dict[str, tuple[str, str | None]], results: Path,
                train_missing: bool = False) -> tuple[dict[str, list[Path]], list[str]]:
    """Finished run dirs per named cell of ``source`` (name -> (row, column)); diverged runs are dropped with a
    note. Missing or failed runs raise :class:`MissingRunsError` naming ``source`` (or are trained in-process
    first when ``train_missing``)."""
    reqs = {name: cell_requests(source, budget, row, col, results) for name, (row, col) in cells.items()}
    if train_missing:
        from oscrepro.train import train

        for rs in reqs.values():
            for r in rs:
                if find_record(r) is None:
                    train(r.cfg)
    out: dict[str, list[Path]] = {}
    notes: list[str] = []
    missing: list[str] = []
    for name, rs in reqs.items():
        out[name] = []
        for r in rs:
            found = find_record(r)
            if found is None:
                missing.append(f"{cells[name][0]} / {r.cfg.experiment_name} seed {r.cfg.seed} ({r.run_dir})")
            elif json.loads((found / "status.json").read_text())["status"] == "ok":
                out[name].append(found)
            else:
                notes.append(f"**Excluded:** {name} seed {r.cfg.seed} diverged ({found}).")
    if missing:
        shown = "\n  ".join(missing[:8]) + (f"\n  ... and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise MissingRunsError(
            f"table {table} at budget={budget} reads the runs of table {source}; {len(missing)} are missing or "
            f"unfinished:\n  {shown}\nTrain them first:  python -m oscrepro.table {source} --budget {budget}"
            f" --results-dir {results}")
    return out, notes


def _results(out_dir: Path) -> Path:
    return results_root(out_dir)


def _seed(run_dir: Path) -> int:
    return int(OmegaConf.load(Path(run_dir) / "config.yaml").seed)


# ------------------------------------------------------------------------------------------------ Table 3
def fsn_table3(out_dir: Path, budget: str, models: list[dict[str, Any]], vocab: dict[str, int],
               recipe: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """fsn Table 3 (App. A): configuration and realised parameter count of each model, from the experiment configs
    composed at budget=paper and instantiated at the paper's vocabulary sizes; the shared recipe is checked
    against the paper's lower block."""
    from hydra.utils import instantiate

    rows, cfgs = [], []
    for m in models:
        for corpus, experiment in m["experiments"].items():
            cfg = compose_run([f"experiment={experiment}", "budget=paper"])
            cfgs.append(cfg)
            model = instantiate(cfg.model, vocab_size=int(vocab[corpus]))
            n = sum(p.numel() for p in model.parameters())
            paper = (m.get("paper") or {}).get(corpus)
            att = cfg.model.get("attention")
            rows.append({
                "Model": m["label"], "Corpus": f"{corpus} (V={vocab[corpus]})", "experiment": experiment,
                "Width": f"k={model.k} phases" if hasattr(model, "k") else f"d={model.d_model}",
                "Layers": int(cfg.model.n_layers),
                "Feed-forward": _ffn_text(cfg, model),
                "Coupling": "RoPE softmax, 1 head" if att is None else _coupling_text(att),
                "Params (ours)": f"{n:,}", "Params (paper)": "—" if paper is None else f"{int(paper):,}",
                "Δ": "—" if paper is None else f"{n - int(paper):+,}"})
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
def fsn_copy_depth(out_dir: Path, budget: str, name: str, source: str, reference: dict[str, Any],
                   families: list[dict[str, Any]], paper: dict[str, Any], n_standard: int = 1024,
                   n_enriched: int = 192, n_resamples: int = 4000, seed: int = 0, cap: int = 32,
                   batch_size: int = 64, device: str = "auto", figures: dict[str, Any] | None = None,
                   train_missing: bool = False) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """fsn Tables 4 / 5 (App. C): per-seed copy-depth margins of ``families`` (Table-1 cells of ``source``)
    against ``reference`` (``mode`` best | mean), computed by :mod:`oscrepro.analysis.copy_depth_eval`."""
    from oscrepro.analysis.copy_depth import per_depth_curve, plot_bin_margins, plot_depth_curves, table_rows
    from oscrepro.analysis.copy_depth_eval import best_epoch, copy_depth_battery

    results = _results(out_dir)
    cells = {"__ref__": (reference["row"], reference.get("column"))}
    cells.update({f["name"]: (f["row"], f.get("column")) for f in families})
    runs, notes = source_runs(name, source, budget, cells, results, train_missing)
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
        notes.append(f"**Figure (bins, seed mean, whiskers = per-seed range):** "
                     f"`{plot_bin_margins(bat.families, Path(out_dir) / figures['bins'], name).name}`")
    if figures.get("curves"):
        curves = {f: per_depth_curve([d["standard"] for d in bat.deltas[f]], bat.depth["standard"],
                                     [d["enriched"] for d in bat.deltas[f]], bat.depth["enriched"], seed=seed)
                  for f in figures.get("curve_families", list(bat.deltas)) if f in bat.deltas}
        notes.append(f"**Figure (exact depth 0..32, position bootstrap):** "
                     f"`{plot_depth_curves(curves, Path(out_dir) / figures['curves'], name).name}`")
    ref_txt = ", ".join(p.name for p in bat.reference)
    notes += [f"**Reference ({reference.get('mode', 'best')}):** {reference['row']} → {ref_txt}; margins = model − "
              "reference in bits per character, negative favours the model.",
              f"**Slices (App. C):** {bat.n_windows['standard']} standard + {bat.n_windows['enriched']} enriched "
              f"validation windows (asked {n_standard} + {n_enriched}); bins ≥ 16 pool both; window-cluster "
              f"bootstrap, {n_resamples} resamples. Data: {bat.source}.",
              "**Checkpoints:** the final epoch (`last.ckpt`); the paper uses each seed's best-validation epoch."]
    return columns, rows, notes


def _margin_text(r: dict[str, Any], i: int) -> str:
    if r["row"] == "count":
        return f"{int(r['cells'][i]):,}"
    v = r["cells"][i]
    if not math.isfinite(v):
        return "— (no tokens)"
    if "ci" in r:
        lo, hi = r["ci"][i]
        return f"{v:+.4f} [{lo:+.4f}, {hi:+.4f}]"
    return f"{v:+.4f} (range {r['range'][i]:.4f})"


def _paper_margin(p: Any, i: int, tokens: bool) -> str:
    if p is None:
        return "—"
    if tokens:
        return f"{int(p[i]):,}"
    if "ci" in p:
        return f"{p['mean'][i]:+.4f} [{p['ci'][i][0]:+.4f}, {p['ci'][i][1]:+.4f}]"
    return f"{p['mean'][i]:+.4f}" + (f" (range {p['range'][i]:.4f})" if "range" in p else "")


# ---------------------------------------------------------------------------------------------- Figure 2
def fsn_figure2(out_dir: Path, budget: str, source: str, row: str, seed: int = 0, column: str | None = None,
                gate_windows: int = 8, train_missing: bool = False, paper: list[str] | None = None
                ) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """fsn Figure 2 (§4.4): per-layer coupling functions and harmonic magnitudes read from a trained FSN."""
    import torch

    from oscrepro.analysis.copy_depth_eval import load_run
    from oscrepro.analysis.kernel_reading import (
        kernel_coefficients,
        layer_summary,
        plot_figure2,
        value_gate_negative_fraction,
    )

    runs, notes = source_runs("fsn/fig2", source, budget, {"fsn": (row, column)}, _results(out_dir), train_missing)
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
    png = plot_figure2(kernels, Path(out_dir) / "fig2.png", f"{row}, seed {seed}")
    notes += [f"**Run:** {run.label}; **figure:** `{png.name}`. f_l = (1/k) Σ_a Σ_n [Re w0 sin nΔ + Im w0 cos nΔ]; "
              "rms|w^n| over coordinates; value-gate fraction on the first "
              f"{len(chunks)} validation windows."]
    notes += [f"**Paper (§4.4):** {p}" for p in (paper or [])]
    columns = list(rows[0])
    return columns, [{c: r.get(c, math.nan) for c in columns} for r in rows], notes


# -------------------------------------------------------------------------------------------- ladder post
def fsn_ladder_notes(spec: Any, cells: dict, out_dir: Path, fsn_params: str, transformer_params: str,
                     paper_lighter_percent: dict[str, float]) -> list[str]:
    """Ladder post hook: how much lighter each FSN rung is than its transformer partner, ours vs §4.5."""
    notes = []
    for ri, row in enumerate(spec.rows):
        f, x = cells[(ri, fsn_params)].mean, cells[(ri, transformer_params)].mean
        ours = "—" if not (np.isfinite(f) and np.isfinite(x)) else f"{100 * (x - f) / x:+.2f} %"
        ref = paper_lighter_percent.get(row.label)
        notes.append(f"**{row.label}: FSN lighter than the transformer by** {ours} (paper "
                     f"{'—' if ref is None else f'{ref:+.2f} %'})")
    return notes
