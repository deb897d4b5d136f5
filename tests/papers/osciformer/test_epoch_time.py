"""osciformer Figure 2a/2b (oscrepro.papers.osciformer.epoch_time): one row per (L, mechanism), positive times."""

from __future__ import annotations

from oscrepro.papers.osciformer.epoch_time import osciformer_fig2_time
from oscrepro.tables.spec import load_spec


def test_one_row_per_length_and_mechanism(tmp_path):
    """The spec's smoke settings at two tiny lengths: every (L, mechanism) row has positive step and epoch times,
    the reference's ratio is 1, and the figure is written."""
    spec = load_spec("osciformer/fig2_time")
    kwargs = {k: v for k, v in spec.analysis.items() if k not in ("_target_", "budgets")}
    kwargs.update(spec.analysis["budgets"]["smoke"], lengths=[4, 8])
    columns, rows, notes = osciformer_fig2_time(out_dir=tmp_path, budget="smoke", results_dir=tmp_path, **kwargs)
    assert [(r["L"], r["Mechanism"]) for r in rows] == [(4, "OsciFormer"), (4, "ContiFormer"),
                                                        (8, "OsciFormer"), (8, "ContiFormer")]
    for r in rows:
        assert float(r["s/step"]) > 0 and float(r["Epoch (s)"]) > 0
        assert set(columns) <= set(r)
    assert all(float(r["x OsciFormer"]) == 1.0 for r in rows if r["Mechanism"] == "OsciFormer")
    assert (tmp_path / spec.analysis["figure"]).exists()
