"""Benchmark harness: tiny end-to-end runs, the CPU peak-memory method, config loading and the CLI."""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from oscrepro.bench.harness import attention_factory, paper_batch, peak_memory_mb, render_markdown, run_bench

REPO = Path(__file__).resolve().parents[3]


def test_run_bench_tiny_returns_ratios() -> None:
    """One tiny row with every timing, memory and ratio field; the parameter difference is H + 1 (alpha_h, K)."""
    rows = run_bench("ssa", [16], batch=2, d_model=32, n_heads=4, warmup=0, trials=2, device="cpu")
    assert len(rows) == 1
    row = rows[0]
    ratios = {  # every ratio is cand / base of the two measurements taken in this one process run
        "ratio_fwd_time": "fwd_ms_median", "ratio_fwd_cpu_time": "fwd_cpu_ms_median", "ratio_mem_fwd": "mem_fwd_mb",
        "ratio_fwdbwd_time": "fwdbwd_ms_median", "ratio_fwdbwd_cpu_time": "fwdbwd_cpu_ms_median",
        "ratio_mem_fwdbwd": "mem_fwdbwd_mb",
    }
    for ratio, measured in ratios.items():
        base, cand = row[f"{measured}_base"], row[f"{measured}_cand"]
        assert math.isfinite(base) and base > 0 and math.isfinite(cand) and cand > 0, measured
        assert row[ratio] == pytest.approx(cand / base, rel=1e-12), ratio
    for name in ("base", "cand"):  # throughput is tokens over the mean wall time, so it is positive and finite
        assert math.isfinite(row[f"fwd_ktok_s_{name}"]) and row[f"fwd_ktok_s_{name}"] > 0
        assert row[f"fwd_ktok_s_{name}"] == pytest.approx(2 * 16 / row[f"fwd_ms_{name}"], rel=1e-9)
    assert row["params_cand"] - row["params_base"] == 4 + 1


def test_run_bench_keeps_the_trials_in_round_order() -> None:
    """``keep_trials``: per pass and model, wall and CPU seconds of every timed trial, the summaries computed from
    them (trial i of both models comes from alternation round i: that order is what a paired ratio relies on)."""
    rows = run_bench("ssa", [16], batch=2, d_model=32, n_heads=4, warmup=0, trials=3, device="cpu", keep_trials=True)
    (row,) = rows
    times = row["trial_times"]
    assert set(times) == {"fwd", "fwdbwd"} and all(set(t) == {"base", "cand"} for t in times.values())
    for pass_, t in times.items():
        for name, (wall, cpu) in t.items():
            assert len(wall) == len(cpu) == 3 and all(w > 0 for w in wall), (pass_, name)
            assert 1e3 * statistics.median(wall) == pytest.approx(row[f"{pass_}_ms_median_{name}"], rel=1e-12)
            assert 1e3 * statistics.median(cpu) == pytest.approx(row[f"{pass_}_cpu_ms_median_{name}"], rel=1e-12)
    assert "trial_times" not in run_bench("ssa", [16], batch=2, d_model=32, n_heads=4, warmup=0, trials=1,
                                          device="cpu", backward=False)[0]


def test_run_bench_overrides_and_paper_batch() -> None:
    """Overrides reach the mechanism (top_k), and the paper's batch schedule is applied per N."""
    rows = run_bench("ssa", [8], batch=3, d_model=16, n_heads=2, warmup=0, trials=1, device="cpu",
                     use_paper_batch=True, overrides={"top_k": 2}, backward=False)
    assert rows[0]["batch"] == 8 and "ratio_fwdbwd_time" not in rows[0]
    assert [paper_batch(n) for n in (128, 512, 1024, 2048, 4096)] == [8, 8, 4, 2, 1]
    assert attention_factory("ssa_topk")(d_model=16, n_heads=2).top_k == 64


def test_cpu_peak_memory_sees_allocations() -> None:
    """The profiler-based CPU peak counts a transient 8 MB tensor and frees of earlier ones."""
    block = torch.nn.Linear(4, 4)
    x = torch.zeros(1, 4)
    static = (16 + 4 + 4) * 4 / 2**20

    def alloc(_block: torch.nn.Module, _x: torch.Tensor) -> None:
        a = torch.ones(2**21)  # 8 MB live ...
        del a
        b = torch.ones(2**20)  # ... then 4 MB: the peak is 8 MB, not 12
        del b

    peak = peak_memory_mb(alloc, block, x)
    assert abs(peak - static - 8.0) < 0.1


MEMORY_AFTER_AN_EARLIER_PASS = """
import torch
from oscrepro.attention.softmax import SoftmaxAttention
from oscrepro.bench import harness
from oscrepro.models.block import TransformerBlock
torch.manual_seed(0)
block, x = TransformerBlock(32, 2, 128, attention=SoftmaxAttention), torch.randn(2, 16, 32)
first = harness.peak_memory_mb(harness._fwd_bwd, block, x)  # no gradients yet
again = harness.peak_memory_mb(harness._fwd_bwd, block, x)  # the first pass's gradients are live
print(first, again)
"""


def test_cpu_peak_memory_after_an_earlier_pass_is_the_same_and_warns_nothing() -> None:
    """An earlier pass's gradients are freed before the profiled pass: c10's "Memory block of unknown size was
    allocated before the profiling started" (once per process, from C++: a fresh process sees it) does not
    appear, and the peak is the one measured without earlier gradients."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "KINETO_LOG_LEVEL": "5"}
    proc = subprocess.run([sys.executable, "-c", MEMORY_AFTER_AN_EARLIER_PASS], capture_output=True, text=True,
                          env=env, timeout=120, check=True)
    first, again = map(float, proc.stdout.split())
    assert first == again and first > 0
    assert "unknown size" not in proc.stderr, proc.stderr


def test_render_markdown_has_header_and_rows() -> None:
    rows = [{"seq_len": 4, "batch": 1, "ratio_fwd_time": 1.234, "fwd_ktok_s_base": 1234.5}]
    md = render_markdown(rows, ["device: test"])
    assert md.startswith("> device: test") and "| 4 | 1 |" in md and "1.23" in md and "1234" in md


def test_cli_writes_markdown_and_csv(tmp_path: Path) -> None:
    """`python -m oscrepro.bench` (Hydra app on conf/bench.yaml) writes both tables with a provenance header."""
    cmd = [sys.executable, "-m", "oscrepro.bench", "block=ssa_topk", "seq_lens=[8]", "batch=1", "d_model=16",
           "n_heads=2", "warmup=0", "trials=1", f"out_dir={tmp_path}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (tmp_path / "ssa_topk_cpu.md").read_text()
    csv = (tmp_path / "ssa_topk_cpu.csv").read_text()
    assert "git_commit:" in md and "| 8 | 1 |" in md
    assert csv.startswith("# git_commit") and "ratio_fwdbwd_time" in csv
