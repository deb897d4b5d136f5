"""Copy-depth decomposition of per-token loss (fsn paper, Sec. 4.3 and Appendix C).

Depth (App. C, "Depth assignment"): position i of a sequence s has copy depth

    depth[i] = max { l <= cap : s[i-l+1 .. i] == s[j-l+1 .. j] for some j < i with j-l+1 >= lo[i] }   (0 if none)

where ``lo[i] = i - window + 1`` for :func:`copy_depths` (the earlier occurrence lies inside the last ``window``
positions; overlapping occurrences count) and ``lo[i]`` = first position of the row for :func:`window_copy_depths`
(labels "within each evaluation window", the protocol of App. C). Cap 32 as in the paper.

Algorithm (exact, O(cap * n log n) worst case, numpy only). The property P_l(i) "the l-gram ending at i recurs
within reach" is monotone in l, so depth = the last l with P_l true. Level l works on a candidate set R_{l-1} of
positions, each carrying a dense id of its (l-1)-gram; the l-gram key is (id, s[i-l+1]) -- extension to the
*left* -- and one sort of (key, position) gives every element's nearest earlier equal l-gram in the set. The
candidate set shrinks to R_l = positions having an equal l-gram (before or after) at distance <= window - l:
it contains every position with P_l and the nearest earlier match of each, so nearest-in-set == nearest overall
for every match that can count, and the labelling stays exact. On text with window 256 the set shrinks fast
(4.7 n elements sorted over all levels on WikiText; 12 n with an unbounded window), and the two widest levels use
a radix sort. :func:`copy_depths_reference` is the brute-force definition the tests compare to.

Evaluation protocol (App. C, "Evaluation protocol"): bins 0-1, 2-3, 4-7, 8-15, 16-23, 24-32; the standard slice
is the first 1,024 validation windows; bins of depth >= 16 pool it with a 192-window deep-copy-enriched slice;
the margin of a bin is the mean over its tokens of the paired per-token cross-entropy difference in bits, model
minus reference; 95 % CIs are window-cluster bootstrap intervals (4,000 resamples). Figure 4 uses exact depths
0..32 and a position bootstrap (2,000 resamples) around the seed mean.

Choices where the paper is silent (also in the report):
  * Alignment of labels to predicted tokens (:func:`target_depths`): the CE at input position t predicts
    y[t] = c[t+1] of the window chunk c (T+1 chars). Its label, by default (``convention="continuation"``), is the
    number of context characters that the target continues: max(m - 1, 0) where m = depth of c[t+1] within the
    chunk (the match *including* the target), computed with cap + 1 so the label still reaches ``cap``. This is
    the reading under which App. C's remark holds that Arora et al.'s associative-recall hit (the bigram of the
    preceding token and the target seen before, m = 2) "corresponds to depth one", and it reproduces the paper's
    bin shares: on the CPython stand-in's first 1,024 val windows the shares of bins 0-1/2-3/4-7/8-15 are
    .615/.120/.125/.098 vs the paper's codeparrot .620/.117/.126/.090 (raw m gives .463/.221/.154/.114).
    ``convention="match"`` returns m itself.
  * Enriched slice: candidates are validation windows whose span does not overlap the standard slice; scored by
    the count of positions with depth >= 16; picked greedily by score (ties: earlier window) without overlapping
    each other, so no character is counted twice in the pooled bins.
  * Bootstrap: percentile interval of the ratio estimator sum(delta)/count over resampled windows (all windows of
    the slice are clusters, also those with no token in the bin); resamples with zero tokens in a bin are dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from oscrepro.analysis.figures import save_figure

DEPTH_BINS: tuple[tuple[int, int], ...] = ((0, 1), (2, 3), (4, 7), (8, 15), (16, 23), (24, 32))
DEEP_FROM = 16  # bins starting at this depth pool the standard and enriched slices


# ----------------------------------------------------------------------------------------------- labelling
def _as_symbols(seq: bytes | str | np.ndarray) -> tuple[np.ndarray, int]:
    """Symbols as int64 ids plus the alphabet size (bytes: 256; str: code points; ints: compacted ranks)."""
    if isinstance(seq, (bytes, bytearray, memoryview)):
        return np.frombuffer(bytes(seq), dtype=np.uint8).astype(np.int64), 256
    if isinstance(seq, str):
        seq = np.frombuffer(seq.encode("utf-32-le"), dtype=np.uint32)
    arr = np.asarray(seq)
    if arr.ndim != 1:
        raise ValueError(f"expected a 1-D sequence, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64), 1
    uniq, inv = np.unique(arr, return_inverse=True)
    return inv.astype(np.int64).ravel(), int(uniq.size)


def _label(ids: np.ndarray, alpha: int, seg: np.ndarray, seg_start: np.ndarray | None, reach: int,
           cap: int) -> np.ndarray:
    """Depths for symbol ids (n,). ``seg`` (n,) segment ids; ``seg_start`` (n,) first position of each position's
    segment, or None for the sliding window (earliest match start i - reach + 1); ``reach`` = window length."""
    n = ids.size
    depth = np.zeros(n, dtype=np.int16)
    pad = min(cap, reach)
    # `pad` unique sentinels before position 0: an ell-gram running off the start never equals anything
    sym = np.concatenate([alpha + np.arange(pad, dtype=np.int64), ids])  # (pad + n,)
    alpha += pad
    pos = np.arange(pad, pad + n, dtype=np.int64)  # candidate set R_{ell-1} (padded coordinates), by (id, pos)
    gid = seg.astype(np.int64)  # dense id of the (ell-1)-gram ending at pos (level 0: the segment)
    pos_bits = max(1, (pad + n - 1).bit_length())
    for ell in range(1, pad + 1):
        if pos.size < 2:
            break
        key = gid * alpha + sym[pos - ell + 1]  # (ell-1)-gram id extended to the left by one symbol
        kmax = int(key.max())
        if kmax < 1 << 16:  # radix sort; stable keeps the (id, pos) order inside equal keys
            order = np.argsort(key.astype(np.uint16), kind="stable")
            ks, ps = key[order], pos[order]
        elif kmax.bit_length() + pos_bits <= 63:
            packed = np.sort((key << pos_bits) | pos)
            ks, ps = packed >> pos_bits, packed & ((1 << pos_bits) - 1)
        else:  # keys too wide to pack: slower but exact
            order = np.lexsort((pos, key))
            ks, ps = key[order], pos[order]
        same = ks[1:] == ks[:-1]  # element k+1 has an earlier equal ell-gram, the nearest being element k
        near = same & (ps[1:] - ps[:-1] <= reach - ell)
        if seg_start is None:  # sliding window: "within reach" is exactly the hit condition
            hit = near
        else:
            hit = same & (ps[:-1] - (pad + ell - 1) >= seg_start[ps[1:] - pad])
        depth[ps[1:][hit] - pad] = ell
        keep = np.zeros(ps.size, dtype=bool)
        keep[1:] = near
        keep[:-1] |= near
        new_id = np.zeros(ps.size, dtype=np.int64)
        np.cumsum(~same, out=new_id[1:])
        pos, gid = ps[keep], new_id[keep]
    return depth


def copy_depths(seq: bytes | str | np.ndarray, window: int, cap: int = 32) -> np.ndarray:
    """Copy depth of every position of ``seq`` with a sliding look-back ``window`` (module docstring), int16 (n,).

    The earlier occurrence must end before i and start at or after ``i - window + 1``; so depth <= window - 1.
    """
    if window < 1 or cap < 0:
        raise ValueError(f"need window >= 1 and cap >= 0, got window={window}, cap={cap}")
    ids, alpha = _as_symbols(seq)
    n = ids.size
    return _label(ids, alpha, np.zeros(n, dtype=np.int64), None, window, cap)


def copy_depths_reference(seq: bytes | str | np.ndarray, window: int, cap: int = 32) -> np.ndarray:
    """Brute-force definition of :func:`copy_depths` (O(n * window * cap^2)); for tests only."""
    ids, _ = _as_symbols(seq)
    s = ids.tolist()
    out = np.zeros(len(s), dtype=np.int16)
    for i in range(len(s)):
        for ell in range(1, cap + 1):
            lo = max(i - window + 1, 0)
            if not any(s[j - ell + 1 : j + 1] == s[i - ell + 1 : i + 1] for j in range(lo + ell - 1, i)):
                break
            out[i] = ell
    return out


def window_copy_depths(windows: np.ndarray, cap: int = 32) -> np.ndarray:
    """Depths computed independently inside each row of ``windows`` (N, L) (App. C labels); int16 (N, L)."""
    w = np.asarray(windows)
    if w.ndim != 2:
        raise ValueError(f"expected (N, L) windows, got shape {w.shape}")
    n_win, length = w.shape
    ids, alpha = _as_symbols(w.ravel())
    seg = np.repeat(np.arange(n_win, dtype=np.int64), length)  # (N*L,)
    return _label(ids, alpha, seg, seg * length, length, cap).reshape(n_win, length)


def target_depths(chunks: np.ndarray, cap: int = 32, convention: str = "continuation") -> np.ndarray:
    """Labels (N, T) of the T predicted tokens of (N, T+1) window chunks (alignment: module docstring)."""
    if convention == "match":
        return window_copy_depths(chunks, cap)[:, 1:]
    if convention != "continuation":
        raise ValueError(f"convention must be 'continuation' or 'match', got {convention!r}")
    m = window_copy_depths(chunks, cap + 1)[:, 1:]  # match length including the target
    return np.maximum(m - 1, 0).astype(np.int16)


def depth_bin_index(depths: np.ndarray, bins: tuple[tuple[int, int], ...] = DEPTH_BINS) -> np.ndarray:
    """Bin index per position (same shape), -1 outside every bin."""
    out = np.full(np.shape(depths), -1, dtype=np.int64)
    for b, (lo, hi) in enumerate(bins):
        out[(depths >= lo) & (depths <= hi)] = b
    return out


def bin_label(b: tuple[int, int]) -> str:
    return f"{b[0]}–{b[1]}"


# ------------------------------------------------------------------------------------------------- slices
def select_enriched_windows(depths: np.ndarray, starts: np.ndarray, length: int, n_select: int = 192,
                            deep_from: int = DEEP_FROM, forbid_before: int = 0) -> np.ndarray:
    """Indices (ascending) of the deep-copy-enriched slice, chosen from labels alone before any model is run.

    Args:
        depths: (N, T) labels of the candidate windows; starts: (N,) first character of each window.
        length: characters spanned by a window; windows starting before ``forbid_before`` (e.g. the end of the
            standard slice) are excluded. Greedy by count of depth >= ``deep_from`` positions, no two overlapping;
            windows without any deep position are never chosen.
    """
    score = (np.asarray(depths) >= deep_from).sum(axis=1)
    starts = np.asarray(starts, dtype=np.int64)
    order = np.lexsort((np.arange(score.size), -score))
    chosen: list[int] = []
    taken = np.zeros(0, dtype=np.int64)
    for k in order:
        if len(chosen) == n_select or score[k] == 0:
            break
        if starts[k] < forbid_before or (taken.size and np.any(np.abs(taken - starts[k]) < length)):
            continue
        chosen.append(int(k))
        taken = np.append(taken, starts[k])
    return np.sort(np.array(chosen, dtype=np.int64))


def evaluation_slices(starts: np.ndarray, chunks: np.ndarray, n_standard: int = 1024, n_enriched: int = 192,
                      deep_from: int = DEEP_FROM, cap: int = 32) -> dict[str, np.ndarray]:
    """App. C slices of the validation windows (``starts`` (N,), ``chunks`` (N, T+1), e.g. from a char-level
    data module's ``eval_chunks``): indices and (n, T) target labels of the standard and enriched slices."""
    depths = target_depths(chunks, cap)  # (N, T)
    std = np.arange(min(n_standard, len(starts)))
    end = int(starts[std[-1]]) + chunks.shape[1] if std.size else 0  # first character after the standard slice
    enr = select_enriched_windows(depths, starts, chunks.shape[1], n_enriched, deep_from, forbid_before=end)
    return {"standard": std, "enriched": enr, "depth_standard": depths[std], "depth_enriched": depths[enr]}


# ---------------------------------------------------------------------------------------------- margins
def delta_bits(ce_model: np.ndarray, ce_ref: np.ndarray, unit: str = "nats") -> np.ndarray:
    """Paired per-token CE difference model - reference, in bits (negative favours the model).

    For Table 5 pass as ``ce_ref`` the per-token mean over the reference seeds (App. C, "The code battery")."""
    if np.shape(ce_model) != np.shape(ce_ref):
        raise ValueError(f"CE arrays differ in shape: {np.shape(ce_model)} vs {np.shape(ce_ref)}")
    d = np.asarray(ce_model, dtype=np.float64) - np.asarray(ce_ref, dtype=np.float64)
    if unit == "nats":
        return d / math.log(2.0)
    if unit == "bits":
        return d
    raise ValueError(f"unit must be 'nats' or 'bits', got {unit!r}")


def cluster_bootstrap(values: np.ndarray, masks: np.ndarray, n_resamples: int = 4000, seed: int = 0,
                      level: float = 0.95, chunk: int = 500) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Window-cluster bootstrap of masked token means.

    Args:
        values: (N, T) per-token values (N windows = clusters); masks: (K, N, T) bool, one statistic each.
    Returns: point means (K,), CI low (K,), CI high (K,) -- percentile intervals from resampling windows.
    """
    masks = np.asarray(masks, dtype=bool)
    sums = np.einsum("knt,nt->nk", masks, np.asarray(values, dtype=np.float64))  # (N, K)
    counts = masks.sum(axis=2).T.astype(np.float64)  # (N, K)
    with np.errstate(invalid="ignore", divide="ignore"):
        point = sums.sum(0) / counts.sum(0)
        rng = np.random.default_rng(seed)
        stats = []
        for start in range(0, n_resamples, chunk):
            idx = rng.integers(0, sums.shape[0], size=(min(chunk, n_resamples - start), sums.shape[0]))
            stats.append(sums[idx].sum(1) / counts[idx].sum(1))  # (R, K)
        boot = np.concatenate(stats)
    a = (1.0 - level) / 2.0
    lo, hi = np.nanquantile(boot, [a, 1.0 - a], axis=0) if boot.size else (point, point)
    return point, lo, hi


@dataclass(frozen=True)
class BinMargin:
    """One cell of Tables 4/5: mean Δbits on a depth bin with its 95 % window-cluster CI."""

    lo: int
    hi: int
    mean: float
    ci_low: float
    ci_high: float
    n_tokens: int

    @property
    def label(self) -> str:
        return bin_label((self.lo, self.hi))


def bin_margins(delta_std: np.ndarray, depth_std: np.ndarray, delta_enr: np.ndarray | None = None,
                depth_enr: np.ndarray | None = None, bins: tuple[tuple[int, int], ...] = DEPTH_BINS,
                deep_from: int = DEEP_FROM, n_resamples: int = 4000, seed: int = 0) -> list[BinMargin]:
    """Per-bin margins (Tables 4/5): shallow bins on the standard slice, bins >= ``deep_from`` pooled.

    ``delta_*`` are (N, T) Δbits arrays from :func:`delta_bits`, ``depth_*`` their (N, T) labels.
    """
    pooled = delta_enr is not None
    groups = [("std", delta_std, depth_std, [b for b in bins if not (pooled and b[0] >= deep_from)])]
    if pooled:
        groups.append(("pool", np.concatenate([delta_std, delta_enr]), np.concatenate([depth_std, depth_enr]),
                       [b for b in bins if b[0] >= deep_from]))
    cells: dict[tuple[int, int], BinMargin] = {}
    for _, delta, depth, group_bins in groups:
        if not group_bins:
            continue
        masks = np.stack([(depth >= lo) & (depth <= hi) for lo, hi in group_bins])  # (K, N, T)
        mean, ci_lo, ci_hi = cluster_bootstrap(delta, masks, n_resamples, seed)
        for k, (lo, hi) in enumerate(group_bins):
            cells[(lo, hi)] = BinMargin(lo, hi, float(mean[k]), float(ci_lo[k]), float(ci_hi[k]),
                                        int(masks[k].sum()))
    return [cells[b] for b in bins]


def seed_summary(per_seed: list[list[BinMargin]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seed mean, min and max of the per-bin margins (Table 4 'mean' rows; range = max - min)."""
    vals = np.array([[m.mean for m in row] for row in per_seed])  # (S, bins)
    return vals.mean(0), vals.min(0), vals.max(0)


def table_rows(families: dict[str, list[list[BinMargin]]]) -> list[dict[str, object]]:
    """Rows of Table 4/5: a token-count row, one row per seed (mean + CI), then a mean row (mean + range)."""
    first = next(iter(families.values()))[0]
    rows: list[dict[str, object]] = [{"model": "Tokens", "row": "count",
                                      "cells": [m.n_tokens for m in first], "bins": [m.label for m in first]}]
    for name, per_seed in families.items():
        for s, row in enumerate(per_seed):
            rows.append({"model": name, "row": f"s{s}", "cells": [m.mean for m in row],
                         "ci": [(m.ci_low, m.ci_high) for m in row], "n_tokens": [m.n_tokens for m in row]})
        mean, mn, mx = seed_summary(per_seed)
        rows.append({"model": name, "row": "mean", "cells": mean.tolist(), "range": (mx - mn).tolist()})
    return rows


def format_table(rows: list[dict[str, object]]) -> str:
    """Markdown rendering of :func:`table_rows` (CI / range beneath each value, as in the paper)."""
    lines = ["| model | " + " | ".join(rows[0]["bins"]) + " |", "|---" * (1 + len(rows[0]["bins"])) + "|"]
    lines.append("| Tokens | " + " | ".join(f"{c:,}" for c in rows[0]["cells"]) + " |")
    for r in rows[1:]:
        vals = " | ".join(f"{v:+.4f}" for v in r["cells"])
        lines.append(f"| {r['model']}, {r['row']} | {vals} |")
        sub = ([f"[{a:+.4f}, {b:+.4f}]" for a, b in r["ci"]] if "ci" in r else
               [f"range {v:.4f}" for v in r["range"]])
        lines.append("|  | " + " | ".join(sub) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class DepthCurve:
    """Figure 4: seed-mean margin at exact depths 0..max_depth (last point pools >= max_depth)."""

    depths: np.ndarray
    mean: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    n_tokens: np.ndarray


def per_depth_curve(deltas_std: list[np.ndarray], depth_std: np.ndarray,
                    deltas_enr: list[np.ndarray] | None = None, depth_enr: np.ndarray | None = None,
                    max_depth: int = 32, deep_from: int = DEEP_FROM, n_resamples: int = 2000,
                    seed: int = 0) -> DepthCurve:
    """Seed-mean Δbits per exact depth with a 95 % position-bootstrap band (seeds share the tokens)."""
    mean_std = np.mean(np.stack(deltas_std), axis=0)  # (N, T) seed mean per token
    mean_enr = np.mean(np.stack(deltas_enr), axis=0) if deltas_enr is not None else None
    rng = np.random.default_rng(seed)
    ds = np.arange(max_depth + 1)
    out = np.full((4, ds.size), np.nan)
    for d in ds:
        sel = (depth_std >= d) if d == max_depth else (depth_std == d)
        vals = mean_std[sel]
        if mean_enr is not None and d >= deep_from:
            vals = np.concatenate([vals, mean_enr[(depth_enr >= d) if d == max_depth else (depth_enr == d)]])
        out[3, d] = vals.size
        if vals.size == 0:
            continue
        step = int(max(1, min(n_resamples, 2_000_000 // vals.size)))  # bounded memory per chunk
        boot = np.concatenate([vals[rng.integers(0, vals.size, size=(min(step, n_resamples - s), vals.size))]
                               .mean(1) for s in range(0, n_resamples, step)])
        out[0, d], (out[1, d], out[2, d]) = vals.mean(), np.quantile(boot, [0.025, 0.975])
    return DepthCurve(ds, out[0], out[1], out[2], out[3].astype(np.int64))


# ------------------------------------------------------------------------------------------------ figures
def _axes() -> tuple[object, object]:
    """A figure without pyplot (no global backend switch, nothing left open)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.5))
    return fig, fig.subplots()


def _finish(fig: object, ax: object, path: str | Path, xlabel: str, title: str, caption: str | None = None) -> Path:
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set(xlabel=xlabel, ylabel="Δ bits/char vs reference", title=title)
    ax.legend(fontsize=8)
    return save_figure(fig, path, caption=caption)


def plot_bin_margins(families: dict[str, list[list[BinMargin]]], path: str | Path, title: str = "",
                     paper: dict[str, list[float]] | None = None, caption: str | None = None) -> Path:
    """Figure 1: seed-mean margin per bin as bars, whiskers spanning the per-seed range (min..max); ``paper``
    (family -> the paper's seed-mean margin per bin, reference data) as hollow diamonds on the bars."""
    labels = [m.label for m in next(iter(families.values()))[0]]
    return plot_bin_bars(labels, {name: seed_summary(per_seed) for name, per_seed in families.items()}, path, title,
                         paper, caption)


def plot_bin_bars(labels: list[str], stats: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], path: str | Path,
                  title: str = "", paper: dict[str, list[float]] | None = None, caption: str | None = None) -> Path:
    """Figure 1 from per-family (seed mean, min, max) per bin (:func:`plot_bin_margins`; the redraw from the csv)."""
    from oscrepro.analysis.figures import PAPER, paper_label

    fig, ax = _axes()
    fig.set_size_inches(9.5, 4.0)
    width = 0.8 / max(len(stats), 1)
    for f, (name, (mean, mn, mx)) in enumerate(stats.items()):
        x = np.arange(mean.size) + (f - (len(stats) - 1) / 2) * width
        ax.bar(x, mean, width, label=f"{name} (ours)", color=f"C{f}", yerr=np.stack([mean - mn, mx - mean]),
               capsize=3)
        if paper and paper.get(name) is not None:  # one legend key: each diamond sits on its family's bar
            first = not any(str(line.get_label()).startswith("paper") for line in ax.get_lines())
            ax.plot(x, paper[name], **{**PAPER, "ms": 6},
                    label=paper_label("seed mean, on each model's bar") if first else "_nolegend_")
    ax.set_xticks(np.arange(len(labels)), labels)
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set(xlabel="copy depth", ylabel="Δ bits/char vs reference", title=title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, path, caption=caption)


def plot_depth_curves(curves: dict[str, DepthCurve], path: str | Path, title: str = "",
                      paper_bins: dict[str, list[float]] | None = None,
                      paper_points: dict[str, dict[int, float]] | None = None, caption: str | None = None) -> Path:
    """Figure 4: margin at every exact depth with shaded position-bootstrap bands. Beside ours, in each family's
    colour: ``paper_bins`` (family -> the paper's Table 4 seed-mean margin per :data:`DEPTH_BINS` bin) as dotted
    steps over the bin's depths, and ``paper_points`` (family -> {depth: margin} the text states) as hollow
    diamonds; reference data, never ours."""
    from oscrepro.analysis.figures import PAPER, PAPER_LINE, paper_label

    fig, ax = _axes()
    fig.set_size_inches(9.5, 4.2)
    for f, (name, c) in enumerate(curves.items()):
        ax.plot(c.depths, c.mean, marker="o", ms=3, color=f"C{f}", label=f"{name} (ours, seed mean)")
        ax.fill_between(c.depths, c.ci_low, c.ci_high, alpha=0.25, color=f"C{f}",
                        label=f"{name} (ours, 95 % position bootstrap)")
        if (paper_bins or {}).get(name) is not None:
            for b, ((lo, hi), v) in enumerate(zip(DEPTH_BINS, paper_bins[name], strict=True)):
                ax.plot([lo - 0.4, hi + 0.4], [v, v], **{**PAPER_LINE, "color": f"C{f}", "lw": 2.0},
                        label=paper_label(f"{name}, Table 4 bin seed mean") if b == 0 else "_nolegend_")
        if (paper_points or {}).get(name):
            pts = sorted(paper_points[name].items())
            ax.plot([d for d, _ in pts], [v for _, v in pts], **{**PAPER, "mec": f"C{f}"},
                    label=paper_label(f"{name} at depths {', '.join(str(d) for d, _ in pts)} (§4.3)"))
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set(xlabel="exact copy depth (last point: ≥ max)", ylabel="Δ bits/char vs reference", title=title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, path, caption=caption)
