"""GPU cost of each table: one paper-budget training step of every row, timed, and the table's GPU time from it.

    python scripts/gpu_step_cost.py                              # the main table of each paper, trainer=gpu
    python scripts/gpu_step_cost.py fqo/table4 --device cpu --steps 2 --warmup 1 --out /tmp/cost.md   # dry run
    python scripts/gpu_step_cost.py --list-data                  # the data dirs (and caches) those rows read

Per row of each table: the first run-backed column's cell at budget ``paper`` (``spec.cell_overrides``, as the
table engine composes it) plus ``trainer=gpu seed=0`` (``--device cpu``: no trainer override), composed by
:func:`oscrepro.runs.compose.compose_run` and validated; data module, model and task built as
:func:`oscrepro.train.build` builds them (one data module per distinct data config). Then ``--warmup`` and
``--steps`` optimizer steps on batches prefetched to the device (data loading is not timed), each step what the
task's training step does: ``accumulate_grad_batches`` micro-batches of ``task.loss(batch)`` under the trainer's
precision (autocast, a grad scaler for 16-mixed), backward, clipping, the task's optimizer (the one
``configure_optimizers`` builds; its scheduler's step is not timed); ``torch.cuda.synchronize`` around each step.

Recorded per row: parameters, batch shape, tokens (B x T of the first batch tensor, padding included) and samples
per step, ms/step (median), tokens/s, peak GPU memory, the first step's time (a torch.compile shows there), and the
paper budget's GPU time = optimizer steps it trains (``trainer.max_steps``, or ``max_epochs`` x the train loader's
batches / accumulation) x seeds at paper x ms/step. A row whose paper data is missing takes the data config of the
same cell at budget ``cpu`` (with the paper's ``batch_size`` and ``seq_len``) and says so; its epoch length is then
unknown. A row that fails (OOM, an error, the ``--row-timeout-s`` cap, which does not count the first step's
time: a torch.compile happens there, within ``--first-step-s``) is recorded with its error; rows left when
``--max-s`` is spent are listed as not reached. Rows run round-robin over the tables (every table's first row
first), so each table gets a number before the global cap.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch.trainer.connectors.accelerator_connector import _set_torch_flags
from omegaconf import DictConfig, OmegaConf, open_dict

from oscrepro.bench.harness import write_csv
from oscrepro.data.base import model_dims
from oscrepro.data.integrity import setup_data
from oscrepro.data.paths import CACHE_DIR_ENV, DatasetNotFoundError, default_roots
from oscrepro.runs.compose import compose_run, path_override
from oscrepro.runs.validate import validate_config
from oscrepro.tables.spec import TableSpec, load_spec
from oscrepro.train import LOOP_KEYS
from oscrepro.utils.provenance import provenance
from oscrepro.utils.quiet import quiet_third_party

DEFAULT_TABLES = ["fqo/table4", "osciformer/table2", "coupledqk/table1", "ssa/lm_wikitext2", "fsn/table1"]
SHAPE_KEYS = ("batch_size", "seq_len")  # kept at the paper's values when the data falls back to budget cpu's
AMP = {"32-true": None, "32": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}
COLUMNS = (
    "table,row,column,status,params,batch,tokens/step,ms/step,tokens/s,peak GPU MiB,first step s,"
    "train steps,seeds,est h,note"
).split(",")
STEP_FIELDS = (
    "params,batch,samples/step,tokens/step,ms/step,tokens/s,peak GPU MiB,first step s,timed steps,precision,accumulate"
).split(",")  # what rows of one step_key share


@dataclass
class RowPlan:
    """One row of one table: the cell timed (its first run-backed column) and what the table multiplies it by."""

    spec: TableSpec
    row: int
    column: str
    run_columns: int  # distinct run-backed columns of the row (each is a run per seed)
    label: str = field(init=False)

    def __post_init__(self) -> None:
        self.label = self.spec.rows[self.row].label

    def overrides(self, budget: str, extra: list[str]) -> list[str]:
        return self.spec.cell_overrides(self.row, self.column, budget, extra)


@dataclass
class Session:
    """How the rows are timed, and what they share."""

    budget: str = "paper"
    device: str = "cuda"  # cpu: a dry run (no trainer override)
    steps: int = 10
    warmup: int = 3
    row_timeout_s: float = 45.0
    first_step_s: float = 90.0  # more hard-cap time until the first step (a torch.compile) has run
    extra: list[str] = field(default_factory=list)  # overrides after every cell's own
    data: dict[str, Any] = field(default_factory=dict)  # data modules by resolved data config
    memo: dict[str, dict] = field(default_factory=dict)  # step measurements by step_key

    def overrides(self) -> list[str]:
        return [*(["trainer=gpu"] if self.device == "cuda" else []), "seed=0", *self.extra]


class RowTimeout(BaseException):
    """The row ran past its wall-clock cap (raised by SIGALRM). A BaseException, as KeyboardInterrupt is: the
    compile fallbacks' ``except Exception`` (oscrepro.attention.compiled) would otherwise take it for a compiler
    failure and run every later row's kernels eagerly."""


def plan_rows(keys: list[str], max_rows: int | None = None) -> list[RowPlan]:
    """Every row of the tables (at most ``max_rows`` each), round-robin: row 0 of each table, then row 1, ..."""
    per_table = []
    for key in keys:
        spec = load_spec(key)
        if spec.kind != "runs":
            raise SystemExit(f"gpu_step_cost: {key} is an analysis table (no training runs to time)")
        run_cols = [c for c in spec.columns if c.metric]
        plans = []
        for ri in range(len(spec.rows))[:max_rows]:
            distinct = {tuple(spec.cell_overrides(ri, c.name, "paper", [])) for c in run_cols}
            plans.append(RowPlan(spec, ri, run_cols[0].name, len(distinct)))
        per_table.append(plans)
    out: list[RowPlan] = []
    for i in range(max(map(len, per_table), default=0)):
        out += [plans[i] for plans in per_table if i < len(plans)]
    return out


def resolve_data(plan: RowPlan, cfg: DictConfig, session: Session) -> tuple[Any, str]:
    """The row's data module (set up for fit, shared between rows of the same data config) and a note: when the
    budget's dataset is missing, the data config of the same cell at budget cpu, with this budget's shape keys."""
    budget = session.budget
    try:
        return _setup_cached(cfg.data, session.data), ""
    except DatasetNotFoundError as err:
        if budget == "cpu":
            raise
        missing = str(err).splitlines()[0]
    node = OmegaConf.to_container(compose_run(plan.overrides("cpu", session.overrides())).data, resolve=True)
    kept = [k for k in SHAPE_KEYS if k in node and k in cfg.data]
    node.update({k: cfg.data[k] for k in kept})
    with open_dict(cfg):
        cfg.data = node
    try:
        dm = _setup_cached(cfg.data, session.data)
    except DatasetNotFoundError as again:
        raise DatasetNotFoundError(f"{budget}: {missing}; cpu: {str(again).splitlines()[0]}") from again
    return dm, f"{budget} data missing ({missing}); data config of budget cpu with the {budget} {'/'.join(kept)}"


def _setup_cached(data: DictConfig, cache: dict[str, Any]) -> Any:
    key = OmegaConf.to_yaml(data, resolve=True)
    if key not in cache:
        cache[key] = setup_data(data)
    return cache[key]


def build(cfg: DictConfig, datamodule: Any) -> tuple[torch.nn.Module, L.LightningModule]:
    """Model and task as :func:`oscrepro.train.build` makes them, on a data module already set up."""
    if cfg.get("torch_threads") is not None:
        torch.set_num_threads(int(cfg.torch_threads))
    if cfg.seed is not None:
        L.seed_everything(int(cfg.seed), workers=True)
    model = instantiate(cfg.model, **model_dims(datamodule))
    if hasattr(model, "set_data_statistics"):
        model.set_data_statistics(datamodule)
    return model, instantiate(cfg.task, model=model)


def _batches(datamodule: Any, n: int) -> list[Any]:
    """``n`` training batches, the loader cycled when it is shorter."""
    out: list[Any] = []
    while len(out) < n:
        before = len(out)
        for b in datamodule.train_dataloader():
            out.append(b)
            if len(out) == n:
                break
        if len(out) == before:
            raise RuntimeError("the training loader yields no batch")
    return out


def _first_tensor(batch: Any) -> torch.Tensor:
    return batch[0] if isinstance(batch, list | tuple) else next(iter(batch.values()))


def time_steps(
    cfg: DictConfig,
    dm: Any,
    task: L.LightningModule,
    session: Session,
    deadline: float,
    times: list[float],
    first_done: Callable[[float], None] = lambda _: None,
) -> dict[str, Any]:
    """``warmup`` then up to ``steps`` timed optimizer steps (module docstring); fewer timed steps (at least 3)
    when the next one would pass ``deadline``, which the first step (where a torch.compile happens) moves on by
    its own time; ``first_done(seconds)`` is called after it. ``times`` receives each step's seconds as it ends
    (what a row stopped by its cap had done)."""
    device, steps, warmup = torch.device(session.device), session.steps, session.warmup
    tcfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    task.configure_loop(**{k: tcfg[k] for k in LOOP_KEYS if tcfg.get(k) is not None})
    precision = str(tcfg.get("precision", "32-true"))
    if precision not in AMP:
        raise ValueError(f"trainer.precision={precision} is not timed here (valid: {', '.join(AMP)})")
    amp, acc = AMP[precision], task.accumulate_grad_batches
    _set_torch_flags(deterministic=tcfg.get("deterministic"), benchmark=tcfg.get("benchmark"))
    task.to(device).train()
    opt = task.optimizer_factory([p for p in task.parameters() if p.requires_grad])
    scaler = torch.amp.GradScaler(device.type) if amp is torch.float16 else None
    batches = [move_data_to_device(b, device) for b in _batches(dm, (warmup + steps) * acc)]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step(micro: list[Any]) -> None:
        for b in micro:  # as BaseTask.training_step: loss / acc, backward; then clip, step, zero
            with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                loss = task.loss(b)
            loss = loss / acc if acc > 1 else loss
            (scaler.scale(loss) if scaler else loss).backward()
        if task.gradient_clip_val:
            if scaler:
                scaler.unscale_(opt)
            params = [p for p in task.parameters() if p.grad is not None]
            if task.gradient_clip_algorithm == "value":
                torch.nn.utils.clip_grad_value_(params, task.gradient_clip_val)
            else:
                torch.nn.utils.clip_grad_norm_(params, task.gradient_clip_val)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)

    sync()
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        step(batches[i * acc : (i + 1) * acc])
        sync()
        times.append(time.perf_counter() - t0)
        if i == 0:
            deadline += times[0]
            first_done(times[0])
        if i >= warmup + 2 and i + 1 < warmup + steps and time.perf_counter() + times[-1] > deadline:
            break
    timed = times[warmup:]
    first = _first_tensor(batches[0])
    samples = task.batch_size(batches[0]) * acc
    tokens = (first.shape[0] * first.shape[1] if first.dim() >= 2 else first.shape[0]) * acc
    ms = 1e3 * statistics.median(timed)
    return {
        "batch": f"{acc} x " * (acc > 1) + "x".join(map(str, first.shape)),
        "samples/step": samples,
        "tokens/step": tokens,
        "ms/step": ms,
        "tokens/s": tokens / (ms / 1e3),
        "first step s": times[0],
        "timed steps": len(timed),
        "precision": precision,
        "accumulate": acc,
    }


def train_steps(cfg: DictConfig, datamodule: Any, acc: int, data_note: str) -> tuple[int | None, str]:
    """Optimizer steps the config trains: ``max_steps``, or ``max_epochs`` x batches per epoch / accumulation
    (whichever ends first, as Lightning stops); ``None`` when unknown (epochs over a stand-in's loader)."""
    t = cfg.trainer
    max_steps = int(t.get("max_steps") or -1)
    max_epochs = int(t.get("max_epochs") if t.get("max_epochs") is not None else -1)
    by_steps = max_steps if max_steps > 0 else None
    by_epochs, how = None, ""
    if max_epochs > 0 and not data_note:
        try:
            n = len(datamodule.train_dataloader())
        except TypeError:
            n = None
        limit = t.get("limit_train_batches")
        if n is not None and limit is not None:
            n = min(n, int(limit)) if isinstance(limit, int) else int(n * float(limit))
        if n:
            by_epochs, how = max_epochs * math.ceil(n / acc), f"{max_epochs} epochs x {math.ceil(n / acc)}"
    if by_steps is not None and (by_epochs is None or by_steps <= by_epochs):
        return by_steps, "max_steps"
    if by_epochs is not None:
        return by_epochs, how
    if data_note and max_epochs > 0:
        return None, (
            f"{max_epochs} epochs of a corpus not read here: h = {max_epochs} x its tokens per epoch / tokens/s"
        )
    return None, "unknown"


@contextlib.contextmanager
def alarm(seconds: float) -> Iterator[Callable[[float], None]]:
    """Raise :class:`RowTimeout` after ``seconds``; yields ``rearm(seconds)``, which restarts the countdown from
    now (SIGALRM; no cap off the main thread or without SIGALRM)."""
    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield lambda _: None
        return

    def fire(*_: Any) -> None:
        raise RowTimeout("hard cap reached")

    def rearm(left: float) -> None:
        signal.setitimer(signal.ITIMER_REAL, max(left, 0.01))

    old = signal.signal(signal.SIGALRM, fire)
    rearm(seconds)
    try:
        yield rearm
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def step_key(cfg: DictConfig) -> str:
    """What a step's time depends on: data, model, task (less its scheduler) and the trainer's step keys. Rows
    equal in these (Table 1's 30- and 50-epoch rows) share one measurement."""
    trainer = OmegaConf.to_container(cfg.trainer, resolve=True)
    task = OmegaConf.to_container(cfg.task, resolve=True)
    task.pop("scheduler", None)
    return OmegaConf.to_yaml(
        OmegaConf.create(
            {
                "data": OmegaConf.to_container(cfg.data, resolve=True),
                "task": task,
                "threads": cfg.get("torch_threads"),
                "model": OmegaConf.to_container(cfg.model, resolve=True),
                "trainer": {k: trainer.get(k) for k in ("precision", "deterministic", "benchmark", *LOOP_KEYS)},
            }
        )
    )


def measure_row(plan: RowPlan, session: Session) -> dict[str, Any]:
    """Time one row (module docstring); never raises for the row's own failure: ``status`` says ok, oom, timeout
    or failed, with the error in ``note``."""
    overrides = plan.overrides(session.budget, session.overrides())
    rec: dict[str, Any] = {
        "table": plan.spec.key,
        "row": plan.label,
        "column": plan.column,
        "status": "failed",
        "seeds": len(plan.spec.seeds_for(session.budget, plan.row)),
        "run columns": plan.run_columns,
        "budget": session.budget,
        "overrides": " ".join(overrides),
    }
    cuda = session.device == "cuda"
    t0 = time.perf_counter()
    phase, notes, model, task, done, caught = "compose", [], None, None, [], []
    try:
        hard = session.row_timeout_s + min(15.0, session.row_timeout_s)  # the step loop keeps to row_timeout_s
        with alarm(hard + session.first_step_s) as rearm, warnings.catch_warnings(record=True) as caught:
            cfg = compose_run(overrides)
            validate_config(cfg)
            phase = "data"
            dm, fallback = resolve_data(plan, cfg, session)
            notes.append(fallback)
            key = step_key(cfg)
            if key in session.memo:
                rec.update(session.memo[key]["fields"])
                notes.append(f"step as timed for row '{session.memo[key]['row']}' (same data, model, task, precision)")
            else:
                phase = "model"
                model, task = build(cfg, dm)
                rec["params"] = sum(p.numel() for p in model.parameters())
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                phase = "timing"
                first_done = lambda dt: rearm(t0 + hard + dt - time.perf_counter())  # the first step not counted
                rec.update(time_steps(cfg, dm, task, session, t0 + session.row_timeout_s, done, first_done))
                rec["peak GPU MiB"] = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
                session.memo[key] = {"row": plan.label, "fields": {k: rec[k] for k in STEP_FIELDS}}
            n, how = train_steps(cfg, dm, rec["accumulate"], fallback)
            rec.update(
                {
                    "train steps": n,
                    "est h": None if n is None else n * rec["seeds"] * rec["ms/step"] / 3.6e6,
                    "status": "ok",
                }
            )
            notes += [
                f"steps: {how}",
                f"data: {_short(dm.source)}",
                f"{rec['timed steps']} of {session.steps} timed steps" * (rec["timed steps"] < session.steps),
            ]
    except (Exception, RowTimeout) as err:  # noqa: BLE001 -- recorded in the row; the next row runs
        oom, timeout = isinstance(err, torch.OutOfMemoryError), isinstance(err, RowTimeout)
        rec["status"] = "oom" if oom else "timeout" if timeout else "failed"
        after = f" after {len(done)} steps ({', '.join(f'{t:.2f}' for t in done[:4])} s)" if done else ""
        notes.append(f"{phase}{after}: {type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:300]}")
    finally:
        model = task = None  # the row's weights, freed before the next row
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    notes += [f"{w.message}: eager from here on" for w in caught if "torch.compile failed" in str(w.message)]
    rec["wall s"] = time.perf_counter() - t0
    rec["note"] = "; ".join(n for n in notes if n)
    return rec


def _short(text: str, n: int = 100) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _cell(v: Any) -> str:
    if v is None or v == "":
        return "—"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return f"{v:,}" if isinstance(v, int) else str(v).replace("|", "\\|")


def render(records: list[dict[str, Any]], not_reached: list[RowPlan], header: list[str]) -> str:
    """Markdown: header, one line per row (grouped by table), per-table totals, the rows not reached."""
    lines = [*header, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    order = list(dict.fromkeys(r["table"] for r in records))
    ranked = sorted(records, key=lambda r: order.index(r["table"]))
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in COLUMNS) + " |" for r in ranked]
    lines += ["", "## Device time per table (est h x the row's run columns: each costed as its first)", ""]
    for table in order:
        rows = [r for r in records if r["table"] == table]
        known = [r for r in rows if r.get("est h") is not None]
        total = sum(r["est h"] * r["run columns"] for r in known)
        if not known:  # a total of 0 h would read as "free"
            lines.append(f"- `{table}`: no estimate ({len(rows)} rows without one: see their notes)")
            continue
        lines.append(
            f"- `{table}`: ≈ {total:,.2f} h over {len(known)} of {len(rows)} measured rows"
            + (f" ({len(rows) - len(known)} without an estimate: see their notes)" if len(known) < len(rows) else "")
        )
    if not_reached:
        lines += ["", f"## Not reached (global cap): {len(not_reached)} rows", ""]
        lines += [f"- `{p.spec.key}`: {p.label}" for p in not_reached]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def traced_paths() -> Iterator[set[str]]:
    """Every path opened or listed while the block runs (Python audit events)."""
    seen: set[str] = set()
    active = [True]

    def hook(event: str, args: tuple) -> None:
        if active[0] and event in ("open", "os.listdir", "os.scandir", "glob.glob") and args:
            if isinstance(args[0], str | os.PathLike):
                seen.add(os.fspath(args[0]))

    sys.addaudithook(hook)  # hooks cannot be removed: it is switched off instead
    try:
        yield seen
    finally:
        active[0] = False


def list_data(plans: list[RowPlan], session: Session) -> str:
    """The dataset files the rows read under the data roots (cold caches, so that every file is read), and the
    cache entries their data modules build (carry them to skip tokenizing on the device)."""
    roots = [r.resolve() for r in default_roots() if r.is_dir()]
    before = os.environ.get(CACHE_DIR_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ[CACHE_DIR_ENV] = tmp
        session.extra = [*session.extra, path_override("paths.cache_dir", tmp)]
        with traced_paths() as seen:
            for p in plans:
                try:
                    _, note = resolve_data(p, compose_run(p.overrides(session.budget, session.overrides())), session)
                    print(f"{p.spec.key} | {p.label}: ok{f' ({note})' if note else ''}", flush=True)
                except Exception as err:  # noqa: BLE001 -- listed; the other rows go on
                    print(f"{p.spec.key} | {p.label}: {type(err).__name__}: {str(err).splitlines()[0]}", flush=True)
        entries = sorted(e for sub in Path(tmp).iterdir() if sub.name != "fingerprints" for e in sub.iterdir())
        caches = [
            (e.relative_to(tmp).as_posix(), sum(f.stat().st_size for f in e.rglob("*") if f.is_file())) for e in entries
        ]
    if before is None:
        os.environ.pop(CACHE_DIR_ENV)
    else:
        os.environ[CACHE_DIR_ENV] = before
    files = {}  # source path -> its path below its data root (the folder layout data/ must have)
    for text in seen:
        path = Path(text).resolve()
        root = next((r for r in roots if path.is_relative_to(r)), None)
        if root is not None and path.is_file():
            files[path] = path.relative_to(root).as_posix()
    size = sum(p.stat().st_size for p in files) / 1e6
    out = ["", f"Dataset files read ({size:.1f} MB); copy them into data/ (repo root) with:"]
    out += [
        f"  install -D -m 644 {src} data/{rel}   # {src.stat().st_size / 1e6:.2f} MB"
        for src, rel in sorted(files.items(), key=lambda kv: kv[1])
    ]
    out.append(
        f"Cache entries built ({sum(s for _, s in caches) / 1e6:.1f} MB): carrying .cache/oscrepro/<entry> "
        "skips that tokenization on the device"
    )
    out += [f"  {name}   # {size / 1e6:.1f} MB" for name, size in caches]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tables", nargs="*", default=DEFAULT_TABLES, help=f"table keys (default: {DEFAULT_TABLES})")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a dry run, no trainer=gpu")
    parser.add_argument("--budget", default="paper", help="the budget of the timed cells (default paper)")
    parser.add_argument("--steps", type=int, default=10, help="timed optimizer steps per row")
    parser.add_argument("--warmup", type=int, default=3, help="untimed optimizer steps before them")
    parser.add_argument("--max-rows", type=int, default=None, help="at most this many rows per table")
    parser.add_argument("--row-timeout-s", type=float, default=45.0, help="wall-clock cap of a row (+15 s hard)")
    parser.add_argument("--first-step-s", type=float, default=90.0, help="more cap while the first step compiles")
    parser.add_argument("--max-s", type=float, default=330.0, help="no row starts after this many seconds")
    parser.add_argument("--out", type=Path, default=Path("results/bench/gpu_step_cost.md"), help="+ .csv beside")
    parser.add_argument("--list-data", action="store_true", help="print the data the rows read, then exit")
    args = parser.parse_args(argv)
    start = time.monotonic()
    quiet_third_party()
    plans = plan_rows(args.tables, args.max_rows)
    session = Session(args.budget, args.device, args.steps, args.warmup)
    if args.list_data:
        print(list_data(plans, session))
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_step_cost: no CUDA device (use --device cpu for a dry run)")
    if args.device == "cuda":
        torch.zeros(1, device="cuda")  # the CUDA context, outside the first row's time
    records, not_reached = [], []
    for i, plan in enumerate(plans):
        left = args.max_s - (time.monotonic() - start)
        if left < 5:
            not_reached = plans[i:]
            break
        session.row_timeout_s = min(args.row_timeout_s, left)
        session.first_step_s = min(args.first_step_s, left - session.row_timeout_s)
        rec = measure_row(plan, session)
        records.append(rec)
        print(
            f"[gpu_step_cost {time.monotonic() - start:5.0f} s] {plan.spec.key} | {plan.label}: {rec['status']} "
            + (
                f"{rec['ms/step']:.2f} ms/step, {rec['tokens/s']:,.0f} tokens/s, est {_cell(rec['est h'])} h"
                if rec["status"] == "ok"
                else rec["note"]
            ),
            flush=True,
        )
    prov = provenance(args.device)
    head = [
        f"# GPU cost of one {args.budget}-budget training step per table row",
        "",
        f"- **Command:** `python scripts/gpu_step_cost.py {' '.join(argv if argv is not None else sys.argv[1:])}`"
        f"; {args.warmup} warm-up + {args.steps} timed optimizer steps per row, median (scripts/gpu_step_cost.py"
        " docstring: what a step is, what the estimate counts)",
        f"- **Device:** {prov['device']}; **commit** `{prov['git_commit']}`; **date** {prov['date']}; "
        f"torch {prov['torch']}; oscrepro {prov['oscrepro']}; {time.monotonic() - start:.0f} s in all",
        f"- **est h** = device hours of the row's first run column at budget {args.budget}: train steps x seeds x "
        "ms/step; `—`: unknown (see the note). A `subset` or `stand-in` in a note's data source: the epoch "
        "length, hence the estimate, is that data's, not the paper corpus's",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(records, not_reached, head))
    write_csv(
        records + [{"table": p.spec.key, "row": p.label, "status": "not reached"} for p in not_reached],
        args.out.with_suffix(".csv"),
        [h.lstrip("#- ") for h in head if h],
    )
    print(args.out.read_text())


if __name__ == "__main__":
    main()
