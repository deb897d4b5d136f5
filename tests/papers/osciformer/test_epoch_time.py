"""osciformer Figure 2a/2b (oscrepro.papers.osciformer.epoch_time): one row per (L, mechanism), positive times, and
the speed-up as one ratio per repeat, paired by round."""

from __future__ import annotations

import math
import statistics

import pytest

from oscrepro.papers.osciformer import epoch_time
from oscrepro.papers.osciformer.epoch_time import osciformer_fig2_time, repeat_ratios
from oscrepro.tables.build import analysis_kwargs
from oscrepro.tables.render import analysis_csv
from oscrepro.tables.spec import load_spec


def _kwargs(**extra):
    spec = load_spec("osciformer/fig2_time")
    kwargs = {**analysis_kwargs(spec, "smoke"), **extra}  # what a build passes the adapter
    return spec, kwargs


def test_one_row_per_length_and_mechanism(tmp_path):
    """The spec's smoke settings at two tiny lengths and two repeats: every (L, mechanism) row has positive step and
    epoch times, the speed-up carries one ratio per repeat (n = repeats; the reference's is 1 in every repeat), and
    the figure is written."""
    spec, kwargs = _kwargs(lengths=[4, 8], repeats=2)
    columns, rows, notes = osciformer_fig2_time(out_dir=tmp_path, budget="smoke", results_dir=tmp_path, **kwargs)
    assert [(r["L"], r["Mechanism"]) for r in rows] == [(4, "OsciFormer"), (4, "ContiFormer"),
                                                        (8, "OsciFormer"), (8, "ContiFormer")]
    for r in rows:
        assert float(r["s/step"]) > 0 and float(r["Epoch (s)"]) > 0
        assert set(columns) <= set(r)
        assert r["x OsciFormer"].n == 2 and r["x OsciFormer"].mean > 0 and math.isfinite(r["x OsciFormer"].std)
    assert all((r["x OsciFormer"].mean, r["x OsciFormer"].std) == (1.0, 0.0)
               for r in rows if r["Mechanism"] == "OsciFormer")
    assert (tmp_path / spec.analysis["figure"]).exists()


def test_repeat_ratios_pair_the_repeats():
    """The speed-up is the mechanism's time over the reference's within each round: a mechanism exactly 4x slower in
    every round is 4 with no spread, however the machine drifts between rounds (a ratio of medians, or of unpaired
    repeats, would not see the pairing)."""
    ref = [1.0, 3.0, 9.0]  # the machine slows down from round to round
    r = repeat_ratios(ref, [4 * t for t in ref])
    assert (r.mean, r.std, r.n, r.show_n) == (4.0, 0.0, 3, True)
    r = repeat_ratios([1.0, 2.0], [2.0, 2.0])
    assert r.mean == pytest.approx(1.5) and r.std == pytest.approx(math.sqrt(0.5)) and r.n == 2
    with pytest.raises(ValueError, match="repeat counts differ"):
        repeat_ratios([1.0], [1.0, 2.0])


def test_the_adapter_pairs_repeats_by_round_and_writes_std_and_n(tmp_path, monkeypatch):
    """With injected step times (no training), each ContiFormer cell is the mean of its per-round ratios, and the
    csv the claims read carries ``x OsciFormer``, ``__std`` and ``__n``. At L = 4 ContiFormer is 4x then 2x
    OsciFormer in the two rounds: 3 ± sqrt(2) (the ratio of the medians, 4 / 1.5, is not 3); at L = 8 the per-round
    ratios 2 and 2/3 give 4/3 (the medians' ratio is 1)."""
    fake = {4: {"osciformer": [1.0, 2.0], "contiformer": [4.0, 4.0]},
            8: {"osciformer": [1.0, 3.0], "contiformer": [2.0, 2.0]}}

    def fake_times(experiment, budget, lengths, mechanisms, overrides, epoch_examples, steps, warmup, repeats):
        return [{"L": length, "mechanism": m, "batch": 4, "s/step": statistics.median(fake[length][m]),
                 "s/step repeats": fake[length][m], "epoch s": 1.0} for length in lengths for m in mechanisms]

    monkeypatch.setattr(epoch_time, "epoch_times", fake_times)
    _, kwargs = _kwargs(lengths=[4, 8], repeats=2)
    columns, rows, _ = osciformer_fig2_time(out_dir=tmp_path, budget="smoke", results_dir=tmp_path, **kwargs)
    cell = {(r["L"], r["Mechanism"]): r["x OsciFormer"] for r in rows}
    assert cell[(4, "ContiFormer")].mean == pytest.approx(3.0)
    assert cell[(4, "ContiFormer")].std == pytest.approx(math.sqrt(2.0))
    assert cell[(8, "ContiFormer")].mean == pytest.approx(4 / 3) and cell[(8, "OsciFormer")].std == 0.0
    fieldnames, lines = analysis_csv(columns, rows)
    assert {"x OsciFormer__std", "x OsciFormer__n"} <= set(fieldnames)
    r = next(r for r in lines if (r["L"], r["Mechanism"]) == (4, "ContiFormer"))
    assert float(r["x OsciFormer"]) == pytest.approx(3.0) and int(r["x OsciFormer__n"]) == 2
    assert float(r["x OsciFormer__std"]) == pytest.approx(math.sqrt(2.0))
