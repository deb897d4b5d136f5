"""Reading a trained FSN kernel as coupling functions (fsn §4.4, Figure 2; Eq. 2-3, §3.3).

Each coordinate a and harmonic n of layer l has complex coefficients w0(l, a, n) (present field) and w1(l, a, n)
(successor field). Writing w = rho e^{i phi}, the present-field part of Eq. 2 is attention-weighted
Kuramoto-Sakaguchi-Daido coupling rho_n sin(n Delta + phi_n) with Delta = theta_u - theta_t (Eq. 3), i.e.
Re w sin(n Delta) + Im w cos(n Delta). Figure 2 reads, per layer:

* the realised present-field coupling function (left panel)
      f_l(Delta) = (1/k) sum_a sum_{n=1..N} [Re w0(l,a,n) sin(n Delta) + Im w0(l,a,n) cos(n Delta)],
  against the Kuramoto reference sin(Delta) (:func:`coupling_function`);
* the root-mean-square over coordinates of |w0^(n)| and |w1^(n)| by harmonic (right panel,
  :func:`harmonic_rms`), hatched where the coordinate-mean real coefficient is negative (a harmonic coupling at
  phase offset pi, i.e. repulsion; :func:`mean_real`).

:func:`value_gate_negative_fraction` adds the §4.4 remark on the signed value gates (fraction of (token,
coordinate) pairs whose shared value gate is negative on given tokens). Pure torch/numpy; the backbone is a
:class:`~oscrepro.papers.fsn.torus_lm.TorusLM` whose layers' ``attn`` modules expose ``coefficients()``
(:class:`~oscrepro.attention.fsn.FSNAttention`); the no-phase configuration reads with Im w = 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from oscrepro.analysis.figures import save_figure


@dataclass(frozen=True)
class LayerKernel:
    """One layer's kernel: w0, w1 as complex numpy arrays (N, k); w1 is None without the delay term."""

    layer: int
    w0: np.ndarray
    w1: np.ndarray | None


def kernel_coefficients(model: nn.Module) -> list[LayerKernel]:
    """Per-layer (w0, w1) of a torus LM with FSN coupling; raises if a layer has no complex kernel."""
    out = []
    for i, layer in enumerate(getattr(model, "layers", [])):
        attn = getattr(layer, "attn", None)
        if attn is None or not hasattr(attn, "coefficients"):
            raise TypeError(f"layer {i} has no FSN kernel (coupling {type(attn).__name__}); Figure 2 reads FSN runs")
        with torch.no_grad():
            w0, w1 = attn.coefficients()
        out.append(LayerKernel(i, w0.cpu().numpy(), None if w1 is None else w1.cpu().numpy()))
    if not out:
        raise TypeError(f"{type(model).__name__} has no layers with a coupling kernel")
    return out


def coupling_function(w: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """f(Delta) = (1/k) sum_a sum_n [Re w_an sin(n Delta) + Im w_an cos(n Delta)] for w (N, k): (len(delta),)."""
    n = np.arange(1, w.shape[0] + 1)[:, None]  # (N, 1)
    re, im = w.real.mean(axis=1)[:, None], w.imag.mean(axis=1)[:, None]  # coordinate means (N, 1)
    return (re * np.sin(n * delta[None, :]) + im * np.cos(n * delta[None, :])).sum(axis=0)


def harmonic_rms(w: np.ndarray) -> np.ndarray:
    """RMS over coordinates of |w^(n)|, (N,)."""
    return np.sqrt((np.abs(w) ** 2).mean(axis=1))


def mean_real(w: np.ndarray) -> np.ndarray:
    """Coordinate-mean real coefficient per harmonic, (N,): negative = net repulsive harmonic."""
    return w.real.mean(axis=1)


def first_harmonic_share(w: np.ndarray) -> float:
    """Share of the coupling function's energy (sum over n of mean-coefficient |.|^2) in the first harmonic;
    1.0 is a pure Kuramoto-Sakaguchi sine."""
    m = np.abs(w.mean(axis=1)) ** 2  # (N,)
    return float(m[0] / m.sum()) if m.sum() > 0 else math.nan


@torch.no_grad()
def value_gate_negative_fraction(model: nn.Module, tokens: Tensor) -> list[float]:
    """Per layer, the fraction of (token, coordinate) pairs with a negative value gate g^v on ``tokens`` (B, T)."""
    from oscrepro.attention.kuramoto import phasors

    was_training = model.training
    model.eval()
    theta = model.embed(tokens)  # (B, T, k)
    fractions = []
    for layer in model.layers:
        _, _, gv = model.gates.gates(phasors(theta))  # (B, T, k), shared gate map evaluated on this layer's input
        fractions.append(float((gv < 0).float().mean()))
        theta, _ = layer(theta)
    model.train(was_training)
    return fractions


def layer_summary(kernels: list[LayerKernel]) -> list[dict[str, object]]:
    """Figure 2's numbers per layer: RMS |w| and mean Re w per harmonic for both fields, mean |Im w0|."""
    rows = []
    for lk in kernels:
        row: dict[str, object] = {"layer": lk.layer + 1}
        for field, w in (("w0", lk.w0), ("w1", lk.w1)):
            if w is None:
                continue
            for n, (r, m) in enumerate(zip(harmonic_rms(w), mean_real(w), strict=True), start=1):
                row[f"RMS ‖{field}^{n}‖"] = float(r)
                row[f"mean Re {field}^{n}"] = float(m)
        row["mean abs Im w0"] = float(np.abs(lk.w0.imag).mean())
        row["first-harmonic share f_l"] = first_harmonic_share(lk.w0)
        rows.append(row)
    return rows


def plot_figure2(kernels: list[LayerKernel], path: str | Path, title: str = "",
                 paper_negative: list[tuple[int, int]] | None = None, caption: str | None = None) -> Path:
    """Left: f_l(Delta) per layer with sin(Delta) dashed gray; right: RMS |w^(n)| bars, hatched if mean Re < 0.

    ``paper_negative``: the (layer, harmonic) pairs, 1-based, whose present-field coordinate-mean Re w0 the paper
    states trained negative (§4.4), marked by a hollow triangle over our bar; the paper gives no magnitudes, so its
    other statements go in ``caption``."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from oscrepro.analysis.figures import PAPER, paper_label

    fig = Figure(figsize=(11, 4.4))
    ax_f, ax_b = fig.subplots(1, 2)
    delta = np.linspace(-math.pi, math.pi, 361)
    for lk in kernels:
        ax_f.plot(delta, coupling_function(lk.w0, delta), label=f"ours: layer {lk.layer + 1}")
    ax_f.plot(delta, np.sin(delta), "--", color="gray", label="sin Δ (Kuramoto reference, as in the paper)")
    ax_f.set(xlabel="Δ = θ_u − θ_t", ylabel="f_l(Δ)", title="present-field coupling function")
    ax_f.legend(fontsize=8)
    fields = [("w0", "present"), ("w1", "successor")]
    n_h = kernels[0].w0.shape[0]
    width = 0.8 / (2 * n_h)
    tops: dict[tuple[int, int], tuple[float, float]] = {}  # (layer, harmonic), 1-based -> present bar (x, height)
    for li, lk in enumerate(kernels):
        for fi, (name, lab) in enumerate(fields):
            w = getattr(lk, name)
            if w is None:
                continue
            for n, (r, m) in enumerate(zip(harmonic_rms(w), mean_real(w), strict=True)):
                x = li + (fi * n_h + n - (2 * n_h - 1) / 2) * width
                ax_b.bar(x, r, width, color=f"C{fi * n_h + n}", hatch="//" if m < 0 else None, edgecolor="k",
                         label=f"ours: {lab} n={n + 1}" if li == 0 else None)
                if fi == 0:
                    tops[(lk.layer + 1, n + 1)] = (x, float(r))
    handles, labels = ax_b.get_legend_handles_labels()
    handles.append(Patch(facecolor="w", edgecolor="k", hatch="//"))
    labels.append("hatched: ours, mean Re < 0")
    marks = [tops[k] for k in (paper_negative or []) if k in tops]
    if marks:
        ax_b.plot([x for x, _ in marks], [h + 0.03 * max(t for _, t in tops.values()) for _, h in marks],
                  **{**PAPER, "marker": "v"}, label=paper_label("mean Re w0 < 0 here (§4.4)"))
        handles.append(ax_b.get_lines()[-1])
        labels.append(ax_b.get_lines()[-1].get_label())
    ax_b.set_xticks(range(len(kernels)), [f"layer {lk.layer + 1}" for lk in kernels])
    ax_b.set(ylabel="RMS over coordinates of |w^(n)|", title="harmonic magnitudes (hatched: mean Re < 0)")
    ax_b.legend(handles, labels, fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        fig.suptitle(title)
    return save_figure(fig, path, caption=caption)
