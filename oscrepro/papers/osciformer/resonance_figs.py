"""osciformer Figures 3-4 (App. E.2): training curves, attention over keys, and learned resonance of the keys.

The runs are this figure's own: ``conf/experiment/osciformer/resonance.yaml`` + ``seed``, composed exactly as
``python -m oscrepro.train`` composes them (:class:`~oscrepro.tables.runs.RunRequest`, the same run ids). From each
finished run the analysis reads ``history.csv`` and the test accuracy; from the first seed's run it rebuilds the
model at its random initialisation (``oscrepro.train.build``: same seed, same order) and loads the trained weights.

* Figure 3: (a) training loss per logged step, (b) validation accuracy per validation, (c, d) the mean attention
  weight w_l over the 32 keys (token positions, in time order) on validation examples, at initialisation and after
  training.
* Figure 4: (a) the learned natural frequencies omega_0 of the key oscillators against the data band, (b) the mean
  attention weight per (true class, key), (c) alpha(omega, phi) of a representative key channel, (d) its
  |H(omega)| = 1 / sqrt((omega_0^2 - omega^2)^2 + (2 gamma omega)^2) beside alpha_max(omega) = max_phi alpha.

Choices where App. E.2 is silent:
* "Key" means two things in the appendix: the attention weights are over tokens (32 keys, the figures' 3c/3d/4b
  columns), while a natural frequency (omega_0, gamma) belongs to a key oscillator channel c (d = 32 of them, shared
  by all tokens: 4a, 4c, 4d and the table). The paper shows "eight oscillator keys"; we list the 8 channels the query
  reads most, by ||(A_c, B_c)|| (``n_keys``), and pool all d channels in the summary row.
* alpha(omega, phi) of channel c: the model's channel logit alpha_lc (``channel_logits``) on a clean probe
  x_l = (cos(omega t_l + phi), sin(omega t_l + phi)), amplitude 1, at L evenly spaced times t_l = T l / (L + 1),
  averaged over the L tokens; omega on ``n_omega`` points spanning the data band [2 pi 0.5, 2 pi 4.5], phi on
  ``n_phase`` points of [0, 2 pi). The correlation is Pearson's r between |H_c| and alpha_max,c over that grid.
* Attention statistics use the first ``n_val`` validation examples; the representative key is the top channel.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from oscrepro.analysis.figures import figure_notes
from oscrepro.data.base import model_dims
from oscrepro.runs.compose import path_override
from oscrepro.runs.lookup import RunRequest
from oscrepro.runs.record import RunRecord, load_record_config
from oscrepro.tables.recover import recovered_note
from oscrepro.tables.runs import MissingRunsError, load_run
from oscrepro.tables.sources import OwnRuns, RunNeeds, SourceRuns, reads_runs
from oscrepro.tables.spec import load_spec
from oscrepro.tables.values import MISSING, SeedStat


def transfer_magnitude(omega: np.ndarray, omega0: float, gamma: float) -> np.ndarray:
    """|H(omega)| = 1 / sqrt((omega_0^2 - omega^2)^2 + (2 gamma omega)^2) of a damped driven oscillator."""
    omega = np.asarray(omega, dtype=float)
    return 1.0 / np.sqrt((omega0**2 - omega**2) ** 2 + (2 * gamma * omega) ** 2)


def read_history(path: Path) -> dict[str, np.ndarray]:
    """(step, value) arrays of ``train/loss_step`` and ``val/acc`` from a run's history.csv (empty cells skipped)."""
    out: dict[str, list[tuple[float, float]]] = {"train/loss_step": [], "val/acc": []}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            for key, pts in out.items():
                if row.get(key):
                    pts.append((float(row["step"]), float(row[key])))
    return {k: np.asarray(v, dtype=float).reshape(-1, 2) for k, v in out.items()}


@torch.no_grad()
def attention_stats(model: torch.nn.Module, batches: list[tuple], n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean attention weight per key (L,) and per (true class, key) (C, L) over the given batches."""
    weights, labels = [], []
    for x, y, meta in batches:
        _, w, _ = model.attend(x, meta["times"], meta.get("mask"))  # (B, L)
        weights.append(w.double()), labels.append(y)
    w, y = torch.cat(weights), torch.cat(labels)
    per_class = torch.stack([w[y == c].mean(0) if (y == c).any() else torch.full_like(w[0], float("nan"))
                             for c in range(n_classes)])  # (C, L)
    return w.mean(0).numpy(), per_class.numpy()


@torch.no_grad()
def phase_frequency_map(model: torch.nn.Module, omegas: np.ndarray, phases: np.ndarray, n_points: int,
                        chunk: int = 64) -> np.ndarray:
    """alpha (n_omega, n_phase, d): token-mean channel logits on clean probes (module docstring)."""
    t_q = model.t_query
    t = torch.arange(1, n_points + 1, dtype=torch.float64) * t_q / (n_points + 1)  # (L,)
    om, ph = np.meshgrid(omegas, phases, indexing="ij")  # (n_omega, n_phase)
    arg = torch.tensor(om.reshape(-1, 1), dtype=torch.float64) * t + torch.tensor(ph.reshape(-1, 1))  # (N, L)
    x = torch.stack([arg.cos(), arg.sin()], -1).float()  # (N, L, 2)
    out = [model.channel_logits(x[i:i + chunk], t.expand(len(x[i:i + chunk]), -1)).mean(1)
           for i in range(0, len(x), chunk)]  # (n, d) each
    return torch.cat(out).numpy().reshape(len(omegas), len(phases), -1)


def _requests(name: str, budget: str, results_dir: Path, experiment: str, seeds: int) -> list[RunRequest]:
    base = [f"experiment={experiment}", f"budget={budget}", f"table_name={name}",
            path_override("paths.results_dir", results_dir), "trainer.enable_progress_bar=false"]
    return [RunRequest.compose([*base, f"seed={s}"]) for s in range(seeds)]


def own_runs(name: str, budget: str, results_dir: Path, experiment: str, seeds: int = 1, **_: Any) -> RunNeeds:
    """The figure's own runs (seeds 0..seeds-1 of ``experiment``; no other table trains them), declared for the
    engine, which trains the missing ones; the command in a missing run's message trains them outside a build."""
    reqs = _requests(name, budget, results_dir, experiment, seeds)
    command = (f"  python -m oscrepro.train -m experiment={experiment} budget={budget} "
               f"seed={','.join(map(str, range(seeds)))} paths.results_dir={results_dir}")
    return RunNeeds(name, own=OwnRuns({"runs": reqs}, command, excluded="**Excluded:** seed {seed} diverged "
                                                                           "({run_dir})."))


def collect(name: str, budget: str, found: SourceRuns) -> tuple[list[Path], list[str]]:
    """Finished-ok run dirs (seed order) of :func:`own_runs`, as the engine resolved them (diverged runs left out
    with a note); :class:`MissingRunsError` when every run diverged."""
    runs = list(found["runs"])
    if not runs:
        raise MissingRunsError(f"{name}: no finished run at budget={budget} (all diverged)")
    return runs, list(found.notes)


@reads_runs(own_runs)
def osciformer_fig3_resonance(out_dir: Path, budget: str, results_dir: Path, runs: SourceRuns, name: str,
                              experiment: str, seeds: int = 1, n_val: int = 2048, n_omega: int = 81,
                              n_phase: int = 24, n_keys: int = 8,
                              figures: tuple[str, str] = ("fig3_resonance.png", "fig4_resonance.png"),
                              paper: dict[str, Any] | None = None
                              ) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """osciformer Figures 3-4: test accuracy and per-key resonance numbers, and the two figures."""
    from oscrepro.train import build  # the exact construction (seed, data, model) of a run

    runs, notes = collect(name, budget, runs)
    accs = [100 * float(RunRecord(p).metrics()["test/acc"]) for p in runs]
    hist = read_history(runs[0] / "history.csv")
    cfg = load_record_config(runs[0])  # the record at today's class paths (runs.record.MOVED_TARGETS)
    dm, init_model, _ = build(cfg)  # seeds and instantiates exactly as the run did: its random init
    L.seed_everything(int(cfg.seed), workers=True)
    trained = load_run(runs[0], datamodule=dm).model  # recovers the weights of a record kept without them
    if (note := recovered_note(runs[0])) is not None:
        notes.append(note)
    init_model.eval()
    batches, have = [], 0
    for batch in dm.val_dataloader():
        batches.append(batch)
        have += len(batch[1])
        if have >= n_val:
            break
    n_classes = model_dims(dm)["n_classes"]
    w_init, _ = attention_stats(init_model, batches, n_classes)
    w_trained, per_class = attention_stats(trained, batches, n_classes)
    params = {k: v.detach().numpy() for k, v in trained.oscillator_params().items()}
    init_omega = init_model.oscillator_params()["omega_k"].detach().numpy()
    q_norm = torch.sqrt(trained.query_cos.detach().double().square().sum(0)
                        + trained.query_sin.detach().double().square().sum(0)).numpy()  # (d,)
    band = 2 * math.pi * np.array([dm.params["f_min"], dm.params["f_min"] + dm.params["df"] * (n_classes - 1)])
    omegas, phases = np.linspace(*band, n_omega), np.linspace(0, 2 * math.pi, n_phase, endpoint=False)
    alpha = phase_frequency_map(trained, omegas, phases, dm.params["n_points"])  # (n_omega, n_phase, d)
    a_max = alpha.max(1)  # (n_omega, d)
    d = a_max.shape[1]
    h_mag = np.stack([transfer_magnitude(omegas, params["omega_k"][c], params["gamma_k"][c]) for c in range(d)], 1)
    corr = np.array([np.corrcoef(h_mag[:, c], a_max[:, c])[0, 1] if a_max[:, c].std() > 0 else np.nan
                     for c in range(d)])
    order = np.argsort(-q_norm)
    shown = order[:n_keys]

    columns = ["Row", "Test acc. (%)", "ω₀ (rad/s)", "γ", "argmax_ω α_max (rad/s)", "corr(|H|, α_max)",
               "query weight", "Paper"]
    rows = [{"Row": f"model ({len(runs)} seed{'s' * (len(runs) > 1)})",
             "Test acc. (%)": SeedStat.of(accs, 2, show_n=True),
             "ω₀ (rad/s)": None, "γ": None, "argmax_ω α_max (rad/s)": None, "corr(|H|, α_max)": None,
             "query weight": None, "Paper": "no number (App. E.2 shows curves only)"}]
    # numbers; the spec's ``formats`` give their digits (None: "—")
    rows += [{"Row": f"key channel {c}", "Test acc. (%)": MISSING, "ω₀ (rad/s)": float(params["omega_k"][c]),
              "γ": float(params["gamma_k"][c]), "argmax_ω α_max (rad/s)": float(omegas[a_max[:, c].argmax()]),
              "corr(|H|, α_max)": float(corr[c]), "query weight": float(q_norm[c]), "Paper": "figure only"}
             for c in shown]
    rows.append({"Row": f"all {d} key channels (median)", "Test acc. (%)": MISSING,
                 "ω₀ (rad/s)": float(np.median(params["omega_k"])), "γ": float(np.median(params["gamma_k"])),
                 "argmax_ω α_max (rad/s)": None, "corr(|H|, α_max)": float(np.nanmedian(corr)),
                 "query weight": float(np.median(q_norm)), "Paper": "figure only"})
    extras = figure_paper(name, budget)
    p3 = plot_fig3(hist, w_init, w_trained, Path(out_dir) / figures[0], f"{name}, budget={budget}",
                   n_classes=n_classes, **extras["fig3"])
    p4 = plot_fig4(params["omega_k"], init_omega, shown, band, per_class, omegas, phases, alpha[:, :, shown[0]],
                   h_mag[:, shown[0]], int(shown[0]), Path(out_dir) / figures[1], f"{name}, budget={budget}",
                   gamma_key=float(params["gamma_k"][shown[0]]), **extras["fig4"])
    best = int(np.argmax(hist["val/acc"][:, 1])) if len(hist["val/acc"]) else None
    n_used = sum(len(b[1]) for b in batches)
    notes += [
        f"**Figures:** `{p3.name}` (Figure 3: (a) training loss per logged step, (b) validation accuracy, (c, d) mean "
        f"attention weight over the {len(w_init)} keys = token positions in time order, at initialisation and after "
        f"training, {n_used} validation examples) and `{p4.name}` (Figure 4: (a) learned omega_0 of the {d} key "
        f"oscillator channels, init and trained, the data band shaded; (b) mean attention weight, rows = true class, "
        f"columns = key position; (c) alpha(omega, phi) of key channel {shown[0]}; (d) its |H(omega)| and "
        f"alpha_max(omega), each scaled to max 1). Seed 0's run.",
        f"**Test accuracy:** the last epoch's (chance 1/{n_classes} = {100 / n_classes:.2f} %); best validation "
        + (f"accuracy {100 * hist['val/acc'][best, 1]:.2f} % at step {int(hist['val/acc'][best, 0])} "
           f"(last {100 * hist['val/acc'][-1, 1]:.2f} %). " if best is not None else "not logged. ")
        + "App. E.2's early stopping on validation accuracy is not applied (runs take no callbacks from config).",
        f"**Key channels:** the {len(shown)} of {d} key oscillator channels with the largest query weight "
        f"||(A_c, B_c)||; alpha(omega, phi) = the channel's logit, token-mean, on clean unit probes "
        f"(cos, sin)(omega t_l + phi) at {dm.params['n_points']} evenly spaced times; omega on {n_omega} points of "
        f"the data band [{band[0]:.2f}, {band[1]:.2f}] rad/s, phi on {n_phase}; corr = Pearson r of |H_c| and "
        f"alpha_max,c over that grid (module docstring of resonance_figs.py). A channel with omega_0 below the band "
        f"has |H| falling over the whole band, so a positive r there says that alpha_max falls too, not that it "
        f"peaks at omega_0.",
    ]
    notes += [f"**Paper:** {p}" for p in (paper or {}).get("reading", [])]
    notes += figure_notes(load_spec(name))  # what the figures draw of the paper (the spec's figure.note)
    return columns, rows, notes


def figure_paper(key: str, budget: str) -> dict[str, dict[str, Any]]:
    """Per figure (``fig3``, ``fig4``): the caption (the budget and what App. E.2 states, the spec's
    ``figure.paper.statements``) and the paper's values to draw (``init_omega_range``); reference data only."""
    from oscrepro.analysis.figures import figure_block, paper_caption

    spec = load_spec(key)
    paper = figure_block(spec.path).get("paper") or {}
    return {"fig3": {"caption": paper_caption(spec, budget, "fig3")},
            "fig4": {"caption": paper_caption(spec, budget, "fig4"), "init_range": paper.get("init_omega_range")}}


def plot_fig3(hist: dict[str, np.ndarray], w_init: np.ndarray, w_trained: np.ndarray, path: Path, title: str,
              n_classes: int | None = None, caption: str | None = None) -> Path:
    """Figure 3 (a-d) in one 2 x 2 figure. App. E.2 gives these panels as pictures only (no value), so the paper's
    statements go in ``caption``; chance 1 / ``n_classes`` and uniform attention 1 / L are drawn as our references."""
    from matplotlib.figure import Figure

    from oscrepro.analysis.figures import save_figure

    fig = Figure(figsize=(10, 7.5))
    ax = fig.subplots(2, 2)
    loss, acc = hist["train/loss_step"], hist["val/acc"]
    ax[0, 0].plot(loss[:, 0], loss[:, 1], lw=0.8, label="ours: training loss (seed 0)")
    ax[0, 0].set(xlabel="step", ylabel="training loss", title="(a) training loss")
    ax[0, 1].plot(acc[:, 0], 100 * acc[:, 1], marker="o", ms=3, label="ours: validation accuracy (seed 0)")
    if n_classes:
        ax[0, 1].axhline(100 / n_classes, color="0.5", ls="--", lw=0.8, label=f"chance 1/{n_classes}")
    ax[0, 1].set(xlabel="step", ylabel="validation accuracy (%)", title="(b) accuracy vs steps")
    keys = np.arange(1, len(w_init) + 1)
    panels = ((ax[1, 0], w_init, "(c) at random initialisation"), (ax[1, 1], w_trained, "(d) after training"))
    for a, w, label in panels:
        a.bar(keys, w, label="ours: mean attention weight")
        a.axhline(1 / len(w), color="0.3", ls="--", lw=0.8, label=f"uniform 1/{len(w)}")
        a.set(xlabel="key (token position, time order)", ylabel="mean attention weight", title=label)
    for a in ax.flat:
        a.legend(fontsize=7, loc="lower right" if a is ax[0, 1] else "best")
    fig.suptitle(f"osciformer Figure 3 ({title}); paper: curves and bars only, no values (App. E.2)", fontsize=9)
    return save_figure(fig, path, caption=caption)


def plot_fig4(omega0: np.ndarray, omega_init: np.ndarray, shown: np.ndarray, band: np.ndarray, per_class: np.ndarray,
              omegas: np.ndarray, phases: np.ndarray, alpha_key: np.ndarray, h_key: np.ndarray, key: int, path: Path,
              title: str, gamma_key: float | None = None, init_range: list[float] | None = None,
              caption: str | None = None) -> Path:
    """Figure 4 (a-d) in one 2 x 2 figure. Beside ours: the paper's initial frequency range (``init_range``, App.
    E.2) in (a) and its optimal phase phi*(omega) = arg H(omega) (App. E.2, item 3) of the shown key in (c), from
    the key's trained omega_0 and ``gamma_key``; the paper's statements without values go in ``caption``."""
    from matplotlib.figure import Figure

    from oscrepro.analysis.figures import PAPER_LINE, paper_label, save_figure

    fig = Figure(figsize=(11, 8.6))
    ax = fig.subplots(2, 2)
    ch = np.arange(len(omega0))
    ax[0, 0].axhspan(*band, color="0.9", label=f"data band [{band[0]:.2f}, {band[1]:.2f}] (App. E.2)")
    if init_range is not None:
        for y in init_range:
            ax[0, 0].axhline(y, **PAPER_LINE, label=paper_label(f"init ω log-uniform on [{init_range[0]:g}, "
                                                                f"{init_range[1]:g}] (App. E.2)")
                             if y == init_range[0] else "_nolegend_")
    ax[0, 0].scatter(ch, omega_init, s=10, color="0.5", label="ours: init")
    ax[0, 0].scatter(ch, omega0, s=14, color="C0", label="ours: trained")
    ax[0, 0].scatter(shown, omega0[shown], s=40, facecolors="none", edgecolors="C3", label="ours: top query weight")
    ax[0, 0].set(yscale="log", xlabel="key oscillator channel", ylabel="ω₀ (rad/s)", title="(a) natural frequencies")
    ax[0, 0].legend(fontsize=7)
    im = ax[0, 1].imshow(per_class, aspect="auto", cmap="viridis")
    ax[0, 1].set(xlabel="key (token position)", ylabel="true class", title="(b) mean attention weight")
    fig.colorbar(im, ax=ax[0, 1], label="ours: mean attention weight")
    im = ax[1, 0].imshow(alpha_key.T, aspect="auto", origin="lower", cmap="magma",
                         extent=(omegas[0], omegas[-1], phases[0], 2 * math.pi))
    ax[1, 0].plot(omegas, phases[alpha_key.argmax(1)], ls="none", marker="o", ms=3, mfc="w", mec="C0",
                  label="ours: argmax_φ α(ω, φ)")
    if gamma_key is not None:
        phi_star = np.mod(-np.arctan2(2 * gamma_key * omegas, omega0[key] ** 2 - omegas**2), 2 * math.pi)
        ax[1, 0].plot(omegas, phi_star, **{**PAPER_LINE, "color": "w", "lw": 2.0},
                      label=paper_label("φ*(ω) = arg H(ω) mod 2π (App. E.2)"))
    ax[1, 0].set(xlabel="ω (rad/s)", ylabel="φ", title=f"(c) α(ω, φ), key channel {key}")
    ax[1, 0].legend(fontsize=7, loc="upper right", framealpha=0.8)
    fig.colorbar(im, ax=ax[1, 0], label="α (channel logit)")
    a_max = alpha_key.max(1)
    ax[1, 1].plot(omegas, h_key / np.abs(h_key).max(), label="|H(ω)| of the trained ω₀, γ (scaled)")
    ax[1, 1].plot(omegas, a_max / max(np.abs(a_max).max(), 1e-300), label="ours: α_max(ω) (scaled)")
    ax[1, 1].set(xlabel="ω (rad/s)", title=f"(d) |H| vs α_max, key channel {key}")
    ax[1, 1].legend(fontsize=7)
    fig.suptitle(f"osciformer Figure 4 ({title})", fontsize=9)
    return save_figure(fig, path, caption=caption)
