"""OsciFormer kernel cost: one ``OsciFormerAttention`` layer against ``SoftmaxAttention`` on the same input, before
and after the kernel rebuild of issue 37, in one process.

    python -m oscrepro.papers.osciformer.kernel_bench                     # writes results/bench/osciformer_kernel.md
    python -m oscrepro.papers.osciformer.kernel_bench --trials 9 --out -  # print only

The osciformer paper's claim (Sec. 5) is that the closed form is cheap, O(N^2 J d). For each (T, J) cell three
layers (d_model 64, 4 heads, B = 32, float32 activations, XOR-like times: gaps k/32, k in {0, 1, 2}, so with
ties) are timed in alternation, trial by trial, in one process on one thread (``harness.measure_alternating``),
forward (no_grad) and forward+backward: softmax, OsciFormer "before" (the pre-rebuild kernel,
``legacy_kernel``) and "after" (``oscrepro.attention.osciformer``), the two OsciFormers with the same
parameters. The table gives median process CPU times and the median ratios osciformer / softmax of process CPU
time (the steadier one on a shared machine) and, for forward+backward, of wall time.

Peak memory of one forward+backward at B = 4, T = 1024 (J = 8), two ways: the torch CPU allocator's peak of live
bytes (``harness.peak_memory_mb``: torch.profiler allocation events, plus parameters and input), and the growth of
the process's peak resident set (VmHWM, reset before the pass) over its resident set before the pass, each layer
in a fresh process (that one includes MKL scratch, the Python heap and allocator slack).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
from torch import Tensor, nn

from oscrepro.attention.osciformer import OsciFormerAttention
from oscrepro.attention.softmax import SoftmaxAttention
from oscrepro.bench.harness import _fwd, _fwd_bwd, device_line, emit, measure_alternating, peak_memory_mb
from oscrepro.papers.osciformer.legacy_kernel import LegacyOsciFormerAttention

CELLS = [(256, 8), (32, 8), (16, 8), (64, 8), (128, 8), (32, 4), (32, 16)]  # (T, J): issue 37's cell, the rest
MEMORY_CELL = (4, 1024, 8)  # (B, T, J) of the peak-memory comparison
LAYERS = ("soft", "before", "after")


class _Timed(nn.Module):
    """Calls a mechanism with fixed times, causal, as the continuous-time encoder does."""

    def __init__(self, mech: nn.Module, times: Tensor) -> None:
        super().__init__()
        self.mech, self.times = mech, times

    def forward(self, x: Tensor) -> tuple[Tensor, dict]:
        return self.mech(x, times=self.times, causal=True)


def xor_times(batch: int, seq_len: int, seed: int = 0) -> Tensor:
    """(B, T) nondecreasing times with gaps k/32, k in {0, 1, 2} (ties included)."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 3, (batch, seq_len), generator=gen).float() / 32).cumsum(1)


def build_layers(
    batch: int, seq_len: int, n_modes: int, d_model: int, n_heads: int
) -> tuple[dict[str, nn.Module], Tensor]:
    """Softmax and the OsciFormer before/after the rebuild (same parameters, drive and velocity maps switched on:
    they start at zero, so every term is timed), wrapped with XOR-like times; and the input x (B, T, D)."""
    torch.manual_seed(0)
    x = torch.randn(batch, seq_len, d_model)  # (B, T, D)
    times = xor_times(batch, seq_len)
    after = OsciFormerAttention(d_model, n_heads, n_modes=n_modes)
    with torch.no_grad():
        for name, p in after.named_parameters():
            if "drive" in name or "velocity" in name:
                p.normal_(0, 0.1)
    before = LegacyOsciFormerAttention(d_model, n_heads, n_modes=n_modes)
    before.load_state_dict(after.state_dict())
    mechs = {"soft": SoftmaxAttention(d_model, n_heads), "before": before, "after": after}
    return {k: _Timed(m, times) for k, m in mechs.items()}, x


def bench_cell(
    seq_len: int, n_modes: int, batch: int, d_model: int, n_heads: int, warmup: int, trials: int
) -> dict[str, float]:
    """Median CPU ms of the three layers and ratios osciformer / softmax for one (T, J) cell."""
    layers, x = build_layers(batch, seq_len, n_modes, d_model, n_heads)
    row: dict[str, float] = {"T": seq_len, "J": n_modes}
    for tag, fn in (("fwd", _fwd), ("f+b", _fwd_bwd)):
        res = measure_alternating(layers, x, fn, warmup, trials)
        wall = {k: statistics.median(v[0]) for k, v in res.items()}
        cpu = {k: statistics.median(v[1]) for k, v in res.items()}
        row |= {f"{tag} {k} ms": 1e3 * cpu[k] for k in LAYERS}
        row |= {f"{tag} × {k}": cpu[k] / cpu["soft"] for k in LAYERS[1:]}
        if tag == "f+b":
            row |= {f"f+b wall × {k}": wall[k] / wall["soft"] for k in LAYERS[1:]}
    return row


def _status_mb(field: str) -> float:
    """A ``/proc/self/status`` memory field (VmRSS, VmHWM) in MB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024


def _rss_growth_mb(name: str, batch: int, seq_len: int, n_modes: int, d_model: int, n_heads: int) -> float:
    """In a fresh process: peak resident set (VmHWM) during one forward+backward of layer ``name`` minus the resident
    set before it, MB. The peak is reset just before the pass (``clear_refs`` 5; a new process's VmHWM starts at
    exec, unlike ``ru_maxrss``, which keeps the parent's peak across exec)."""
    torch.set_num_threads(1)
    layers, x = build_layers(batch, seq_len, n_modes, d_model, n_heads)
    small, x_small = build_layers(1, 16, n_modes, d_model, n_heads)
    _fwd_bwd(small[name], x_small)  # loads the kernels' libraries (a small peak) before the baseline is read
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    before = _status_mb("VmRSS")
    _fwd_bwd(layers[name], x)
    return _status_mb("VmHWM") - before


def memory_rows(d_model: int, n_heads: int) -> list[dict[str, float]]:
    """Peak memory of one forward+backward at ``MEMORY_CELL``, per layer: allocator peak and RSS growth (MB)."""
    batch, seq_len, n_modes = MEMORY_CELL
    layers, x = build_layers(batch, seq_len, n_modes, d_model, n_heads)
    rows = []
    for name in LAYERS:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            rss = pool.submit(_rss_growth_mb, name, batch, seq_len, n_modes, d_model, n_heads).result()
        rows.append(
            {
                "layer": name,
                "B": batch,
                "T": seq_len,
                "J": n_modes,
                "allocator peak MB": peak_memory_mb(_fwd_bwd, layers[name], x),
                "RSS growth MB": rss,
            }
        )
    return rows


def _table(rows: list[dict]) -> list[str]:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return lines + [
        "| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in r.values()) + " |" for r in rows
    ]


def render(rows: list[dict[str, float]], memory: list[dict[str, float]], args: argparse.Namespace) -> str:
    head = [
        "# OsciFormer kernel vs softmax (one layer), before and after the rebuild (issue 37)",
        "",
        f"- **Protocol:** `python -m oscrepro.papers.osciformer.kernel_bench`: B={args.batch}, d_model={args.d_model}, "
        f"H={args.n_heads}, XOR-like times (gaps k/32), causal; softmax, OsciFormer before (pre-rebuild kernel, "
        "`papers/osciformer/legacy_kernel.py`) and after (same parameters) in one process, alternating trial by trial "
        f"({args.warmup} warm-up + {args.trials} trials per cell), medians; one thread (torch.set_num_threads(1)). "
        "ms = median process CPU time; × = osciformer / softmax of median CPU time (wall: of median wall time).",
        device_line(),
        "- **Load:** the machine is shared with other jobs, hence the alternation and the medians; load average "
        "(1, 5, 15 min) at the end of the run: " + ", ".join(f"{v:.1f}" for v in os.getloadavg()) + ".",
        "",
    ]
    mem = [
        "",
        f"Peak memory of one forward+backward (B={MEMORY_CELL[0]}, T={MEMORY_CELL[1]}, J={MEMORY_CELL[2]}): "
        "allocator peak = torch CPU allocator's live bytes (torch.profiler events, plus parameters and input); "
        "RSS growth = peak resident set during the pass (VmHWM, reset before it) minus the resident set before it, "
        "each layer in a fresh process.",
        "",
    ]
    return "\n".join(head + _table(rows) + mem + _table(memory)) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m oscrepro.papers.osciformer.kernel_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-heads", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--out", default="results/bench/osciformer_kernel.md", help="'-' prints only")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for seq_len, n_modes in CELLS:
        rows.append(bench_cell(seq_len, n_modes, args.batch, args.d_model, args.n_heads, args.warmup, args.trials))
        print(rows[-1], flush=True)
    memory = memory_rows(args.d_model, args.n_heads)
    emit(render(rows, memory, args), None if args.out == "-" else Path(args.out))


if __name__ == "__main__":
    main()
