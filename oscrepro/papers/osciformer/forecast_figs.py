"""osciformer Figures 5-6 (App. E.3): forecasting y(7) with resonance attention; errors, attention map, learned keys.

The runs are this figure's own: ``conf/experiment/osciformer/forecast.yaml`` + ``seed`` (declared by
:func:`~oscrepro.papers.osciformer.resonance_figs.own_runs`, trained by the engine when missing). Every seed's
model is rebuilt from its record (``load_run``) on the same data module (the data seed is fixed, ``data.seed``), and
evaluated on the whole validation split: MSE, RMSE and Pearson's r of y^ against y_target, beside the constant
predictor y^ = mean of the training targets (its validation MSE) and std(y_target) over the validation split
(population std), as App. E.3 reports them.

* Figure 5: alpha_i(omega, phi) of a representative key i (seed 0): the probe is a clean unit signal
  cos(omega t + phi) observed on a regular grid t = g, 2g, ... < t_obs (g = the data's mean gap, t_obs its last
  observation time: the sequences' window), pushed through the model's own pipeline (trapezoid A_j, B_j -> E_j ->
  Z_j with the training mu, sigma -> Q_j) to the logit alpha_i = sum_j Q_j |H_i(omega_j)|; omega on ``n_omega``
  points of ``omega_range``, phi on ``n_phase`` points of [0, 2 pi). The representative key is the one with the
  largest mean attention weight w~_i over the validation split. E_j sees the phase only through the finite window,
  so the map varies mostly along omega.
* Figure 6: (a) validation sequence ``example_index``: the true trajectory y(t) = sum_k a_k cos(omega_k t) (its
  amplitudes replayed from the data seed: :func:`~oscrepro.data.resonance.forecast_amplitudes`, checked against the
  stored target), the noisy observations, the final observation time and the true and predicted y(T_future);
  (b) the learned natural frequencies omega_0 of the K keys of every seed, sorted, with seed 0's initial values,
  against the data frequencies.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from omegaconf import OmegaConf

from oscrepro.analysis.figures import figure_notes, paper_caption
from oscrepro.data.resonance import forecast_amplitudes
from oscrepro.papers.osciformer.resonance_figs import collect, own_runs
from oscrepro.runs.record import RunRecord, load_record_config
from oscrepro.tables.recover import recovered_note
from oscrepro.tables.runs import load_run
from oscrepro.tables.sources import SourceRuns, reads_runs
from oscrepro.tables.spec import load_spec
from oscrepro.tables.values import MISSING, Num, SeedStat

# (row label, key in the spec's ``paper`` mapping)
QUANTITIES = (("validation MSE", "val_mse"), ("validation RMSE", "val_rmse"), ("corr(ŷ, y_target)", "corr"),
              ("constant predictor MSE", "const_mse"), ("std(y_target)", "std_target"),
              ("MSE reduction vs constant (%)", "reduction_pct"))


@torch.no_grad()
def validation_predictions(model: torch.nn.Module, dm: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y^ (N,), y_target (N,), attention weights (N, K)) over the validation split, loader order."""
    preds, targets, weights = [], [], []
    for x, y, meta in dm.val_dataloader():
        y_hat, w, _ = model.attend(x, meta["times"], meta["mask"])
        preds.append(y_hat), targets.append(y[:, 0, 0]), weights.append(w)
    return (torch.cat(preds).double().numpy(), torch.cat(targets).double().numpy(),
            torch.cat(weights).double().numpy())


def forecast_scores(y_hat: np.ndarray, y: np.ndarray, train_mean: float) -> dict[str, float]:
    """App. E.3's numbers on one split: MSE, RMSE, Pearson r of y^ vs y, the constant predictor's MSE, std(y)."""
    mse = float(np.mean((y_hat - y) ** 2))
    const = float(np.mean((train_mean - y) ** 2))
    return {"val_mse": mse, "val_rmse": math.sqrt(mse), "corr": float(np.corrcoef(y_hat, y)[0, 1]),
            "const_mse": const, "std_target": float(np.std(y)), "reduction_pct": 100 * (1 - mse / const)}


@torch.no_grad()
def phase_frequency_map(model: torch.nn.Module, omegas: np.ndarray, phases: np.ndarray, t: np.ndarray) -> np.ndarray:
    """alpha (n_omega, n_phase, K) of clean unit probes cos(omega t + phi) on the grid t (L,) (module docstring)."""
    om, ph = np.meshgrid(omegas, phases, indexing="ij")  # (n_omega, n_phase)
    arg = om.reshape(-1, 1) * t + ph.reshape(-1, 1)  # (N, L)
    x = torch.tensor(np.cos(arg), dtype=torch.float32)[..., None]  # (N, L, 1)
    times = torch.tensor(t, dtype=torch.float32).expand(len(x), -1)  # (N, L)
    _, _, alpha = model.attend(x, times, torch.ones(times.shape, dtype=torch.bool))  # (N, K)
    return alpha.double().numpy().reshape(len(omegas), len(phases), -1)


def replay_amplitudes(dm: Any, split_index: int, y: np.ndarray) -> np.ndarray:
    """The true a_k (N, K) of a split, replayed from the data seed; raises unless they reproduce its targets y (N,)."""
    p = dm.params
    rng = np.random.default_rng(np.random.SeedSequence([dm.seed, split_index]))  # the split's stream (resonance.py)
    amp = forecast_amplitudes(len(y), rng, len(p["omegas"]), p["max_components"], p["amp_range"])  # (N, K)
    target = amp @ np.cos(p["t_future"] * np.asarray(p["omegas"]))
    if not np.allclose(target, y, atol=1e-5):
        raise RuntimeError("replayed amplitudes do not reproduce the stored targets (generator changed?)")
    return amp


@reads_runs(own_runs)
def osciformer_fig5_forecast(out_dir: Path, budget: str, results_dir: Path, runs: SourceRuns, name: str,
                             experiment: str, seeds: int = 3, n_omega: int = 91, n_phase: int = 36,
                             omega_range: tuple[float, float] = (1.0, 10.0), example_index: int = 0,
                             figures: tuple[str, str] = ("fig5_forecast.png", "fig6_forecast.png"),
                             paper: dict[str, Any] | None = None
                             ) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """osciformer App. E.3: validation errors per seed and over seeds beside the paper's, and Figures 5-6."""
    from oscrepro.train import build  # the exact construction (seed, data, model) of a run

    paper = paper or {}
    runs, notes = collect(name, budget, runs)
    cfg = load_record_config(runs[0])  # the record at today's class paths (runs.record.MOVED_TARGETS)
    dm, init_model, _ = build(cfg)  # seed 0's random initialisation, and the (shared) data module
    train_mean = float(dm.splits["train"].arrays.y.mean())
    scores, keys, logged = [], [], []
    for path in runs:
        L.seed_everything(int(OmegaConf.load(path / "config.yaml").seed), workers=True)
        model = load_run(path, datamodule=dm).model
        if (note := recovered_note(path)) is not None:
            notes.append(note)
        y_hat, y, w = validation_predictions(model, dm)
        scores.append(forecast_scores(y_hat, y, train_mean))
        keys.append({**{k: v.detach().double().numpy() for k, v in model.key_params().items()},
                     "weight": w.mean(0), "model": model, "y_hat": y_hat})
        logged.append(float(RunRecord(path).metrics().get("val/mse", float("nan"))))

    seed_cols = [f"seed {OmegaConf.load(p / 'config.yaml').seed}" for p in runs]
    columns = ["Quantity", *seed_cols, "Ours (mean ± std)", "Paper"]
    rows = []
    for label, key in QUANTITIES:
        vals = [s[key] for s in scores]
        digits = 1 if key == "reduction_pct" else 3
        ref = MISSING if paper.get(key) is None else Num(float(paper[key]), f"≈ {{:.{min(digits, 2)}f}}")
        rows.append({"Quantity": label, **{c: Num(v, f"{{:.{digits}f}}") for c, v in zip(seed_cols, vals, strict=True)},
                     "Ours (mean ± std)": SeedStat.of(vals, digits, show_n=True), "Paper": ref})

    # figures from seed 0's model
    k0 = keys[0]
    rep = int(np.argmax(k0["weight"]))
    p = dm.params
    gap = p["gap_shape"] * p["gap_scale"]
    t_probe = np.arange(gap, p["t_obs"], gap)  # (L,) regular grid over the observation window
    omegas = np.linspace(*omega_range, n_omega)
    phases = np.linspace(0, 2 * math.pi, n_phase, endpoint=False)
    alpha = phase_frequency_map(k0["model"], omegas, phases, t_probe)[:, :, rep]  # (n_omega, n_phase)
    val = dm.splits["val"].arrays
    amp = replay_amplitudes(dm, 1, val.y[:, 0, 0].astype(np.float64))[example_index]  # (K,)
    m = val.mask[example_index]
    example = {"t": val.t[example_index, m], "y": val.x[example_index, m, 0], "amp": amp,
               "y_hat": float(k0["y_hat"][example_index]), "y_true": float(val.y[example_index, 0, 0])}
    init_omega0 = init_model.key_params()["omega0"].detach().double().numpy()
    title = f"{name}, budget={budget}"
    spec = load_spec(name)
    f5 = plot_fig5(omegas, phases, alpha, k0["omega0"][rep], np.asarray(p["omegas"]), rep,
                   Path(out_dir) / figures[0], title, caption=paper_caption(spec, budget, "fig5"))
    f6 = plot_fig6(example, np.asarray(p["omegas"]), p["t_future"], [k["omega0"] for k in keys], seed_cols,
                   init_omega0, Path(out_dir) / figures[1], title, scores=scores, paper=paper,
                   caption=paper_caption(spec, budget, "fig6"))

    mismatch = [i for i, (s, v) in enumerate(zip(scores, logged, strict=True))
                if math.isfinite(v) and abs(s["val_mse"] - v) > 1e-4 * max(1.0, v)]
    fmt = lambda a: ", ".join(f"{x:.2f}" for x in a)  # noqa: E731
    notes += [
        f"**Metrics:** on all {len(val)} validation sequences with each run's final weights (App. E.3 reports "
        f"validation numbers; no early stopping); the constant predictor is the mean of the {len(dm.splits['train'])} "
        f"training targets ({train_mean:.3f}); std(y_target) is the validation targets' population std. "
        + ("The validation MSE equals the one each run logged." if not mismatch else
           f"**Differs from the logged val/mse** for seed index {mismatch}."),
        f"**Figures:** `{f5.name}` (Figure 5: alpha(omega, phi) of key {rep}, the key with the largest mean "
        f"attention weight on validation, seed 0; probe cos(omega t + phi), amplitude 1, on {len(t_probe)} regular "
        f"times {t_probe[0]:.2f}..{t_probe[-1]:.2f}, through the model's feature pipeline; omega on {n_omega} points "
        f"of [{omegas[0]:.1f}, {omegas[-1]:.1f}] rad/s, phi on {n_phase}) and `{f6.name}` (Figure 6: (a) validation "
        f"sequence {example_index} with its true trajectory, observations, last observation time, true "
        f"{example['y_true']:.3f} and predicted {example['y_hat']:.3f} y({p['t_future']:g}); (b) learned omega_0 of "
        f"the {len(k0['omega0'])} keys of each seed against the data frequencies).",
        f"**Keys, seed 0** (ascending omega_0): omega_0 = {fmt(np.sort(k0['omega0']))} rad/s; by key: gamma = "
        f"{fmt(k0['gamma'])}, v = {fmt(k0['values'])}, mean attention weight = {fmt(k0['weight'])}.",
    ]
    notes += [f"**Paper:** {r}" for r in paper.get("reading", [])]
    notes += figure_notes(spec)  # what the figures draw of the paper (the spec's figure.note)
    return columns, rows, notes


def plot_fig5(omegas: np.ndarray, phases: np.ndarray, alpha: np.ndarray, omega0: float, grid: np.ndarray, key: int,
              path: Path, title: str, caption: str | None = None) -> Path:
    """Figure 5: alpha(omega, phi) of one key, its omega_0 and the paper's analysis frequencies omega_j marked
    (App. E.3 gives the figure without values: its statement goes in ``caption``)."""
    from matplotlib.figure import Figure

    from oscrepro.analysis.figures import paper_label, save_figure

    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.subplots()
    im = ax.imshow(alpha.T, aspect="auto", origin="lower", cmap="magma",
                   extent=(omegas[0], omegas[-1], phases[0], 2 * math.pi))
    ax.axvline(omega0, color="C0", ls="--", lw=1, label=f"ours: trained ω₀ = {omega0:.2f} of key {key}")
    for i, w in enumerate(grid):
        ax.axvline(w, color="w", ls=":", lw=0.8,
                   label=paper_label("analysis frequencies ω_j (App. E.3)") if i == 0 else "_nolegend_")
    ax.set(xlabel="ω (rad/s)", ylabel="φ", title=f"α(ω, φ), key {key} (ours)")
    ax.legend(fontsize=7, loc="upper right", framealpha=0.85)
    fig.colorbar(im, ax=ax, label="ours: logit α")
    fig.suptitle(f"osciformer Figure 5 ({title})", fontsize=9)
    return save_figure(fig, path, caption=caption)


def plot_fig6(example: dict[str, Any], grid: np.ndarray, t_future: float, omega0s: list[np.ndarray],
              labels: list[str], init_omega0: np.ndarray, path: Path, title: str,
              scores: list[dict[str, float]] | None = None, paper: dict[str, Any] | None = None,
              caption: str | None = None) -> Path:
    """Figure 6: (a) one validation sequence and its forecast, (b) the keys' learned natural frequencies against
    the paper's data frequencies; with ``scores`` (one dict per seed, :func:`forecast_scores`), (c) our validation
    numbers per seed beside App. E.3's (``paper``, hollow diamonds)."""
    from matplotlib.figure import Figure

    from oscrepro.analysis.figures import PAPER, paper_label, save_figure

    fig = Figure(figsize=(16 if scores else 11, 4.6))
    ax = fig.subplots(1, 3 if scores else 2, gridspec_kw={"width_ratios": [1.1, 1.1, 0.8][:3 if scores else 2]})
    tt = np.linspace(0, t_future + 0.5, 600)
    ax[0].plot(tt, np.cos(np.outer(tt, grid)) @ example["amp"], color="0.3", lw=1, label="true y(t)")
    ax[0].scatter(example["t"], example["y"], s=12, color="C0", zorder=3, label="noisy observations")
    ax[0].axvline(example["t"][-1], color="0.5", ls="--", lw=1, label="final observation")
    ax[0].scatter([t_future], [example["y_true"]], marker="*", s=120, color="C2", zorder=4, label="true target")
    ax[0].scatter([t_future], [example["y_hat"]], marker="X", s=80, color="C3", zorder=4, label="ours: predicted")
    ax[0].set(xlabel="t", ylabel="y", title=f"(a) forecast of y({t_future:g})")
    ax[0].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)  # below: keeps t = 7 clear
    for i, w in enumerate(grid):
        ax[1].axhline(w, color="0.8", lw=1,
                      label=paper_label("data frequencies ω_k (App. E.3)") if i == 0 else "_nolegend_")
    k = np.arange(1, len(init_omega0) + 1)
    ax[1].scatter(k, np.sort(init_omega0), s=14, color="0.6", label="ours: init (seed 0)")
    for s, (om, label) in enumerate(zip(omega0s, labels, strict=True)):
        ax[1].scatter(k + 0.08 * (s + 1), np.sort(om), s=18, color=f"C{s}", label=f"ours: trained, {label}")
    ax[1].set(xlabel="key (sorted by ω₀)", ylabel="ω₀ (rad/s)", title="(b) learned natural frequencies")
    ax[1].legend(fontsize=7)
    if scores:
        _plot_scores(ax[2], scores, labels, paper or {}, PAPER, paper_label)
    fig.suptitle(f"osciformer Figure 6 ({title})", fontsize=9)
    return save_figure(fig, path, caption=caption)


def _plot_scores(ax: Any, scores: list[dict[str, float]], labels: list[str], paper: dict[str, Any],
                 paper_style: dict[str, Any], paper_label: Any) -> None:
    """App. E.3's validation numbers: ours per seed (dots) beside the paper's (hollow diamonds, "≈" in the text)."""
    shown = [(lab, key) for lab, key in QUANTITIES if key != "reduction_pct"]  # a percentage: another scale
    y = np.arange(len(shown))
    for s, (sc, label) in enumerate(zip(scores, labels, strict=True)):
        ax.plot([sc[key] for _, key in shown], y + 0.12 * (s - (len(scores) - 1) / 2), ls="none", marker="o",
                ms=5, color=f"C{s}", label=f"ours: {label}")
    ref = [(i, float(paper[key])) for i, (_, key) in enumerate(shown) if paper.get(key) is not None]
    if ref:
        ax.plot([v for _, v in ref], [i for i, _ in ref], **paper_style, label=paper_label("≈ value (App. E.3)"))
    ax.set_yticks(y, [lab for lab, _ in shown], fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="value", title="(c) validation numbers, ours vs paper")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)  # below: keeps rows clear
