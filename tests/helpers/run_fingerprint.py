"""What a finished run computed, as a comparable fingerprint (tests/unit/tasks/test_lean.py, the loop fixture).

A few short runs through :func:`oscrepro.train.train` (:data:`CASES`: the SVA classifier plain, with clipping,
accumulation and a per-step schedule, and osciformer/xor with dropout, a random sampler and a per-epoch schedule)
are reduced to what must not change when the training loop's code does: the final weights, optimizer and scheduler
states and loop counters of ``checkpoints/last.ckpt``, the global RNG states saved with it, history.csv and
metrics.json without their wall-clock values. ``tests/fixtures/make_loop_fingerprint.py`` wrote the committed one.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import platform
from pathlib import Path
from typing import Any

import torch

from oscrepro.runs.compose import compose_run
from oscrepro.runs.record import run_dir as run_dir_of
from oscrepro.train import read_checkpoint, train
from oscrepro.utils.provenance import cpuinfo_field

SHORT = [
    "trainer.max_epochs=2",
    "trainer.limit_val_batches=3",
    "trainer.limit_test_batches=2",
    "trainer.enable_progress_bar=false",
    "trainer.log_every_n_steps=5",
]
CASES: dict[str, list[str]] = {
    "sva": ["experiment=fqo/sva", "attention=softmax", "budget=smoke", *SHORT, "trainer.limit_train_batches=12"],
    "sva_clip_accumulate_step_schedule": [
        "experiment=fqo/sva",
        "attention=softmax",
        "budget=smoke",
        *SHORT,
        "trainer.limit_train_batches=11",
        "trainer.gradient_clip_val=0.05",
        "+trainer.accumulate_grad_batches=3",
        "+lr_schedule=cosine",
    ],
    "sva_epoch_schedule": [
        "experiment=fqo/sva",
        "attention=softmax",
        "budget=smoke",
        *SHORT,
        "trainer.limit_train_batches=7",
        "task.scheduler={_target_: torch.optim.lr_scheduler.CosineAnnealingLR, _partial_: true}",
    ],
    "xor": ["experiment=osciformer/xor", "budget=smoke", *SHORT, "trainer.limit_train_batches=6"],
}
WALL_KEYS = ("train_wall_time_s", "time/")  # metric keys and history columns that are wall-clock readings


def _digest(obj: Any, h: Any) -> None:
    """Feed ``obj`` (nested dicts/lists of tensors and plain values) into hash ``h``, tensors by their bytes."""
    if isinstance(obj, torch.Tensor):
        h.update(f"T{obj.dtype}{tuple(obj.shape)}".encode())
        t = obj.detach().cpu().contiguous().reshape(-1)
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            h.update(f"K{k!s}".encode())
            _digest(obj[k], h)
    elif isinstance(obj, list | tuple):
        h.update(f"L{len(obj)}".encode())
        for v in obj:
            _digest(v, h)
    else:
        h.update(f"V{obj!r}".encode())


def digest(obj: Any) -> str:
    h = hashlib.sha256()
    _digest(obj, h)
    return h.hexdigest()


def history_text(path: Path) -> str:
    """history.csv without its wall-clock columns, as CSV text."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    keys = sorted({k for r in rows for k in r if not k.startswith(WALL_KEYS)})
    buf = io.StringIO(newline="")
    writer = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def fingerprint(run_dir: Path) -> dict[str, Any]:
    """The fingerprint of one finished run (module docstring)."""
    ckpt = read_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    rng = {k: v for k, v in ckpt["callbacks"].items() if k.startswith("RngStateCheckpoint")}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    history = history_text(run_dir / "history.csv")
    return {
        "status": json.loads((run_dir / "status.json").read_text())["status"],
        "metrics": {k: v for k, v in sorted(metrics.items()) if not k.startswith(WALL_KEYS)},
        "history_rows": history.count("\n") - 1,
        "history_sha256": hashlib.sha256(history.encode()).hexdigest(),
        "weights_sha256": digest(ckpt["state_dict"]),
        "optimizer_sha256": digest([ckpt["optimizer_states"], ckpt["lr_schedulers"]]),
        "loops_sha256": digest(ckpt["loops"]),
        "rng_sha256": digest(rng),
        "epoch": ckpt["epoch"],
        "global_step": ckpt["global_step"],
    }


def run_case(name: str, results_dir: Path) -> tuple[dict[str, Any], Path]:
    """Train case ``name`` under ``results_dir``: (fingerprint, run dir)."""
    cfg = compose_run([*CASES[name], f"paths.results_dir={results_dir}"])
    status = train(cfg)["status"]
    if status != "ok":
        raise RuntimeError(f"case {name}: the run ended {status}")
    run_dir = run_dir_of(cfg)
    return fingerprint(run_dir), run_dir


def _cpu_vendor() -> str:
    """The CPU's vendor (``vendor_id`` of /proc/cpuinfo): AMD EPYC and Intel Xeon both report AVX512 capability to
    torch, yet their kernels round differently (the lean-loop fingerprint of an EPYC differs on a Xeon)."""
    return cpuinfo_field("vendor_id") or platform.processor() or "unknown"


def machine() -> dict[str, str]:
    """What a bit-exact CPU result depends on besides the code: torch's version, the CPU kernels it picks and the
    CPU's vendor."""
    return {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
        "cpu_vendor": _cpu_vendor(),
    }
