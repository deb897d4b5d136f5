"""fsn step time (conf/table/fsn/step_time.yaml) builds at budget=smoke: two model rows and a ratio row that is
FSN's value / the transformer's in every column, positive GEMM work, the spec's App. B numbers as paper values."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from oscrepro.table import build_table
from oscrepro.tables.spec import load_spec


def test_step_time_smoke(tmp_path: Path) -> None:
    md = build_table("fsn/step_time", budget="smoke", results_dir=tmp_path)
    assert md.parent == tmp_path / "fsn" / "smoke" and "BELOW PAPER BUDGET" in md.read_text()
    with md.with_suffix(".csv").open() as fh:
        rows = {r["model"]: {k: float(v) for k, v in r.items() if k != "model"} for r in csv.DictReader(fh)}
    assert list(rows) == ["fsn", "transformer", "ratio FSN / transformer"]
    fsn, tf, ratio = rows.values()
    paper = load_spec("fsn/step_time").analysis["paper"]
    for name, r in (("fsn", fsn), ("transformer", tf)):
        assert all(math.isfinite(v) for v in r.values()), r
        assert r["tokens/s (paper)"] == paper["tokens_s"][name]
        assert r["GFLOP/step"] > 0 and r["params"] > 9e5  # the ~1M-parameter models of Table 3
        assert r["wall min ms"] <= r["wall median ms"] <= r["wall max ms"]
        assert r["tokens/s (ours)"] == pytest.approx(1e6 / r["us/token"])
        assert r["profiled GEMM ms"] > 0 and r["profiled other ms"] > 0  # the CPU split of one profiled step
    for col in ("wall median ms", "CPU median ms", "GFLOP/step", "params", "tokens/s (paper)"):
        assert ratio[col] == pytest.approx(fsn[col] / tf[col]), col
    # the per-token ratio is the step-time ratio (same tokens per step)
    assert ratio["us/token"] == pytest.approx(fsn["wall median ms"] / tf["wall median ms"])
