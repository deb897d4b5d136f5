"""Training-loop overhead: the bare step (forward, backward, optimizer) against the same step inside a run's loop.

    python -m oscrepro.bench.loop                      # SVA, WikiText-2 LM, torus LM at budget=cpu; one process
    python -m oscrepro.bench.loop --models sva --steps 300 --out results/bench/loop_overhead.md

For each model the config is composed exactly as a table composes it (``--budget``, default cpu), and data module,
model and task are built by :func:`oscrepro.train.build`. Then, in one process and on the same thread count:

* **loop**: a Lightning ``Trainer`` made from the run's ``trainer`` config, with the run's callbacks and CSV logger,
  fits ``steps`` training batches (validation off, ``limit_val_batches=0``); the time per step is measured from
  the end of the ``warmup``-th batch to the end of the epoch, so data loading, logging, progress bar, per-step
  metrics and the epoch-end checkpoint all count;
* **bare**: a fresh build (same seed) runs ``task.loss(batch)``, ``backward()``, ``optimizer.step()``,
  ``zero_grad()`` on batches fetched from the same loader beforehand: the model's own cost;
* **stock loop**: the loop again with the task's ``lean_loop`` off, i.e. Lightning's own per-batch code
  (``oscrepro.tasks.lean``), which trains the same run bit for bit: the loop before the lean path, in the same
  process.

``overhead = loop / bare − 1``. Every time is wall-clock; the ``cpu`` columns are the same ratios in this process's
CPU time (``time.process_time``), which waiting for a busy core does not inflate (one intra-op thread, so CPU time
is the step's own work). Validation is timed the same way (the run's validation loop against a bare ``no_grad``
forward over the same batches) and reported separately, since its cadence is one epoch.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger

from oscrepro.bench.harness import device_line, emit
from oscrepro.runs.compose import compose_run, path_override
from oscrepro.train import build, callbacks, make_trainer
from oscrepro.utils.quiet import quiet_third_party

MODELS: dict[str, list[str]] = {  # the three loops the fast-runs issue names, as their tables train them
    "sva": ["experiment=fqo/sva", "attention=softmax"],
    "wikitext2": ["experiment=fqo/lm_wikitext2", "attention=softmax"],
    "torus": ["experiment=fsn/charlm"],
}
# (training batches per measurement, untimed warm-up batches): ~1-2 s of SVA, ~15 s of LM steps per measurement
STEPS: dict[str, tuple[int, int]] = {"sva": (400, 20), "wikitext2": (30, 3), "torus": (10, 2)}


def clocks() -> tuple[float, float]:
    """(wall, this process's CPU time) in seconds."""
    return time.perf_counter(), time.process_time()


def per_step(t0: tuple[float, float], n: int) -> tuple[float, float]:
    """(wall, CPU) seconds per step since ``t0`` over ``n`` steps."""
    t1 = clocks()
    return (t1[0] - t0[0]) / n, (t1[1] - t0[1]) / n


class StepTimer(L.Callback):
    """(wall, CPU) time per training batch after ``warmup`` batches, up to the end of the training epoch."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.t0, self.n = warmup, (0.0, 0.0), 0
        self.per_step = (float("nan"), float("nan"))

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.n += 1
        if self.n == self.warmup:
            self.t0 = clocks()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.n > self.warmup:
            self.per_step = per_step(self.t0, self.n - self.warmup)


def _batches(loader: Any, n: int) -> list[Any]:
    out = []
    for b in loader:
        out.append(b)
        if len(out) == n:
            break
    return out


def bare_step_s(cfg: Any, steps: int, warmup: int, bf16: bool = False) -> float:
    """Mean wall time of forward + backward + optimizer step over pre-fetched training batches (``bf16``: the
    forward and loss under ``torch.autocast(bfloat16)``, as ``trainer.precision=bf16-mixed`` runs them)."""
    return bare_step_clocks(cfg, steps, warmup, bf16)[0]


def bare_step_clocks(cfg: Any, steps: int, warmup: int, bf16: bool = False) -> tuple[float, float]:
    """:func:`bare_step_s` as (wall, CPU) seconds per step."""
    dm, _, task = build(cfg)
    batches = _batches(dm.train_dataloader(), steps)
    opt = task.optimizer_factory([p for p in task.parameters() if p.requires_grad])  # the task's optimizer, as
    task.train()  # configure_optimizers builds it (its scheduler needs a Trainer and is not timed here)
    for i, b in enumerate(batches):
        if i == warmup:
            t0 = clocks()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = task.loss(b)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return per_step(t0, len(batches) - warmup)


def loop_step_s(cfg: Any, steps: int, warmup: int, root: Path, lean: bool = True) -> tuple[tuple[float, float], float]:
    """((wall, CPU) per training step in the loop, validation epoch in the loop) in seconds; ``lean=False``:
    Lightning's stock per-batch code (the task's ``lean_loop`` off)."""
    dm, _, task = build(cfg)
    task.lean_loop = lean
    timer = StepTimer(warmup)
    trainer = make_trainer(
        cfg,
        task,
        max_epochs=1,
        limit_train_batches=steps,
        limit_val_batches=0,
        default_root_dir=str(root),
        logger=[CSVLogger(save_dir=str(root), name="", version="logs")],
        callbacks=[*callbacks(root), timer],
    )
    trainer.fit(task, datamodule=dm)
    val_trainer = make_trainer(
        cfg, task, logger=False, enable_checkpointing=False, limit_val_batches=steps, default_root_dir=str(root)
    )
    t0 = time.perf_counter()
    val_trainer.validate(task, datamodule=dm, verbose=False)
    return timer.per_step, time.perf_counter() - t0


@torch.no_grad()
def bare_val_s(cfg: Any, steps: int) -> float:
    """A no_grad forward + loss over the validation batches the loop validates on."""
    dm, _, task = build(cfg)
    batches = _batches(dm.val_dataloader(), steps)
    task.eval()
    t0 = time.perf_counter()
    for b in batches:
        task.loss(b)
    return time.perf_counter() - t0


def measure(
    name: str, overrides: list[str], budget: str, steps: int, warmup: int, repeats: int, bf16: bool = False
) -> dict[str, Any]:
    """One model: loop, stock loop and bare times (medians over ``repeats`` alternations in this process)."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose_run(
            [
                *overrides,
                f"budget={budget}",
                path_override("paths.results_dir", tmp),
                "trainer.enable_progress_bar=false",
            ]
        )
        loops, stocks, bares, vals, bare_vals, bf16s = [], [], [], [], [], []
        for r in range(repeats):  # alternate so that background load hits all of them
            loop, val = loop_step_s(cfg, steps, warmup, Path(tmp) / f"r{r}")
            loops.append(loop), vals.append(val)
            stocks.append(loop_step_s(cfg, steps, warmup, Path(tmp) / f"s{r}", lean=False)[0])
            bares.append(bare_step_clocks(cfg, steps, warmup))
            bare_vals.append(bare_val_s(cfg, steps))
            if bf16:
                bf16s.append(bare_step_s(cfg, steps, warmup, bf16=True))
    (loop, loop_cpu), (stock, stock_cpu), (bare, bare_cpu) = (
        (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts)) for ts in (loops, stocks, bares)
    )
    val, bval = statistics.median(vals), statistics.median(bare_vals)
    print(
        f"[bench.loop] {name}: loop {1e3 * loop:.2f} ms/step, stock loop {1e3 * stock:.2f}, bare {1e3 * bare:.2f} "
        f"ms/step: overhead {100 * (loop / bare - 1):+.0f} % (stock {100 * (stock / bare - 1):+.0f} %)",
        flush=True,
    )
    return {
        "model": name,
        "overrides": " ".join(overrides),
        "batch": int(cfg.data.batch_size),
        "steps": steps,
        "threads": torch.get_num_threads(),
        "loop ms/step": 1e3 * loop,
        "bare ms/step": 1e3 * bare,
        "loop / bare": loop / bare,
        "overhead %": 100 * (loop / bare - 1),
        "stock loop ms/step": 1e3 * stock,
        "stock loop / bare": stock / bare,
        "loop / bare (cpu)": loop_cpu / bare_cpu,
        "stock loop / bare (cpu)": stock_cpu / bare_cpu,
        "val loop s": val,
        "val bare s": bval,
        "val loop / bare": val / bval,
        **(
            {"bf16 bare ms/step": 1e3 * statistics.median(bf16s), "bf16 speed-up": bare / statistics.median(bf16s)}
            if bf16
            else {}
        ),
    }


def render(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    head = [
        f"# Training-loop overhead (budget={args.budget})",
        "",
        f"- **Protocol:** `python -m oscrepro.bench.loop {' '.join(args.argv)}`: per model (training batches, "
        f"untimed warm-up) {args.steps or {m: STEPS[m] for m in args.models}}, median of {args.repeats} "
        "alternations of loop, stock loop and bare in one process; validation timed separately (one validation "
        "epoch, up to the same number of batches). Loop: the run's loop (Lightning with the lean per-batch path, "
        "oscrepro.tasks.lean); stock loop: Lightning's own per-batch code, the same run bit for bit; cpu: the "
        "ratios in process CPU time.",
        f"{device_line()}; CPU kernels {torch.backends.cpu.get_cpu_capability()}",
        "",
    ]
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in r.values()) + " |")
    return "\n".join(head + lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m oscrepro.bench.loop", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--budget", default="cpu")
    parser.add_argument("--steps", type=int, default=None, help=f"default per model: {STEPS}")
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bf16", action="store_true", help="also time the bare step under bf16 autocast")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = parser.parse_args(argv)
    args.argv = argv if argv is not None else __import__("sys").argv[1:]
    quiet_third_party()
    rows = [
        measure(
            m,
            MODELS[m],
            args.budget,
            args.steps or STEPS[m][0],
            args.warmup if args.warmup is not None else STEPS[m][1],
            args.repeats,
            args.bf16,
        )
        for m in args.models
    ]
    text = render(rows, args)
    emit(text, args.out)


if __name__ == "__main__":
    main()
