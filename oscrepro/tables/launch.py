"""Run every missing run of a table in one pool: in-process, local worker processes (joblib), a SLURM array
(``submitit_slurm``), or submitit's local executor (``submitit_local``: SLURM's code path, pickled jobs, per-job
folders and logs, without the scheduler).

One pool per table, not one sweep per cell: with 9 runs and 2 workers a table takes 5 rounds, not 6 (a per-cell
sweep of 3 seeds ends every cell with one worker idle). Workers x threads = cores: each worker's runs get
``torch_threads = cores // workers`` (``torch_threads`` is not part of the run id, so records are shared with
runs trained at any thread count). The sweep line reports each run as it finishes.

The pool is configured as a training sweep is: a launcher is a Hydra launcher config (``conf/hydra/launcher/*.yaml``
such as ``slurm_gpu``, or a plugin's own: ``joblib``, ``submitit_slurm``, ``submitit_local``) plus
``hydra.launcher.<key>=<value>`` overrides (:func:`resolve_launcher`), so a table's SLURM jobs get the time limit,
partition, CPUs, GPUs, memory and signal delay they are given (the plugin's defaults otherwise, never submitit's
bare ``--time=5``), and their job folders stay under the results dir. SLURM jobs requeue on time limit or
preemption and resume their run (oscrepro.tables.job).
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from oscrepro.runs.compose import CONF_DIR
from oscrepro.runs.lookup import RunRequest
from oscrepro.tables.job import TrainJob, train_or_refuse

# the pools; any Hydra launcher config resolves to one of them by its _target_ (KINDS)
LAUNCHERS = ("inprocess", "joblib", "submitit_local", "submitit_slurm")
KINDS = {
    "BasicLauncher": "inprocess",
    "JoblibLauncher": "joblib",
    "LocalLauncher": "submitit_local",
    "SlurmLauncher": "submitit_slurm",
}
# keys every submitit executor takes as they are; the others are prefixed with the cluster (slurm_partition)
SUBMITIT_BASE_KEYS = (
    "timeout_min",
    "cpus_per_task",
    "gpus_per_node",
    "tasks_per_node",
    "mem_gb",
    "nodes",
    "name",
    "stderr_to_stdout",
)


def launcher_names() -> tuple[str, ...]:
    """What ``--launcher`` takes: the pools and every launcher config under conf/hydra/launcher/."""
    own = sorted(p.stem for p in (CONF_DIR / "hydra" / "launcher").glob("*.yaml"))
    return (*LAUNCHERS, *own)


class LauncherUnavailableError(RuntimeError):
    """The chosen launcher cannot run here (no SLURM for ``submitit_slurm``); raised before anything is written."""


@dataclass(frozen=True)
class LaunchConfig:
    """A launcher as chosen (``name`` and its ``hydra.launcher.*`` overrides), the pool it runs (``kind``) and its
    composed config (``params``: the launcher config's keys without ``_target_``; interpolations into Hydra's
    own output dirs left as None: the engine puts job folders under the results dir)."""

    name: str
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    overrides: tuple[str, ...] = ()

    def __str__(self) -> str:
        return " ".join((self.name, *self.overrides))


def split_launcher_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(run overrides, launcher overrides)``: ``hydra.launcher.<key>=<value>`` configure the pool, the rest go
    to every run."""
    ours = [o for o in overrides if o.lstrip("+~").startswith("hydra.launcher.")]
    return [o for o in overrides if o not in ours], ours


def resolve_launcher(launcher: str | LaunchConfig, overrides: Sequence[str] = ()) -> LaunchConfig:
    """The :class:`LaunchConfig` of ``launcher`` (a name from :func:`launcher_names`, or one resolved already)
    with ``overrides`` applied by Hydra (a misspelled key is Hydra's one error). Raises ValueError for an unknown
    name and :class:`LauncherUnavailableError` for a SLURM launcher where ``sbatch`` is not on PATH."""
    if isinstance(launcher, LaunchConfig):
        if overrides:
            return resolve_launcher(launcher.name, [*launcher.overrides, *overrides])
        check_launcher(launcher)
        return launcher
    if launcher not in launcher_names():
        raise ValueError(f"launcher={launcher!r}; valid: {', '.join(launcher_names())}")
    if launcher == "inprocess" and not overrides:
        return LaunchConfig("inprocess", "inprocess")
    from hydra import compose

    from oscrepro.runs.sweep import isolated_hydra

    group = "basic" if launcher == "inprocess" else launcher
    with isolated_hydra(CONF_DIR):
        node = compose(
            config_name="train", overrides=[f"hydra/launcher={group}", *overrides], return_hydra_config=True
        ).hydra.launcher
    raw = OmegaConf.to_container(node, resolve=False)
    for key in ("submitit_folder", "name"):  # ${hydra.sweep.dir}/..., ${hydra.job.name}: set by the engine
        if "${" in str(raw.get(key, "")):
            raw[key] = None
    params = OmegaConf.to_container(OmegaConf.create(raw), resolve=True)
    kind = KINDS.get(str(params.pop("_target_")).rsplit(".", 1)[-1])
    if kind is None:
        raise ValueError(f"launcher {launcher!r}: its config's _target_ is not one of {', '.join(KINDS)}")
    pool = LaunchConfig(launcher, kind, params, tuple(overrides))
    check_launcher(pool)
    return pool


def check_launcher(launcher: str | LaunchConfig) -> None:
    """Refuse an unknown launcher, or a SLURM one where no SLURM client is on PATH, with one message."""
    pool = launcher if isinstance(launcher, LaunchConfig) else None
    if pool is None:
        if launcher not in launcher_names():
            raise ValueError(f"launcher={launcher!r}; valid: {', '.join(launcher_names())}")
        if launcher in LAUNCHERS:  # no need to compose a plugin's config to know its pool
            pool = LaunchConfig(str(launcher), str(launcher))
        else:
            pool = resolve_launcher(launcher)
    if pool.kind == "submitit_slurm" and shutil.which("sbatch") is None:
        raise LauncherUnavailableError(
            f"--launcher {pool.name} needs a SLURM cluster, and `sbatch` is not on PATH here; run the build on a "
            "login node of the cluster (or start one here: `make slurm-up`), or locally with --launcher joblib "
            "(or submitit_local: the same submitit code path without the scheduler)"
        )


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


# the pools' one-run function (a module global, so that tests can replace it)
_train = train_or_refuse


def launch(
    missing: list[RunRequest],
    launcher: str | LaunchConfig,
    progress: Progress,
    max_workers: int | None = None,
    detach: bool = False,
) -> None:
    """Train ``missing`` with ``launcher`` (a name or a :class:`LaunchConfig`); every finished run updates
    ``progress``. Runs whose SLURM job is still queued or running are not launched again. ``detach``: submit
    them as one SLURM array and return at once (collected later: oscrepro.tables.slurm.collect)."""
    pool = resolve_launcher(launcher)
    if detach and pool.kind != "submitit_slurm":
        raise LauncherUnavailableError(
            f"--detach submits SLURM jobs; --launcher {pool} does not (use "
            f"submitit_slurm or a SLURM launcher config such as slurm_cpu)"
        )
    if missing:
        from oscrepro.tables.slurm import without_live_jobs

        missing = without_live_jobs(progress.key, missing)
    if not missing:
        if detach:
            print(f"[table {progress.key}] nothing to submit: every run is finished, queued or running", flush=True)
        return
    if pool.kind == "inprocess":
        for req in missing:
            progress.update(status=_train(req.cfg)["status"])
        return
    n_jobs = pool.params.get("n_jobs")  # joblib configs: -1 = one per core
    workers, threads = plan_workers(
        len(missing), cores(), max_workers or (int(n_jobs) if n_jobs and int(n_jobs) > 0 else None)
    )
    if pool.kind == "joblib":
        print(f"[table {progress.key}] {workers} worker process(es) x {threads} thread(s)", flush=True)
        _report(_joblib_results([_with_threads(r.cfg, threads) for r in missing], workers), progress)
        return
    if pool.kind == "submitit_local":
        print(f"[table {progress.key}] submitit local: {workers} job(s) at a time x {threads} thread(s)", flush=True)
        _report(_submitit_results(missing, pool, progress.key, threads, in_flight=workers), progress)
        return
    # SLURM: each job's runs use the CPUs it asks for (one when the config leaves cpus_per_task unset)
    threads = int(pool.params.get("cpus_per_task") or 1)
    if detach:
        jobs, folder = _submit_array(missing, pool, progress.key, threads)
        print(
            f"[table {progress.key}] submitted {len(jobs)} run(s) as SLURM array job {jobs[0].job_id.split('_')[0]} "
            f"(job folders: {folder}); the runs train without this process",
            flush=True,
        )
        return
    _report(_submitit_results(missing, pool, progress.key, threads), progress)


def _report(results: Iterable[dict[str, Any]], progress: Progress) -> None:
    for result in results:
        progress.update(status=result["status"])


def _joblib_results(cfgs: list[DictConfig], workers: int) -> Iterable[dict[str, Any]]:
    from joblib import Parallel, delayed

    # loky worker processes (spawned once, reused across runs); results arrive as runs finish
    return Parallel(n_jobs=workers, backend="loky", return_as="generator_unordered")(
        delayed(_train)(cfg) for cfg in cfgs
    )


def _executor(pool: LaunchConfig, results: Path, key: str) -> tuple[Any, str]:
    """A submitit executor configured from ``pool`` as hydra-submitit-launcher configures its own (base keys as
    they are, the rest prefixed with the cluster, ``max_num_timeout`` at construction); job folders under
    ``<results>/submitit/`` unless the config names a folder. Returns ``(executor, folder)``."""
    import submitit

    cluster = "slurm" if pool.kind == "submitit_slurm" else "local"
    params = {k: v for k, v in pool.params.items() if v is not None}
    folder = str(params.pop("submitit_folder", None) or Path(results) / "submitit" / "%j")
    init = {f"{cluster}_max_num_timeout": params.pop("max_num_timeout")} if "max_num_timeout" in params else {}
    params.setdefault("name", f"oscrepro-{key.replace('/', '-')}")
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster, **init)
    executor.update_parameters(**{k if k in SUBMITIT_BASE_KEYS else f"{cluster}_{k}": v for k, v in params.items()})
    return executor, folder


def _submit_array(reqs: list[RunRequest], pool: LaunchConfig, key: str, threads: int) -> tuple[list[Any], str]:
    """Submit ``reqs`` as one SLURM array of :class:`~oscrepro.tables.job.TrainJob` and write its ledger entry
    (so that a later build or ``--collect`` knows each run's job). Returns ``(jobs, folder)``."""
    from oscrepro.tables.slurm import record_submission

    executor, folder = _executor(pool, Path(str(reqs[0].cfg.paths.results_dir)), key)
    jobs = list(executor.map_array(TrainJob(), [_with_threads(r.cfg, threads) for r in reqs]))
    record_submission(key, reqs, jobs, folder, str(pool))
    return jobs, folder


def _submitit_results(
    reqs: list[RunRequest], pool: LaunchConfig, key: str, threads: int, in_flight: int | None = None
) -> Iterable[dict[str, Any]]:
    """Each run as a submitit job (SLURM: one job array; local: at most ``in_flight`` subprocesses at a time, since
    the local executor would start them all at once); results as jobs finish. A job that ends without a result
    (cancelled, timed out, out of memory, node failure) counts as ``failed``; on SLURM its run record names the
    job's state (oscrepro.tables.slurm.mark_ended)."""
    from oscrepro.tables.slurm import job_states, mark_ended

    slurm = pool.kind == "submitit_slurm"
    if slurm:
        jobs, folder = _submit_array(reqs, pool, key, threads)
        waiting, queue = list(zip(reqs, jobs, strict=True)), []
    else:
        executor, folder = _executor(pool, Path(str(reqs[0].cfg.paths.results_dir)), key)
        waiting, queue = [], list(reqs)
    while queue or waiting:
        while queue and len(waiting) < (in_flight or len(queue)):
            req = queue.pop(0)
            waiting.append((req, executor.submit(TrainJob(), _with_threads(req.cfg, threads))))
        states = job_states(j.job_id for _, j in waiting) if slurm else {}  # one sacct call per poll
        for req, job in [(r, j) for r, j in waiting if j.done()]:
            waiting.remove((req, job))
            try:
                yield job.result()
            except Exception as err:  # submitit's UncompletedJobError / FailedJobError: the job's log has the rest
                state = states.get(job.job_id) or job.state
                print(
                    f"[submitit] job {job.job_id} ({state}) ended without a result: "
                    f"{(str(err).splitlines() or [''])[0]}",
                    flush=True,
                )
                if slurm:
                    mark_ended(Path(str(req.run_dir)), job.job_id, state, folder)
                yield {"status": "failed"}
        time.sleep(0.5 if not slurm else 2)
