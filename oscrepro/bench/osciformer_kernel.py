"""OsciFormer kernel cost: one ``OsciFormerAttention`` layer against ``SoftmaxAttention`` on the same input.

    python -m oscrepro.bench.osciformer_kernel                     # writes results/bench/osciformer_kernel.md
    python -m oscrepro.bench.osciformer_kernel --trials 9 --out -  # print only

The osciformer paper's claim (Sec. 5) is that the closed form is cheap, O(N^2 J d). For each (T, J) cell the two
layers (d_model 64, 4 heads, B = 32, float32 activations, XOR-like times: gaps k/32, k in {0, 1, 2}, so with ties)
are timed in alternation in one process on one thread (``harness.measure_alternating``), forward (no_grad) and
forward+backward, and the table gives the median ratios osciformer / softmax of wall time and of process CPU time
(the steadier one on a shared machine).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from torch import Tensor, nn

from oscrepro.attention.osciformer import OsciFormerAttention
from oscrepro.attention.softmax import SoftmaxAttention
from oscrepro.bench.harness import _fwd, _fwd_bwd, device_line, emit, measure_alternating

CELLS = [(32, 8), (16, 8), (64, 8), (128, 8), (32, 4), (32, 16)]  # (T, J): the base cell, then T and J sweeps


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


def bench_cell(seq_len: int, n_modes: int, batch: int, d_model: int, n_heads: int, warmup: int, trials: int
               ) -> dict[str, float]:
    """Median ratios osciformer / softmax for one (T, J) cell."""
    torch.manual_seed(0)
    x = torch.randn(batch, seq_len, d_model)  # (B, T, D)
    times = xor_times(batch, seq_len)
    mech = OsciFormerAttention(d_model, n_heads, n_modes=n_modes)
    with torch.no_grad():  # drive and velocity maps on (they start at zero), so every term is timed
        for name, p in mech.named_parameters():
            if "drive" in name or "velocity" in name:
                p.normal_(0, 0.1)
    mods = {"soft": _Timed(SoftmaxAttention(d_model, n_heads), times), "osc": _Timed(mech, times)}
    row: dict[str, float] = {"T": seq_len, "J": n_modes}
    for tag, fn in (("fwd", _fwd), ("f+b", _fwd_bwd)):
        res = measure_alternating(mods, x, fn, warmup, trials)
        wall = {k: statistics.median(v[0]) for k, v in res.items()}
        cpu = {k: statistics.median(v[1]) for k, v in res.items()}
        row[f"{tag} softmax ms"] = 1e3 * cpu["soft"]
        row[f"{tag} osciformer ms"] = 1e3 * cpu["osc"]
        row[f"{tag} ×"] = wall["osc"] / wall["soft"]
        row[f"{tag} CPU ×"] = cpu["osc"] / cpu["soft"]
    return row


def render(rows: list[dict[str, float]], args: argparse.Namespace) -> str:
    head = ["# OsciFormer kernel vs softmax (one layer)", "",
            f"- **Protocol:** `python -m oscrepro.bench.osciformer_kernel`: B={args.batch}, d_model={args.d_model}, "
            f"H={args.n_heads}, XOR-like times (gaps k/32), causal; {args.warmup} warm-up + {args.trials} "
            "alternating trials per cell, median; one thread; times in ms are median process CPU time; × = "
            "osciformer / softmax (wall, and CPU).",
            device_line(), ""]
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in r.values()) + " |"
              for r in rows]
    return "\n".join(head + lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m oscrepro.bench.osciformer_kernel", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
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
    text = render(rows, args)
    emit(text, None if args.out == "-" else Path(args.out))


if __name__ == "__main__":
    main()
