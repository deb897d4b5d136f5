"""Run every missing run of a table in one pool: in-process, local worker processes (joblib), a SLURM array
(``submitit_slurm``), or submitit's local executor (``submitit_local``: SLURM's code path, pickled jobs, per-job
folders and logs, without the scheduler).

One pool per table, not one sweep per cell: with 9 runs and 2 workers a table takes 5 rounds, not 6 (a per-cell
sweep of 3 seeds ends every cell with one worker idle). Workers x threads = cores: each worker's runs get
``torch_threads = cores // workers`` (``torch_threads`` is not part of the run id, so records are shared with
runs trained at any thread count). The sweep line reports each run as it finishes.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from oscrepro.runs.lookup import RunRequest, find_record
from oscrepro.runs.record import RunRecord
from oscrepro.tables.runs import MissingRunsError

LAUNCHERS = ("inprocess", "joblib", "submitit_local", "submitit_slurm")


class LauncherUnavailableError(RuntimeError):
    """The chosen launcher cannot run here (no SLURM for ``submitit_slurm``); raised before anything is written."""


def check_launcher(launcher: str) -> None:
    """Refuse an unknown launcher, or ``submitit_slurm`` where no SLURM client is on PATH, with one message."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher={launcher!r}; valid: {', '.join(LAUNCHERS)}")
    if launcher == "submitit_slurm" and shutil.which("sbatch") is None:
        raise LauncherUnavailableError(
            "--launcher submitit_slurm needs a SLURM cluster, and `sbatch` is not on PATH here; run the build on a "
            "login node of the cluster, or locally with --launcher joblib (or submitit_local: the same submitit "
            "code path without the scheduler)")


class Progress:
    """Sweep-level progress line: done/total, failures, ETA from the mean time of runs done in this call."""

    def __init__(self, key: str, total: int, done: int) -> None:
        self.key, self.total, self.done, self.t0, self.new = key, total, done, time.time(), 0
        self.status: Counter[str] = Counter()

    def update(self, n: int = 1, status: str | None = None) -> None:
        self.done, self.new = self.done + n, self.new + n
        if status:
            self.status[status] += n
        per = (time.time() - self.t0) / max(self.new, 1)  # wall time per finished run, workers included
        eta = per * (self.total - self.done)
        flags = "".join(f", {v} {k}" for k, v in self.status.items() if k != "ok")
        print(f"[table {self.key}] {self.done}/{self.total} runs done{flags}, ETA {eta / 60:.1f} min", flush=True)


def cores() -> int:
    """CPU cores this process may use (the affinity mask, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def plan_workers(n_runs: int, n_cores: int, max_workers: int | None = None) -> tuple[int, int]:
    """(workers, threads per worker) with workers x threads <= cores, as many workers as runs allow."""
    workers = max(1, min(n_runs, n_cores, max_workers or n_cores))
    return workers, max(1, n_cores // workers)


def _with_threads(cfg: DictConfig, threads: int) -> DictConfig:
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    cfg.torch_threads = threads
    return cfg


def _train(cfg: DictConfig) -> dict[str, Any]:
    """One run; a refused one (missing or corrupted data: nothing written) is reported in one line and counted as
    failed, so the build goes on and exits non-zero."""
    from oscrepro.train import REFUSALS, train  # imported in the worker

    try:
        return train(cfg)
    except REFUSALS as err:
        print(f"[run refused] {err}", flush=True)
        return {"status": "failed"}


def launch(missing: list[RunRequest], launcher: str, progress: Progress, max_workers: int | None = None,
           slurm: dict[str, Any] | None = None) -> None:
    """Train ``missing`` with ``launcher``; every finished run updates ``progress``."""
    check_launcher(launcher)
    if not missing:
        return
    if launcher == "inprocess":
        for req in missing:
            progress.update(status=_train(req.cfg)["status"])
        return
    if launcher == "joblib":
        workers, threads = plan_workers(len(missing), cores(), max_workers)
        print(f"[table {progress.key}] {workers} worker process(es) x {threads} thread(s)", flush=True)
        cfgs = [_with_threads(r.cfg, threads) for r in missing]
        _report(_joblib_results(cfgs, workers), progress)
        return
    if launcher == "submitit_local":
        workers, threads = plan_workers(len(missing), cores(), max_workers)
        print(f"[table {progress.key}] submitit local: {workers} job(s) at a time x {threads} thread(s)", flush=True)
        cfgs = [_with_threads(r.cfg, threads) for r in missing]
        _report(_submitit_results(cfgs, dict(slurm or {}), cluster="local", in_flight=workers), progress)
        return
    _report(_submitit_results([r.cfg for r in missing], dict(slurm or {}), cluster="slurm"), progress)


def _report(results: Iterable[dict[str, Any]], progress: Progress) -> None:
    for result in results:
        progress.update(status=result["status"])


def _joblib_results(cfgs: list[DictConfig], workers: int) -> Iterable[dict[str, Any]]:
    from joblib import Parallel, delayed

    # loky worker processes (spawned once, reused across runs); results arrive as runs finish
    return Parallel(n_jobs=workers, backend="loky", return_as="generator_unordered")(
        delayed(_train)(cfg) for cfg in cfgs)


def _submitit_results(cfgs: list[DictConfig], params: dict[str, Any], cluster: str,
                      in_flight: int | None = None) -> Iterable[dict[str, Any]]:
    """Each run as a submitit job on ``cluster`` (``slurm``: one job array; ``local``: at most ``in_flight``
    subprocesses at a time, since the local executor would start them all at once); results as jobs finish. A job
    that dies without a result (killed, out of memory) counts as ``failed``: its run record says where it stopped."""
    import submitit

    folder = params.pop("folder", str(Path(cfgs[0].paths.results_dir) / "submitit" / "%j"))  # job pickles and logs
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    executor.update_parameters(**params)
    if cluster == "slurm":
        queue, waiting = [], list(executor.map_array(_train, cfgs))  # one job array, SLURM schedules it
    else:
        queue, waiting = list(cfgs), []
    while queue or waiting:
        while queue and len(waiting) < (in_flight or len(queue)):
            waiting.append(executor.submit(_train, queue.pop(0)))
        for job in [j for j in waiting if j.done()]:
            waiting.remove(job)
            try:
                yield job.result()
            except Exception as err:  # submitit's UncompletedJobError / FailedJobError: the job's log has the rest
                print(f"[submitit] job {job.job_id} ended without a result: {str(err).splitlines()[0]}", flush=True)
                yield {"status": "failed"}
        time.sleep(0.5 if cluster == "local" else 5)


def finished_runs(name: str, budget: str, reqs: list[RunRequest], train_missing: bool, launcher: str,
                  workers: int | None, train_command: str, what: str = "runs"
                  ) -> tuple[list[Path | None], list[RunRequest]]:
    """The record dirs of an analysis's own runs ``reqs`` (same order), training the missing ones first when
    ``train_missing``; raises :class:`MissingRunsError` with ``train_command`` (how to train them) otherwise.

    Returns ``(dirs, diverged)``: ``dirs[i]`` is the finished-ok record of ``reqs[i]`` or None when that run
    diverged; ``diverged`` lists the requests left out, for the caller's notes."""
    missing = [r for r in reqs if find_record(r) is None]
    if missing and train_missing:
        print(f"[table {name}] budget={budget}: {len(reqs)} {what}, {len(missing)} to train ({launcher})", flush=True)
        launch(missing, launcher, Progress(name, len(reqs), len(reqs) - len(missing)), max_workers=workers)
        missing = [r for r in missing if find_record(r) is None]
    if missing:
        raise MissingRunsError(
            f"table {name} at budget={budget} reads {len(missing)} {what} that are missing or unfinished, e.g. "
            f"{missing[0].run_dir}.\nTrain them first:\n{train_command}")
    dirs: list[Path | None] = []
    diverged = []
    for r in reqs:
        found = find_record(r)
        ok = RunRecord(found).status()["status"] == "ok"
        dirs.append(found if ok else None)
        if not ok:
            diverged.append(r)
    return dirs, diverged
