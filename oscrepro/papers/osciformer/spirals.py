"""osciformer Figure 2c/2d (Sec. 7): spiral interpolation and extrapolation, OsciFormer vs ContiFormer.

The runs are this figure's own: ``conf/experiment/osciformer/spirals.yaml`` + a mechanism's overrides +
``data.target=interpolation|extrapolation`` + ``seed``, composed exactly as ``python -m oscrepro.train`` composes them
(:class:`~oscrepro.tables.runs.RunRequest`, the same run ids), so a Hydra multirun trains them for this table. The
analysis loads every finished run, predicts its test spirals and reports, per mechanism and target, the RMSE in
spiral units (the data module's min-max normalisation undone, ``p * data_range + data_min``), mean ± std over seeds.
The figure draws, for a few test spirals, the clean trajectory, the irregular observations and each mechanism's
interpolation (first half) and extrapolation (second half) predictions: Figure 2c (OsciFormer) and 2d (ContiFormer).

Choices where the sources are silent:
* RMSE as ContiFormer's ``spiral.py`` computes it, sqrt(mean_k ||p_k - y_k||^2) over the scored points k (the
  Euclidean error of a 2-D point, so sqrt(2) x the per-coordinate RMSE that runs log as ``test/rmse``), over all
  test spirals, on the final model (spiral.py keeps the best test iteration: selecting on the test set flatters);
* the figure's predictions are seed 0's; the clean trajectory is the concatenation of the two targets' halves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from oscrepro.analysis.figures import figure_notes, paper_caption
from oscrepro.runs.compose import path_override
from oscrepro.runs.lookup import RunRequest
from oscrepro.tables.runs import load_run
from oscrepro.tables.sources import OwnRuns, RunNeeds, SourceRuns, reads_runs
from oscrepro.tables.spec import load_spec
from oscrepro.tables.values import SeedStat
from oscrepro.tasks.regression import MODEL_KEYS

TARGETS = ("interpolation", "extrapolation")


def spiral_rmse(pred: np.ndarray, y: np.ndarray, data_min: np.ndarray, data_range: np.ndarray,
                mask: np.ndarray | None = None) -> float:
    """RMSE in spiral units of normalised predictions: pred, y (N, K, 2) in [0, 1] units, data_min / data_range
    (2,), mask (N, K) real targets -> sqrt(mean over real points of the squared Euclidean error) (spiral.py)."""
    p, t = to_spiral_units(pred, data_min, data_range), to_spiral_units(y, data_min, data_range)
    sq = ((p - t) ** 2).sum(-1)  # (N, K) squared distance per point
    keep = np.ones(sq.shape, dtype=bool) if mask is None else mask.astype(bool)
    return float(np.sqrt(sq[keep].mean()))


def to_spiral_units(a: np.ndarray, data_min: np.ndarray, data_range: np.ndarray) -> np.ndarray:
    """Undo the min-max normalisation of oscrepro.data.spirals: a * data_range + data_min (per coordinate)."""
    return np.asarray(a) * np.asarray(data_range) + np.asarray(data_min)


@torch.no_grad()
def predict_split(model: torch.nn.Module, loader: Any) -> dict[str, np.ndarray]:
    """Predictions of a regressor over a loader, concatenated: pred / y (N, K, 2), x (N, T, 2), times (N, T),
    target_times / target_mask (N, K); every split of a spiral data module has the same K (no padding)."""
    out: dict[str, list[np.ndarray]] = {k: [] for k in ("pred", "y", "x", "times", "target_times", "target_mask")}
    for x, y, meta in loader:
        pred, _ = model(x, **{k: meta[k] for k in MODEL_KEYS if k in meta})  # (B, K, 2)
        out["pred"].append(pred.numpy())
        out["y"].append(y.numpy())
        out["x"].append(x.numpy())
        out["times"].append(meta["times"].numpy())
        out["target_times"].append(meta["target_times"].numpy())
        out["target_mask"].append(meta.get("target_mask", torch.ones(y.shape[:2], dtype=torch.bool)).numpy())
    return {k: np.concatenate(v) for k, v in out.items()}


def spiral_requests(name: str, budget: str, results_dir: Path, experiment: str, mechanisms: list[dict[str, Any]],
                    seeds: int) -> dict[tuple[str, str], list[RunRequest]]:
    """Run requests per (mechanism label, target), one per seed, composed as ``oscrepro.train`` would."""
    reqs = {}
    for mech in mechanisms:
        for target in TARGETS:
            base = [f"experiment={experiment}", f"budget={budget}", f"table_name={name}", *mech["overrides"],
                    f"data.target={target}", path_override("paths.results_dir", results_dir),
                    "trainer.enable_progress_bar=false"]
            reqs[(mech["label"], target)] = [RunRequest.compose([*base, f"seed={s}"]) for s in range(seeds)]
    return reqs


def _train_commands(experiment: str, budget: str, results_dir: Path, mechanisms: list[dict[str, Any]],
                    seeds: int) -> str:
    """The Hydra multiruns (one per mechanism) that train exactly the requested runs."""
    return "\n".join(
        f"  python -m oscrepro.train -m hydra/launcher=joblib_2jobs experiment={experiment} budget={budget} "
        f"{' '.join(m['overrides'])} data.target={','.join(TARGETS)} seed={','.join(map(str, range(seeds)))} "
        f"paths.results_dir={results_dir}" for m in mechanisms)


def spiral_runs(name: str, budget: str, results_dir: Path, experiment: str, mechanisms: list[dict[str, Any]],
                seeds: int, **_: Any) -> RunNeeds:
    """The figure's own runs per (mechanism, target) (:func:`spiral_requests`), declared for the engine, which
    trains the missing ones; a missing run's message names the Hydra multiruns that train them outside a build."""
    reqs = spiral_requests(name, budget, results_dir, experiment, mechanisms, seeds)
    return RunNeeds(name, own=OwnRuns({f"{m} {t}": rs for (m, t), rs in reqs.items()},
                                      _train_commands(experiment, budget, results_dir, mechanisms, seeds),
                                      what="spiral runs"))


@reads_runs(spiral_runs)
def osciformer_fig2_spirals(out_dir: Path, budget: str, results_dir: Path, runs: SourceRuns, name: str,
                            experiment: str, mechanisms: list[dict[str, Any]], seeds: int, n_examples: int = 3,
                            figure: str = "fig2_spirals.png", paper: dict[str, Any] | None = None
                            ) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """osciformer Figure 2c/2d: test RMSE (spiral units) per mechanism and target (the engine's runs of
    :func:`spiral_runs`), and the trajectory figure."""
    notes = list(runs.notes)
    runs = {(m["label"], t): runs[f"{m['label']} {t}"] for m in mechanisms for t in TARGETS}
    rmse: dict[tuple[str, str], list[float]] = {}
    shown: dict[tuple[str, str], dict[str, np.ndarray]] = {}  # seed 0's predictions (first finished seed)
    units: tuple[np.ndarray, np.ndarray] | None = None
    n_test = 0
    for key, paths in runs.items():
        rmse[key] = []
        for path in paths:
            run = load_run(path)
            dm = run.datamodule
            res = predict_split(run.model, dm.test_dataloader())
            n_test = len(res["pred"])
            rmse[key].append(spiral_rmse(res["pred"], res["y"], dm.data_min, dm.data_range, res["target_mask"]))
            if key not in shown:
                shown[key] = {k: v[:n_examples] for k, v in res.items()}
                units = (np.asarray(dm.data_min), np.asarray(dm.data_range))
    columns = ["Mechanism", "Interpolation RMSE", "Extrapolation RMSE"]
    rows = [{"Mechanism": m["label"], **{f"{t.capitalize()} RMSE": SeedStat.of(rmse[(m["label"], t)], 3, show_n=True)
                                         for t in TARGETS}} for m in mechanisms]
    spec = load_spec(name)
    png = plot_spirals(shown, [m["label"] for m in mechanisms], units, Path(out_dir) / figure,
                       f"{name}, budget={budget}", rmse=rmse, caption=paper_caption(spec, budget, "fig2"))
    notes.append(f"**Figure:** `{png.name}`: one row per mechanism (Figure 2c OsciFormer, 2d ContiFormer), one column "
                 f"per test spiral (the first {n_examples}); green: clean trajectory and the irregular noisy "
                 f"observations; blue: interpolation, red: extrapolation predictions (seed 0).")
    notes.append(f"**RMSE:** sqrt(mean ||prediction - clean point||^2) over every scored point of the {n_test} test "
                 "spirals (ContiFormer spiral.py's formula), in spiral units (min-max normalisation undone); the "
                 "final model of each run; mean ± std over seeds (n).")
    notes += [f"**Paper:** {p}" for p in (paper or {}).get("reading", [])]
    notes += figure_notes(spec)  # what the figure draws of the paper (the spec's figure.note)
    return columns, rows, notes


def plot_spirals(shown: dict[tuple[str, str], dict[str, np.ndarray]], labels: list[str],
                 units: tuple[np.ndarray, np.ndarray], path: Path, title: str,
                 rmse: dict[tuple[str, str], list[float]] | None = None, caption: str | None = None) -> Path:
    """Figure 2c/2d: per mechanism (row) and test spiral (column), clean trajectory, observations, predictions;
    each row says our test RMSE (seed mean, from ``rmse``). The paper draws the same panels with no number, so
    what it states goes in ``caption``."""
    from matplotlib.figure import Figure

    from oscrepro.analysis.figures import save_figure

    lo, span = units
    n = min(len(v["pred"]) for v in shown.values())
    fig = Figure(figsize=(max(3.2 * n, 7.5), 3.0 * len(labels) + 0.9))
    axes = fig.subplots(len(labels), n, squeeze=False)
    for r, label in enumerate(labels):
        inter, extra = shown[(label, "interpolation")], shown[(label, "extrapolation")]
        for c in range(n):
            ax = axes[r, c]
            true = to_spiral_units(np.concatenate([inter["y"][c], extra["y"][c]]), lo, span)  # (n_total, 2)
            obs = to_spiral_units(inter["x"][c], lo, span)  # (n_sample, 2)
            ax.plot(true[:, 0], true[:, 1], color="#5fce40", lw=1.2, label="true trajectory")
            ax.scatter(obs[:, 0], obs[:, 1], color="#5fce40", s=8, label="irregular noisy observations")
            for part, color, name in ((inter, "#306fd7", "interpolation"), (extra, "#ea3c33", "extrapolation")):
                p = to_spiral_units(part["pred"][c], lo, span)
                ax.plot(p[:, 0], p[:, 1], color=color, lw=1.0, marker=".", ms=3, label=f"ours: {name} (seed 0)")
            ax.set_aspect("equal", "datalim")
            ax.set_xticks([]), ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(label + _rmse_text(label, rmse), fontsize=8)
    # above the first panel, where the layout leaves room for it (an axes legend counts in tight_layout)
    axes[0, 0].legend(fontsize=7, ncol=2, loc="lower left", bbox_to_anchor=(0.0, 1.02))
    fig.suptitle(f"osciformer Figure 2c (OsciFormer) / 2d (ContiFormer): spiral samples and predictions\n({title})",
                 fontsize=9)
    return save_figure(fig, path, caption=caption)


def _rmse_text(label: str, rmse: dict[tuple[str, str], list[float]] | None) -> str:
    """A row label's second line: our test RMSE per target, seed mean (n), or nothing without ``rmse``."""
    if not rmse:
        return ""
    parts = [f"{t[:5]}. {np.mean(v):.3f}" if (v := rmse.get((label, t))) else f"{t[:5]}. —" for t in TARGETS]
    n = len(rmse.get((label, TARGETS[0])) or [])
    return f"\nours: RMSE {', '.join(parts)} (n={n})"
