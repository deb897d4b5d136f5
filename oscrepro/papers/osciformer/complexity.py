"""osciformer Sec. 5 (5.1-5.4): the closed form's complexity claim, measured on one attention layer of each kind.

Sec. 5 states, per head, for the numerical (ContiFormer-style) layer T_num = Theta(N^2 S d^2), M_num =
Theta(N^2 S d), depth Theta(S), and for the closed form T_cf = Theta(N^2 J d), M_cf = Theta(N^2 d), depth Theta(1),
so T_cf / T_num ~ J / (S d) (1/640 at S = 80, d = 64, J = 8, Sec. 5.4) and M_cf / M_num ~ 1/S. Here one
``OsciFormerAttention`` (closed form, J = ``n_modes``) and one ``ContiFormerAttention`` (RK4, S vector-field
evaluations, counted from the layer's ``field.nfe``) are built from ``conf/attention/{osciformer,contiformer}.yaml``
and called as the continuous-time encoder does (``mech(x, times=times, causal=True)``, XOR-like times with ties:
``kernel_bench.xor_times``). Per cell (N, d, J):

* time: forward (no_grad) and forward+backward (loss = sum of outputs), the two layers alternating trial by trial
  in this one process on ``threads`` threads (``harness.measure_alternating``), the whole set of cells passed over
  ``rounds`` times (``measure``); *process CPU time*, the steadier one on a shared machine. Every timed trial is
  kept: a time cell is mean ± std over the ``rounds x trials`` trials with n = that count (``SeedStat``; repeated
  measurements on this machine, not seeds), which is what the claims' Welch interval reads (issue 32: "repeated
  measurements (the bench's repeats) for costs"; with one median per cell they had n = 1 and no interval). The
  ratio cf / num is the mean of the per-trial ratios, trial i of the closed form over trial i of the ODE layer
  (timed back to back, so load that drifts over the build cancels: ``paired_ratio``).
* memory: peak bytes live in torch's CPU allocator during one extra forward+backward (``harness.peak_memory_mb``,
  ``torch.profiler`` allocation events): activations saved for backward, temporaries, gradients, plus parameters
  and input. Not counted: MKL/oneDNN scratch, the Python heap and allocator fragmentation (the process RSS of the
  whole build is given once in the notes, as the bound the machine actually had to hold). Measured once per round
  (n = ``rounds``), each time after the other cells have run, rather than declared deterministic: the allocator
  peak of one graph is expected to repeat to the byte (std 0, which the claims' rule reads as a deterministic
  quantity whose interval is the point), and a spread, if the heap's history ever changed it, would show in the
  cell instead of being assumed away. Memory ratios are per round, as for time.

The exponents and the figure use each cell's *median* (over the trials, over the rounds for memory), robust to one
trial slowed by the machine's other jobs; the cells and ratios show the full sample.

Three sweeps vary one of N, d, J around a base cell; per sweep the exponent p of time ~ x^p and memory ~ x^p is
the least-squares slope on log-log axes (``loglog_slope``; also the slope of the last segment, nearer the
asymptote), next to Sec. 5's exponents (data in the spec). Choices: one head (``n_heads`` 1), so d = d_head =
d_model, Sec. 5's per-head d, which is also the width of ContiFormer's vector field (it acts on all of d_model);
each layer keeps its config's precision (OsciFormer's kernel in float64, ContiFormer in float32) and the
ContiFormer stores its whole RK4 graph (``chunk_size`` null, the default), so M_num is what is measured. The
O(N d^2) per-token terms are included, as the layer runs: the Q/K/V/O projections of both, plus OsciFormer's
velocity and drive maps (U, A, B per key and value: six more d x d maps per token). At small N they weigh on the
closed form's exponents (d above 1, N below 2); nothing is subtracted. With these times, J = 1 (one grid
frequency, 0.01) lowers OsciFormer's rate bound rho, so the gaps of 1/32 fall below its ``small_lag`` and take
the Gauss-Legendre fallback: that cell is not the pure closed form (J >= 2 is).
"""

from __future__ import annotations

import resource
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from oscrepro.bench.harness import _fwd, _fwd_bwd, attention_factory, measure_alternating, paired_ratios, peak_memory_mb
from oscrepro.papers.osciformer.kernel_bench import _Timed, xor_times
from oscrepro.tables.run_helpers import num_threads
from oscrepro.tables.values import Num, SeedStat

AXES = ("seq_len", "d_model", "n_modes")  # the three sweeps, in table order
SYMBOL = {"seq_len": "N", "d_model": "d", "n_modes": "J"}
LAYERS = {"cf": "OsciFormer", "num": "ContiFormer"}  # closed form (Sec. 5.2) vs numerical (Sec. 5.1)
QUANTITIES = ("f+b ms", "fwd ms", "f+b MB")
Samples = dict[tuple[int, ...], dict[str, Any]]  # per cell (N, d, J): per '<layer> <quantity>' its list, and 'S'


def sweep_cells(base: dict[str, int], sweeps: dict[str, list[int]]) -> list[tuple[str, dict[str, int]]]:
    """(axis, cell) per table row: sweep ``axis`` sets that axis of ``base`` to each listed value, in order."""
    return [(axis, {**base, axis: int(v)}) for axis in AXES for v in sweeps[axis]]


def loglog_slope(x: list[float], y: list[float]) -> float:
    """Least-squares slope p of log y = p log x + c: the measured exponent of y ~ x^p (nan for fewer than 2 x)."""
    lx, ly = np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float))
    if len(set(lx.tolist())) < 2:
        return float("nan")
    return float(np.polyfit(lx, ly, 1)[0])


def _key(cell: dict[str, int]) -> tuple[int, ...]:
    return tuple(cell[a] for a in AXES)


def build_layers(cell: dict[str, int], batch: int, n_heads: int, seed: int = 0
                 ) -> tuple[dict[str, nn.Module], torch.Tensor]:
    """The two layers of one cell from their conf/attention configs (J overridden), wrapped with fixed times, and
    the input x (B, N, d). Parameters are drawn under a forked RNG, so each cell starts from the same state."""
    n, d = cell["seq_len"], cell["d_model"]
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        mechs = {"cf": attention_factory("osciformer", {"n_modes": cell["n_modes"]})(d, n_heads),
                 "num": attention_factory("contiformer")(d, n_heads)}
    times = xor_times(batch, n, seed)  # (B, N), gaps k/32 with ties
    x = torch.randn(batch, n, d, generator=torch.Generator().manual_seed(seed))  # (B, N, d)
    return {k: _Timed(m, times) for k, m in mechs.items()}, x


def solver_evaluations(layer: nn.Module, x: torch.Tensor) -> int:
    """S: vector-field evaluations of one ContiFormer forward (``field.nfe``; RK4 at step 0.1: 80)."""
    field = layer.mech.field
    field.nfe = 0
    _fwd(layer, x)
    return int(field.nfe)


def time_cell(cell: dict[str, int], batch: int, n_heads: int, warmup: int, trials: int) -> dict[str, list[float]]:
    """Per '<layer> <fwd|f+b> ms': the process-CPU ms of every trial, the two layers alternating."""
    layers, x = build_layers(cell, batch, n_heads)
    out: dict[str, list[float]] = {}
    for tag, fn in (("fwd ms", _fwd), ("f+b ms", _fwd_bwd)):
        for name, (_, cpu) in measure_alternating(layers, x, fn, warmup, trials).items():
            out[f"{name} {tag}"] = [1e3 * c for c in cpu]
    return out


def memory_cell(cell: dict[str, int], batch: int, n_heads: int) -> dict[str, float]:
    """S and per '<layer> f+b MB' the forward+backward's peak torch-allocator MB (deterministic: measured once)."""
    layers, x = build_layers(cell, batch, n_heads)
    out = {"S": float(solver_evaluations(layers["num"], x))}
    for name, layer in layers.items():
        out[f"{name} f+b MB"] = peak_memory_mb(_fwd_bwd, layer, x)
    return out


def measure(cells: list[tuple[str, dict[str, int]]], batch: int, n_heads: int, warmup: int, trials: int,
            rounds: int) -> Samples:
    """Per distinct cell (N, d, J): per '<layer> <fwd|f+b> ms' the ``rounds x trials`` process-CPU ms in round
    and trial order (index i of both layers timed in the same alternation), per '<layer> f+b MB' one peak per
    round, and S.

    The rounds spread each cell's trials over the whole build, so a minutes-long phase of background load (the
    shared machine's other jobs) inflates every cell alike instead of a few consecutive ones. S (RK4's field
    calls) is counted every round and must not change.
    """
    keys = list(dict.fromkeys(_key(c) for _, c in cells))  # the base cell, shared by the sweeps, once
    cell_of = {_key(c): c for _, c in cells}
    samples: Samples = {k: {} for k in keys}
    for r in range(rounds):
        for k in keys:
            for q, ms in time_cell(cell_of[k], batch, n_heads, warmup, trials).items():
                samples[k].setdefault(q, []).extend(ms)
            mem = memory_cell(cell_of[k], batch, n_heads)
            if samples[k].setdefault("S", mem["S"]) != mem["S"]:
                raise RuntimeError(f"S changed between rounds at {cell_of[k]}: {samples[k]['S']} vs {mem['S']}")
            for q in (q for q in mem if q != "S"):
                samples[k].setdefault(q, []).append(mem[q])
        print(f"[sec5_complexity] round {r + 1}/{rounds} done", flush=True)
    for k in keys:
        print(f"[sec5_complexity] {cell_of[k]}: {medians(samples)[k]}", flush=True)
    return samples


def medians(samples: Samples) -> dict[tuple[int, ...], dict[str, float]]:
    """Per cell, the median of every sample list (and S): the point each exponent fit and the figure use."""
    return {k: {q: float(v) if q == "S" else statistics.median(v) for q, v in m.items()} for k, m in samples.items()}


def paired_ratio(cf: list[float], num: list[float]) -> float:
    """Mean over trials of closed form / ODE, trial i with trial i (timed in the same alternation round; memory:
    the same round), so load that drifts over the build cancels in each ratio."""
    return statistics.fmean(paired_ratios(cf, num))


def _memory_spread(samples: Samples) -> str:
    """Whether the per-round memory peaks repeated exactly (std 0 in every memory cell), as the notes say it."""
    varied = sum(len(set(v)) > 1 for m in samples.values() for q, v in m.items() if "MB" in q)
    if not varied:
        return "every cell's peak the same to the byte in every round, std 0"
    return f"{varied} memory cell(s) varied between rounds: their ± is that spread"


def stat_cell(values: list[float], quantity: str) -> SeedStat:
    """One time or memory cell: mean ± std over its repeated measurements, n shown (ms to 0.1, MB to 0.01)."""
    return SeedStat.of(values, 1 if "ms" in quantity else 2, show_n=True)


def _ratio(r: float) -> Num:
    """A ratio below 1 shown as '1/x' (Sec. 5.4 writes 1/640), else as 'x'."""
    if r >= 1:
        return Num(r, "{:.2f}")
    return Num(1 / r, "1/{:.0f}" if r <= 0.1 else "1/{:.1f}")


def exponents(cells: list[tuple[str, dict[str, int]]], meas: dict[tuple[int, ...], dict[str, float]]
              ) -> dict[str, dict[str, tuple[float, float]]]:
    """Per axis, per '<layer> <quantity>': (LS slope over the sweep, slope of its last segment) on log-log axes."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for axis in AXES:
        pts = sorted((c[axis], meas[_key(c)]) for a, c in cells if a == axis)
        xs = [p[0] for p in pts]
        out[axis] = {f"{lay} {q}": (loglog_slope(xs, [m[f"{lay} {q}"] for _, m in pts]),
                                    loglog_slope(xs[-2:], [m[f"{lay} {q}"] for _, m in pts[-2:]]))
                     for lay in LAYERS for q in QUANTITIES}
    return out


def table_rows(cells: list[tuple[str, dict[str, int]]], samples: Samples
               ) -> tuple[list[str], list[dict[str, Any]]]:
    """The table's columns and one row per sweep cell: the times and memories as :func:`stat_cell` over their
    repeated measurements, the cf/num ratios paired trial by trial (:func:`paired_ratio`), and the paper's
    J/(S d) and 1/S from the counted S."""
    columns = ["Sweep", "N", "d", "J", "OsciFormer f+b ms", "ContiFormer f+b ms", "f+b cf/num", "OsciFormer fwd ms",
               "ContiFormer fwd ms", "fwd cf/num", "paper J/(S d)", "OsciFormer f+b MB", "ContiFormer f+b MB",
               "mem cf/num", "paper 1/S"]
    rows = []
    for axis, cell in cells:
        m = samples[_key(cell)]
        rows.append({"Sweep": SYMBOL[axis], "N": cell["seq_len"], "d": cell["d_model"], "J": cell["n_modes"],
                     **{f"{LAYERS[lay]} {q}": stat_cell(m[f"{lay} {q}"], q) for lay in LAYERS for q in QUANTITIES},
                     **{f"{tag} cf/num": _ratio(paired_ratio(m[f"cf {q}"], m[f"num {q}"]))
                        for tag, q in (("f+b", "f+b ms"), ("fwd", "fwd ms"), ("mem", "f+b MB"))},
                     "paper J/(S d)": _ratio(cell["n_modes"] / (m["S"] * cell["d_model"])),
                     "paper 1/S": _ratio(1 / m["S"])})
    return columns, rows


def osciformer_sec5_complexity(out_dir: Path, budget: str, results_dir: Path, name: str, base: dict[str, int],
                               sweeps: dict[str, list[int]], batch: int, n_heads: int = 1, warmup: int = 1,
                               trials: int = 2, rounds: int = 3, threads: int | None = 1,
                               figure: str = "sec5_complexity.png", paper: dict[str, Any] | None = None
                               ) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """osciformer Sec. 5: per cell the two layers' times, memories and cf/num ratios against J/(S d) and 1/S; the
    fitted exponents per sweep (notes) against the paper's; and the log-log figure."""
    cells = sweep_cells(base, sweeps)
    with num_threads(threads):
        samples = measure(cells, batch, n_heads, warmup, trials, rounds)
    columns, rows = table_rows(cells, samples)
    meas = medians(samples)
    fits = exponents(cells, meas)
    png = plot_complexity(cells, meas, fits, Path(out_dir) / figure, f"{name}, budget={budget}", paper)
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux
    notes = [
        f"**Protocol:** one attention layer of each kind, B = {batch}, {n_heads} head (d = d_head = d_model), causal, "
        f"XOR-like times; base cell {', '.join(f'{SYMBOL[a]} = {base[a]}' for a in AXES)}, one axis swept at a "
        f"time; {rounds} rounds over all cells, each {warmup} warm-up + {trials} alternating trials per cell; "
        f"process CPU time, {threads} thread(s), each time cell mean ± std over its {rounds * trials} trials (n = "
        "repeated measurements on this machine, not seeds); cf/num = mean of the per-trial ratios (the two layers "
        "timed back to back); S counted from ContiFormer's field calls. Memory: peak bytes in torch's CPU "
        "allocator during one forward+backward (parameters, input, activations, gradients; not MKL scratch or the "
        f"Python heap), measured once per round (n = {rounds}; {_memory_spread(samples)}). "
        "Exponents and figure: the median of each cell's measurements. The "
        "O(N d^2) projections (and OsciFormer's per-token U, A, B maps) are included in every time; OsciFormer's "
        f"kernel runs in float64, ContiFormer in float32 (their configs). Whole build: peak RSS {rss_gb:.2f} GB.",
        f"**Figure:** `{png.name}`: forward+backward (solid) and forward (dashed) ms vs N, d, J on log-log axes, "
        "with the paper's exponents as dotted guides.",
    ]
    pred = (paper or {}).get("exponents", {})
    for axis in AXES:
        parts = []
        for q, label in (("f+b ms", "time f+b"), ("fwd ms", "time fwd"), ("f+b MB", "memory f+b")):
            kind = "mem" if "MB" in q else "time"
            parts.append(f"{label}: " + ", ".join(
                f"{LAYERS[lay]} {fits[axis][f'{lay} {q}'][0]:.2f} [{fits[axis][f'{lay} {q}'][1]:.2f}]"
                + (f" (paper {pred[axis][f'{kind}_{lay}']})" if axis in pred else "") for lay in LAYERS))
        xs = sorted({c[axis] for a, c in cells if a == axis})
        notes.append(f"**Exponent in {SYMBOL[axis]}** ({SYMBOL[axis]} = {', '.join(map(str, xs))}; LS slope of "
                     f"log-log, [last segment]): " + "; ".join(parts) + ".")
    inst = (paper or {}).get("instance")
    near = sorted(k for k in meas if inst and k[1:] == (inst["d"], inst["J"]))  # (N, d, J) at the instance's d, J
    if near:  # the largest N measured there: nearest the N^2 asymptote
        m = samples[near[-1]]
        notes.append(f"**Sec. 5.4 instance** (d = {inst['d']}, J = {inst['J']}, paper S = {inst['S']}; measured at "
                     f"N = {near[-1][0]}, S = {m['S']:.0f}; per-trial ratios): time cf/num f+b "
                     f"{_ratio(paired_ratio(m['cf f+b ms'], m['num f+b ms']))}, fwd "
                     f"{_ratio(paired_ratio(m['cf fwd ms'], m['num fwd ms']))} (paper J/(S d) = {inst['ratio']}); "
                     f"memory {_ratio(paired_ratio(m['cf f+b MB'], m['num f+b MB']))} (paper 1/S = 1/{inst['S']}).")
    notes += [f"**Paper:** {p}" for p in (paper or {}).get("reading", [])]
    return columns, rows, notes


def plot_complexity(cells: list[tuple[str, dict[str, int]]], meas: dict[tuple[int, ...], dict[str, float]],
                    fits: dict[str, dict[str, tuple[float, float]]], path: Path, title: str,
                    paper: dict[str, Any] | None = None) -> Path:
    """Three log-log panels (time vs N, d, J): both layers, f+b solid and forward dashed; dotted lines of the
    paper's time exponents through each layer's first f+b point."""
    from matplotlib.figure import Figure

    from oscrepro.analysis.figures import save_figure

    pred = (paper or {}).get("exponents", {})
    fig = Figure(figsize=(13, 3.8))
    for ax, axis in zip(fig.subplots(1, 3), AXES, strict=True):
        pts = sorted((c[axis], meas[_key(c)]) for a, c in cells if a == axis)
        xs = np.array([p[0] for p in pts], dtype=float)
        for color, lay in zip(("C0", "C1"), LAYERS, strict=True):
            fb = np.array([m[f"{lay} f+b ms"] for _, m in pts])
            ax.plot(xs, fb, "o-", color=color,
                    label=f"{LAYERS[lay]} f+b (slope {fits[axis][f'{lay} f+b ms'][0]:.2f})")
            ax.plot(xs, [m[f"{lay} fwd ms"] for _, m in pts], "s--", color=color, alpha=0.6,
                    label=f"{LAYERS[lay]} fwd")
            if axis in pred:
                p = float(pred[axis][f"time_{lay}"])
                ax.plot(xs, fb[0] * (xs / xs[0]) ** p, ":", color=color, label=f"paper slope {p:g}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(SYMBOL[axis])
        ax.set_ylabel("CPU ms (median of the trials)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle(f"osciformer Sec. 5: one layer's time vs N, d, J ({title})", fontsize=9)
    return save_figure(fig, path)
