"""Copy-depth labels (fsn App. C) against the brute-force definition, and the evaluation protocol on synthetic CE."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from oscrepro.papers.fsn.copy_depth import (
    DEPTH_BINS,
    BinMargin,
    bin_margins,
    cluster_bootstrap,
    copy_depths,
    copy_depths_reference,
    delta_bits,
    depth_bin_index,
    evaluation_slices,
    format_table,
    per_depth_curve,
    plot_bin_margins,
    plot_depth_curves,
    seed_summary,
    select_enriched_windows,
    table_rows,
    target_depths,
    window_copy_depths,
)
from tests.helpers.shared_data import require_shared


@pytest.mark.parametrize("alphabet", [1, 2, 4])
def test_matches_reference_on_random_strings(alphabet: int) -> None:
    rng = np.random.default_rng(alphabet)
    for _ in range(150):
        n = int(rng.integers(0, 80))
        window = int(rng.integers(1, 90))
        cap = int(rng.integers(0, 40))
        s = rng.integers(0, alphabet, n)
        np.testing.assert_array_equal(copy_depths(s, window, cap), copy_depths_reference(s, window, cap))


def test_matches_reference_on_repetitive_strings_with_small_windows() -> None:
    rng = np.random.default_rng(7)
    for _ in range(60):
        period = int(rng.integers(1, 12))
        unit = rng.integers(0, 3, period)
        s = np.concatenate([np.tile(unit, int(rng.integers(2, 8))), rng.integers(0, 3, int(rng.integers(0, 10)))])
        window = int(rng.integers(1, 2 * period + 3))  # often shorter than the repeat
        cap = int(rng.integers(1, 34))
        np.testing.assert_array_equal(copy_depths(s, window, cap), copy_depths_reference(s, window, cap))


def test_hand_checked_values() -> None:
    np.testing.assert_array_equal(copy_depths(b"aaaa", 100), [0, 1, 2, 3])  # overlapping occurrences count
    np.testing.assert_array_equal(copy_depths(b"abcabc", 100), [0, 0, 0, 1, 2, 3])
    np.testing.assert_array_equal(copy_depths(b"abcabc", 3), [0, 0, 0, 0, 0, 0])  # 'a' at 0 is out of reach
    np.testing.assert_array_equal(copy_depths(b"abcabc", 4), [0, 0, 0, 1, 1, 1])  # match must start in window
    np.testing.assert_array_equal(copy_depths(b"abcabc", 100, cap=2), [0, 0, 0, 1, 2, 2])
    np.testing.assert_array_equal(copy_depths(b"abcabc", 100, cap=0), [0] * 6)
    assert copy_depths(b"", 10).shape == (0,)


def test_input_types_agree() -> None:
    text = "naïve café, naïve café; 北京 北京"
    by_str = copy_depths(text, 64)
    by_ints = copy_depths(np.array([ord(c) for c in text]), 64)
    by_list = copy_depths([ord(c) * 1000 for c in text], 64)  # large, sparse symbol values
    np.testing.assert_array_equal(by_str, by_ints)
    np.testing.assert_array_equal(by_str, by_list)
    np.testing.assert_array_equal(copy_depths(b"abcabc", 9), copy_depths("abcabc", 9))
    with pytest.raises(ValueError):
        copy_depths(np.zeros((2, 3)), 4)


def test_real_text_against_reference_and_bounds() -> None:
    wiki = require_shared("wikitext-2", marker="valid.txt") / "valid.txt"
    text = wiki.read_bytes()[:2500]
    d = copy_depths(text, 48, cap=32)
    np.testing.assert_array_equal(d, copy_depths_reference(text, 48, cap=32))
    big = copy_depths(wiki.read_bytes()[:200_000], 256, cap=32)
    assert big.max() == 32 and big.min() == 0  # real text reaches the cap
    assert copy_depths(wiki.read_bytes()[:50_000], 20, cap=32).max() <= 19  # depth <= window - 1


def test_window_labels_are_independent_per_row() -> None:
    rng = np.random.default_rng(3)
    rows = rng.integers(0, 3, (6, 40))
    rows[3] = rows[2]  # a repeated row must not see its twin
    d = window_copy_depths(rows, cap=32)
    for r in range(rows.shape[0]):
        np.testing.assert_array_equal(d[r], copy_depths_reference(rows[r], 40, 32))
    np.testing.assert_array_equal(d[3], d[2])
    assert copy_depths(rows.ravel(), 1000)[120:160].max() > d[3].max()  # the sliding labels do see the twin
    chunks = rows[:, :9]
    np.testing.assert_array_equal(target_depths(chunks, convention="match"), window_copy_depths(chunks)[:, 1:])


def test_target_depths_count_continued_context() -> None:
    chunk = np.frombuffer(b"xabcyabcz" + b"q" * 36, dtype=np.uint8)[None, :]  # (1, 45)
    # targets are chunk[1:]; 'a','b','c' after 'y' continue 'abc' with 0, 1, 2 context characters
    np.testing.assert_array_equal(target_depths(chunk)[0, :8], [0, 0, 0, 0, 0, 1, 2, 0])
    np.testing.assert_array_equal(target_depths(chunk, convention="match")[0, :8], [0, 0, 0, 0, 1, 2, 3, 0])
    # a run of 36 'q': the continuation label reaches the cap (needs match length cap + 1)
    assert target_depths(chunk, cap=32).max() == 32 and target_depths(chunk, cap=32, convention="match").max() == 32
    with pytest.raises(ValueError):
        target_depths(chunk, convention="other")


def test_bins() -> None:
    idx = depth_bin_index(np.arange(34))
    expected = [0, 0, 1, 1, 2, 2, 2, 2] + [3] * 8 + [4] * 8 + [5] * 9 + [-1]
    np.testing.assert_array_equal(idx, expected)
    assert DEPTH_BINS[-1] == (24, 32)


def test_enriched_selection() -> None:
    depths = np.zeros((10, 8), dtype=np.int16)
    depths[[1, 4, 5, 8], :] = 0
    depths[1, :6] = 20  # in the forbidden (standard) span
    depths[4, :5] = 17
    depths[5, :7] = 30  # overlaps window 4 (stride 4 < length 8): the denser one wins
    depths[8, :2] = 16
    starts = np.arange(10) * 4
    chosen = select_enriched_windows(depths, starts, length=8, n_select=3, forbid_before=8)
    np.testing.assert_array_equal(chosen, [5, 8])  # window 4 overlaps 5; windows without deep positions never


def test_evaluation_slices() -> None:
    rng = np.random.default_rng(4)
    stream = rng.integers(0, 50, 3000)
    stream[2000:2020] = stream[2020:2040] = rng.integers(0, 50, 20)  # a 20-long repeat inside one window
    stride, length = 20, 41
    starts = np.arange(0, stream.size - length + 1, stride)
    chunks = stream[starts[:, None] + np.arange(length)]  # (N, 41)
    sl = evaluation_slices(starts, chunks, n_standard=10, n_enriched=3)
    np.testing.assert_array_equal(sl["standard"], np.arange(10))
    assert sl["depth_standard"].shape == (10, 40) and sl["depth_standard"].max() < 4  # random part: shallow
    assert sl["enriched"].size >= 1 and (starts[sl["enriched"]] >= starts[9] + length).all()
    assert (sl["depth_enriched"] >= 16).any(axis=1).all()
    assert np.all(np.diff(starts[sl["enriched"]]) >= length)  # enriched windows do not overlap


def test_delta_bits_units() -> None:
    a, b = np.full((2, 3), 2.0), np.full((2, 3), 1.0)
    np.testing.assert_allclose(delta_bits(a, b), 1.0 / math.log(2.0))
    np.testing.assert_allclose(delta_bits(a, b, unit="bits"), 1.0)
    with pytest.raises(ValueError):
        delta_bits(a, b[:1])


def _synthetic(rng: np.random.Generator, n_win: int, t: int, truth: np.ndarray) -> tuple[np.ndarray, ...]:
    """Reference/model CE in nats whose paired difference is truth[bin] bits + window effect + token noise."""
    depth = rng.integers(0, 33, (n_win, t))
    ce_ref = rng.gamma(2.0, 0.6, (n_win, t))
    window_effect = rng.normal(0.0, 0.05, (n_win, 1))  # clustering: tokens of a window share an offset
    bits = truth[depth_bin_index(depth)] + window_effect + rng.normal(0.0, 0.3, (n_win, t))
    return ce_ref + bits * math.log(2.0), ce_ref, depth


def test_bootstrap_ci_covers_known_difference() -> None:
    truth = np.array([0.0, 0.01, -0.05, -0.1, -0.2, 0.3])
    rng = np.random.default_rng(0)
    ce_m, ce_r, depth = _synthetic(rng, 120, 64, truth)
    margins = bin_margins(delta_bits(ce_m, ce_r), depth, n_resamples=4000, seed=1)
    for m, true in zip(margins, truth, strict=True):
        assert m.ci_low < true < m.ci_high
        assert m.ci_high - m.ci_low < 0.08
    assert sum(m.n_tokens for m in margins) == depth.size
    zero = bin_margins(np.zeros_like(ce_r), depth, n_resamples=200)  # identical models: exactly zero
    assert all(m.mean == 0.0 and m.ci_low == 0.0 and m.ci_high == 0.0 for m in zero)


def test_bootstrap_coverage_is_near_nominal() -> None:
    rng = np.random.default_rng(11)
    hits = 0
    reps = 60
    for r in range(reps):
        values = rng.normal(0.2, 1.0, (40, 1)) + rng.normal(0.0, 1.0, (40, 16))  # strong window clustering
        mean, lo, hi = cluster_bootstrap(values, np.ones((1, 40, 16), dtype=bool), n_resamples=500, seed=r)
        hits += int(lo[0] < 0.2 < hi[0])
    assert 0.85 <= hits / reps <= 1.0
    # ignoring the clusters would under-cover: the naive token interval is much narrower
    naive = 1.96 * values.std() / math.sqrt(values.size)
    assert hi[0] - lo[0] > 2.0 * 2 * naive


def test_deep_bins_pool_the_enriched_slice() -> None:
    rng = np.random.default_rng(5)
    d_std = rng.integers(0, 33, (30, 16))
    d_enr = np.full((10, 16), 20)
    d_enr[:, :4] = 0  # shallow tokens of the enriched slice must be ignored
    delta_std = np.zeros((30, 16))
    delta_enr = np.where(d_enr >= 16, -1.0, 5.0)
    margins = bin_margins(delta_std, d_std, delta_enr, d_enr, n_resamples=300)
    counts = {m.label: m.n_tokens for m in margins}
    assert counts["0–1"] == int(((d_std >= 0) & (d_std <= 1)).sum())
    assert counts["16–23"] == int(((d_std >= 16) & (d_std <= 23)).sum()) + 10 * 12
    n_std = ((d_std >= 16) & (d_std <= 23)).sum()
    assert margins[4].mean == pytest.approx(-120 / (n_std + 120))
    assert margins[0].mean == 0.0


def test_table_rows_and_seed_summary() -> None:
    def row(vals: list[float]) -> list[BinMargin]:
        return [BinMargin(lo, hi, v, v - 0.01, v + 0.01, 10 * (k + 1)) for k, ((lo, hi), v) in
                enumerate(zip(DEPTH_BINS, vals, strict=True))]

    fam = {"FSN": [row([0.1] * 6), row([0.3] * 6), row([0.2] * 6)]}
    mean, mn, mx = seed_summary(fam["FSN"])
    np.testing.assert_allclose(mean, 0.2)
    np.testing.assert_allclose(mx - mn, 0.2)
    rows = table_rows(fam)
    assert rows[0]["cells"] == [10, 20, 30, 40, 50, 60] and rows[-1]["row"] == "mean"
    assert len(rows) == 1 + 3 + 1
    text = format_table(rows)
    assert "| FSN, s1 | +0.3000" in text and "range 0.2000" in text and "[+0.0900, +0.1100]" in text


def test_per_depth_curve_and_figures(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    depth = rng.integers(0, 40, (50, 32))  # depths above 32 pool into the last point
    truth = np.linspace(0.0, -0.32, 33)
    deltas = [truth[np.minimum(depth, 32)] + s * 0.01 for s in (-1, 0, 1)]  # seed mean = truth exactly
    curve = per_depth_curve(deltas, depth, n_resamples=300)
    np.testing.assert_allclose(curve.mean, truth, atol=1e-12)
    assert curve.n_tokens[32] == int((depth >= 32).sum())
    np.testing.assert_allclose(curve.ci_low, truth, atol=1e-9)  # constant values: degenerate band
    p1 = plot_depth_curves({"FSN": curve}, tmp_path / "fig4.png")
    fam = {"base": [bin_margins(d, depth, n_resamples=100) for d in deltas]}
    p2 = plot_bin_margins(fam, tmp_path / "fig1.png")
    for p in (p1, p2):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
