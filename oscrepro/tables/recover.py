"""Weights for run records kept without them.

Run records (``config.yaml``, ``status.json``, ``metrics.json``, ``history.csv``: a few KB) are kept in git under
``results/runs/``, so a table build that takes longer than one session goes on from a fresh checkout where the last
one stopped; checkpoints (tens of MB each) are not. An analysis table that needs the weights of such a record
(coupledqk Tables 7 and 12 read Table 1's LMs, say) retrains the run from its recorded config into a scratch
directory, compares the retrained metrics with the recorded ones, and moves the checkpoint into the record.

Training is deterministic for a given machine and thread count (README, "Reproducibility"), so where the record was
trained the metrics match exactly; elsewhere they may not: bf16-mixed LMs trained on an AMD EPYC and retrained on an
Intel Xeon came out 0.16-0.44 % off in perplexity (coupledqk Table 1, inside its seed spread). The comparison is
stored in the record's ``status.json`` (``checkpoint_recovered``) and returned as a note for the table, so a table
built from retrained weights says so.
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from oscrepro.runs.compose import CKPT_NAME, RunNotUsableError, compose_run
from oscrepro.runs.lookup import DEVICE_KEYS
from oscrepro.runs.record import RunRecord, load_record_config, run_id
from oscrepro.tables.launch import cores
from oscrepro.utils.provenance import git_commit

log = logging.getLogger(__name__)
# metrics that measure the machine, not the model: never compared
_MACHINE_KEYS = ("time", "wall", "throughput", "tokens_per_s", "memory")


def has_checkpoint(run_dir: Path) -> bool:
    """Whether the record holds its final weights (``checkpoints/last.ckpt``)."""
    return (Path(run_dir) / "checkpoints" / CKPT_NAME).exists()


def compare_metrics(recorded: dict[str, Any], retrained: dict[str, Any], rtol: float = 1e-4
                    ) -> tuple[bool, float, list[str]]:
    """(all model metrics within ``rtol``, the largest relative difference, the keys that differ beyond it).

    Only numeric keys present in both are compared; machine measurements (times, memory) are skipped."""
    worst, differ = 0.0, []
    for key in sorted(set(recorded) & set(retrained)):
        a, b = recorded[key], retrained[key]
        if any(m in key for m in _MACHINE_KEYS) or not all(isinstance(v, int | float) for v in (a, b)):
            continue
        if math.isnan(a) and math.isnan(b):
            continue
        rel = abs(a - b) / max(abs(a), 1e-12)
        worst = max(worst, rel)
        if not rel <= rtol:
            differ.append(f"{key} {a:.6g} -> {b:.6g}")
    return not differ, worst, differ


def recover_checkpoint(run_dir: Path, rtol: float = 1e-4, fallback_threads: int | None = None) -> str:
    """Retrain the finished run ``run_dir`` (status ``ok``, no checkpoint) from its recorded config and move its
    checkpoint into the record; returns a one-line note saying how the retrained metrics compare.

    The record's own metrics stay as they are: they are what the table reports. A retrained run that fails is an
    error (the analysis would otherwise read weights the table's numbers do not come from). A record trained on an
    accelerator this machine lacks is retrained on the CPU (:func:`cpu_fallback`), with ``fallback_threads`` torch
    threads (default: the record's, at most this process's cores): its numerics differ anyway, so the thread count
    may follow the pool instead of the record."""
    from oscrepro.train import train  # late: train imports the tables layer's callers

    run_dir = Path(run_dir)
    record = RunRecord(run_dir)
    if record.status().get("status") != "ok":
        raise RunNotUsableError(f"run {run_dir} has status {record.status().get('status', 'missing')!r}, not 'ok'")
    cfg = load_record_config(run_dir)  # moved classes at today's paths; same run id
    # paths are not part of the run id: take this checkout's, then train into a scratch runs dir
    cfg.paths = compose_run([]).paths
    if run_id(cfg) != run_dir.name:
        raise RunNotUsableError(f"{run_dir}/config.yaml hashes to run id {run_id(cfg)}, not {run_dir.name}: the record "
                                "was edited or written by an incompatible version; retrain it with its table")
    fallback = cpu_fallback(cfg, record.status().get("device", "an accelerator"))
    if fallback:
        n_cores = cores()
        cfg.torch_threads = fallback_threads or min(int(cfg.get("torch_threads") or n_cores), n_cores)
    t0 = time.time()
    log.info("run %s: its record has no checkpoint (records are kept in git without weights); retraining it from "
             "its recorded config to recover the weights%s", run_dir, f" ({fallback})" if fallback else "")
    with tempfile.TemporaryDirectory(prefix=".recover-", dir=run_dir.parent) as scratch:
        OmegaConf.update(cfg, "paths.runs_dir", scratch, merge=False)
        result = train(cfg)
        if result.get("status") != "ok":
            raise RunNotUsableError(f"retraining {run_dir} to recover its checkpoint ended with status "
                                    f"{result.get('status')!r}; see {scratch}")
        same, worst, differ = compare_metrics(record.metrics(), result, rtol)
        # a CPU fallback changes the device keys, hence the scratch run's id (never the record's)
        fresh = Path(scratch) / str(cfg.experiment_name) / run_id(cfg) / "checkpoints"
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
        shutil.move(str(fresh), str(run_dir / "checkpoints"))
    info = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "git_commit": git_commit(),
            "metrics_match": same,
            "max_rel_diff": worst, "differ": differ, "wall_time_s": round(time.time() - t0, 1),
            **({"device_fallback": fallback} if fallback else {})}
    record.update_status({"checkpoint_recovered": info})
    if same:
        log.info("run %s: weights recovered; retrained metrics match the record (max rel. diff %.1e)", run_dir, worst)
    else:
        log.warning("run %s: weights recovered, but the retrained metrics differ from the record: %s", run_dir,
                    "; ".join(differ))
    return recovered_note(run_dir) or ""


def cpu_fallback(cfg: Any, trained_on: str) -> str | None:
    """Retrain on the CPU a record trained on an accelerator this machine lacks (``trainer=gpu`` on a CPU-only
    machine: Lightning refuses with "No supported gpu backend found"). Only :data:`~oscrepro.runs.lookup.DEVICE_KEYS`
    change, to the CPU trainer's defaults, so the model, data and every hyperparameter are the record's; the numerics
    are the CPU's, so the metrics comparison says how far the recovered weights are from the recorded run (a note in
    the table, bold where they differ). Returns what was done, or None when the record's device is usable here."""
    accelerator = str(OmegaConf.select(cfg, "trainer.accelerator", default="cpu"))
    if accelerator in ("cpu", "auto") or (accelerator in ("gpu", "cuda") and torch.cuda.is_available()):
        return None
    cpu = compose_run([]).trainer
    for key in DEVICE_KEYS:
        leaf = key.split(".", 1)[1]
        if leaf in cpu:
            OmegaConf.update(cfg, key, cpu[leaf], merge=False)
        elif leaf in cfg.trainer:  # a key the CPU trainer leaves at Lightning's default (strategy)
            del cfg.trainer[leaf]
    return f"trained on {trained_on}; retrained on the CPU (trainer.accelerator={accelerator} is not available here)"


def recovered_note(run_dir: Path) -> str | None:
    """The table note for a record whose checkpoint was recovered by retraining (``status.json``:
    ``checkpoint_recovered``, whichever process did it), else None. Differences are bold: the analysis reads weights
    whose metrics are not exactly the record's."""
    info = RunRecord(Path(run_dir)).status().get("checkpoint_recovered")
    if not info:
        return None
    name = Path(run_dir).name
    where = f" ({info['device_fallback']})" if info.get("device_fallback") else ""
    if info.get("metrics_match"):
        return (f"{name}: weights retrained from the record on {info.get('date')}{where} (no checkpoint in git); "
                f"metrics match the record (max rel. diff {float(info.get('max_rel_diff', 0.0)):.1e})")
    differ = list(info.get("differ", []))
    return (f"**Retrained weights differ:** {name} was retrained on {info.get('date')}{where} to recover its "
            f"checkpoint (no checkpoint in git) and its metrics differ from the record by up to "
            f"{100 * float(info.get('max_rel_diff', 0.0)):.2g} % ({'; '.join(differ[:3])}): the analysis reads the "
            "retrained weights, the table's trained-run numbers are the record's")


def weightless(run_dirs: Iterable[Path]) -> list[Path]:
    """The finished (status ok) records among ``run_dirs`` that have no checkpoint, each once, in order."""
    out: dict[Path, None] = {}
    for d in map(Path, run_dirs):
        if RunRecord(d).status().get("status") == "ok" and not has_checkpoint(d):
            out[d] = None
    return list(out)


def recover_in_pool(run_dirs: Iterable[Path], pool: str, workers: int, key: str = "") -> None:
    """Recover the weights of every finished record in ``run_dirs`` kept without them, ``workers`` at a time.

    ``pool`` ``joblib``: that many loky worker processes (a recovery is a whole training run: minutes to an hour
    each, so an analysis reading 18 source models must not retrain them one after another); any other pool
    (``inprocess``, a SLURM launcher): one after another in this process, as :func:`recover_checkpoint` does when an
    analysis loads a weightless run. Each retrains with its record's own thread count (its run id's numerics).
    Errors propagate: an analysis must not read weights its numbers do not come from."""
    todo = weightless(run_dirs)
    if not todo:
        return
    label = f"[table {key}] " if key else ""
    n = max(1, min(workers, len(todo))) if pool == "joblib" else 1
    print(f"{label}{len(todo)} source run(s) kept without weights (records are in git, checkpoints are not): "
          f"retraining them to recover their checkpoints, {n} at a time", flush=True)
    t0 = time.time()
    if n == 1:
        results = (recover_checkpoint(d) for d in todo)
    else:
        from joblib import Parallel, delayed

        threads = max(1, workers // n) if pool == "joblib" else None
        results = Parallel(n_jobs=n, backend="loky", return_as="generator_unordered")(
            delayed(recover_checkpoint)(d, fallback_threads=threads) for d in todo)
    for i, _ in enumerate(results, 1):
        print(f"{label}weights recovered {i}/{len(todo)} ({time.time() - t0:.0f} s)", flush=True)
