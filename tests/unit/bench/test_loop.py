"""The loop benchmark measures what it says: times positive, ratios their quotients, bf16 columns on demand, and
the lean loop (the run's) beside Lightning's stock loop."""

from __future__ import annotations

import math

import pytest

from oscrepro.bench.loop import MODELS, measure


def test_loop_benchmark_rows_are_consistent():
    row = measure("sva", MODELS["sva"], budget="smoke", steps=6, warmup=2, repeats=1, bf16=True)
    for key in (
        "loop ms/step",
        "bare ms/step",
        "stock loop ms/step",
        "loop / bare (cpu)",
        "stock loop / bare (cpu)",
        "val loop s",
        "val bare s",
        "bf16 bare ms/step",
    ):
        assert math.isfinite(row[key]) and row[key] > 0, key
    assert row["loop / bare"] == pytest.approx(row["loop ms/step"] / row["bare ms/step"])
    assert row["stock loop / bare"] == pytest.approx(row["stock loop ms/step"] / row["bare ms/step"])
    assert row["overhead %"] == pytest.approx(100 * (row["loop / bare"] - 1))
    assert row["bf16 speed-up"] == pytest.approx(row["bare ms/step"] / row["bf16 bare ms/step"])
