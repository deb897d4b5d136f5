"""Train one configured run and write its run record.

    python -m oscrepro.train experiment=fqo/sva                  # one run
    python -m oscrepro.train -m experiment=fqo/sva seed=0,1,2    # a Hydra multirun (any launcher)

Flow: compose config -> run id -> skip if finished -> seed -> data, model (backbone + attention factory), task
-> Lightning ``Trainer.fit`` (resuming from ``checkpoints/last.ckpt`` when it was saved at an epoch end; a mid-epoch
checkpoint is discarded and the run trains again from the start, because the data loaders are not resumable and
Lightning would replay the epoch from its first batch) -> ``Trainer.test`` -> run record. Every job
is isolated: a diverged run (NaN/inf loss, or a non-finite final val/test metric) is recorded as ``diverged`` with
its epoch, any other exception (a full disk included: the original error, never one raised while closing the
attempt) as ``failed`` with the traceback, and neither stops a sweep. A checkpoint carries its run's id; another
run's is refused (oscrepro.runs.resume), and a resumed run trains at the thread count it started with.
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and {"-h", "--help"} & set(sys.argv[1:]):  # help in a second: before torch and Lightning
    from oscrepro.utils.train_help import main as _help

    _help()

import logging
import math
import os
import shutil
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf

from oscrepro.data.base import model_dims
from oscrepro.data.integrity import DataIntegrityError, setup_data
from oscrepro.data.paths import DatasetNotFoundError
from oscrepro.runs import history
from oscrepro.runs.finish import close_attempt, failed_closing, start_record, write_record
from oscrepro.runs.loggers import run_loggers as _loggers
from oscrepro.runs.record import MECHANISM_GROUP, RunRecord, current_targets, unwritable_dir, with_mechanism
from oscrepro.runs.record import run_dir as run_dir_of
from oscrepro.runs.resume import CheckpointOwnerError, RngStateCheckpoint, RunIdCheckpoint, check_owner
from oscrepro.runs.sweep import Plan, outcome
from oscrepro.runs.validate import ConfigError, validate_config
from oscrepro.tasks.base import DivergedError
from oscrepro.utils.callbacks import EPOCH_TIME, EpochCheckpoint, EpochWallClock
from oscrepro.utils.console import report_run
from oscrepro.utils.quiet import expected_on_resume, quiet_third_party

log = logging.getLogger("oscrepro.train")

# Trainer-config keys the task applies itself (manual optimization, oscrepro.tasks.base), not Lightning.
LOOP_KEYS = ("gradient_clip_val", "gradient_clip_algorithm", "accumulate_grad_batches")
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


def cheap_cuda_check() -> None:
    """Importing Lightning sets ``PYTORCH_NVML_BASED_CUDA_CHECK=1``: ``torch.cuda.is_available()``, which AdamW's
    step calls every step, then loads NVML through ctypes each time (~30 µs, 2 % of an SVA step here). On a
    machine without a CUDA device the runtime check is as fork-safe (there is no device to initialise) and costs
    0.4 µs, so it is switched back there; with a GPU Lightning's setting stays."""
    if os.environ.get(NVML_CHECK) == "1" and not torch.cuda.is_available():
        os.environ[NVML_CHECK] = "0"


cheap_cuda_check()


def make_trainer(cfg: DictConfig, task: L.LightningModule, **kwargs: Any) -> L.Trainer:
    """``Trainer`` from ``cfg.trainer`` (plus ``kwargs``), with the loop keys (:data:`LOOP_KEYS`) given to the task,
    which optimizes manually: one place, so training, benchmarks and analyses run the same loop."""
    tcfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    loop = {k: tcfg.pop(k) for k in LOOP_KEYS if k in tcfg}
    loop.update({k: kwargs.pop(k) for k in LOOP_KEYS if k in kwargs})
    if loop.get("accumulate_grad_batches") is None:
        loop.pop("accumulate_grad_batches", None)
    task.configure_loop(**loop)
    return instantiate(tcfg, **kwargs)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Run (or skip, if finished) one configured training job; returns its metrics (``status`` included)."""
    quiet_third_party()  # here, not only in main: in-process table builds and joblib workers call train() too
    validate_config(cfg)  # one clear message, before a run id or a record exists
    run_dir = run_dir_of(cfg)
    if process_rank() != 0:  # a DDP worker process: rank 0 owns the record, its lock and the history
        return _run(cfg, None, run_dir, build(cfg, threads=resume_threads(cfg, run_dir)))
    record = RunRecord(run_dir)
    if record.finished():
        report_run(run_dir, record.status()["status"], record.metrics(), record.status().get("reason"), skipped=True)
        return {**record.metrics(), "status": record.status()["status"]}
    built = _build_or_error(cfg)  # a missing or corrupted dataset is refused here, before anything is written
    with record.lock() as waited:  # one process trains a run at a time; a second one waits, then reads it
        if waited and record.finished():
            log.info("run %s finished by another process (%s)", run_dir, record.status()["status"])
            return {**record.metrics(), "status": record.status()["status"]}
        return _run(cfg, record, run_dir, built)


# bad input: one message, no run record
REFUSALS = (DataIntegrityError, DatasetNotFoundError, CheckpointOwnerError)


def _build_or_error(cfg: DictConfig) -> Built | Exception:
    """:func:`build` (at the thread count :func:`resume_threads` gives), or the error it raised (recorded by
    :func:`_run` as a failed run); refusals propagate."""
    try:
        return build(cfg, threads=resume_threads(cfg, run_dir_of(cfg)))
    except REFUSALS:
        raise
    except Exception as err:  # noqa: BLE001 -- recorded with its traceback by _run
        return err


Built = tuple[L.LightningDataModule, torch.nn.Module, L.LightningModule]


def build(cfg: DictConfig, threads: int | None = None) -> Built:
    """Threads, seed, then data module (set up for fit), model (with the data's dims) and task, as every run does.
    A model with ``set_data_statistics(datamodule)`` reads the training-set statistics it standardises with here,
    once (they are buffers: ``load_run`` restores them from the checkpoint). ``threads``: the intra-op thread
    count, instead of ``cfg.torch_threads`` (a resumed run's recorded count: :func:`resume_threads`).

    Shared with the loop benchmark (``oscrepro.bench.loop``), so that it times exactly what a run trains. A run
    record's config (an analysis rebuilding a run's initialisation) is read at today's class paths
    (:func:`oscrepro.runs.record.current_targets`; a composed config is unchanged by it).
    """
    cfg = current_targets(cfg)
    if threads is None:
        threads = cfg.get("torch_threads")
    if threads is not None:
        torch.set_num_threads(int(threads))
    if cfg.seed is not None:  # seed 0 is a seed
        L.seed_everything(int(cfg.seed), workers=True)
    datamodule = setup_data(cfg.data)  # verified against the published digests (oscrepro.data.integrity)
    model = instantiate(cfg.model, **model_dims(datamodule))
    if hasattr(model, "set_data_statistics"):  # inputs standardised by training-set statistics (osciformer App. E.3)
        model.set_data_statistics(datamodule)
    return datamodule, model, instantiate(cfg.task, model=model)


def resume_threads(cfg: DictConfig, run_dir: Path) -> int | None:
    """The intra-op thread count a run trains at: ``cfg.torch_threads``, except for a run that resumes from its
    checkpoint, which trains at the count its first attempt started with (``torch_threads`` in its status.json):
    a reduction's last bits depend on the thread count, and a resumed run must equal the uninterrupted one (a
    table build may resume it with another worker count, hence another ``torch_threads``; not in the run id).
    None: leave the process's count as it is."""
    requested = cfg.get("torch_threads")
    requested = None if requested is None else int(requested)
    if not (run_dir / "checkpoints" / "last.ckpt").exists():
        return requested
    recorded = RunRecord(run_dir).status().get("torch_threads")
    if recorded is None:  # a record from before thread counts were recorded
        return requested
    if int(recorded) != (torch.get_num_threads() if requested is None else requested):
        log.info("run %s resumes at the %d intra-op thread(s) it started with (torch_threads=%s requested)",
                 run_dir.name, int(recorded), requested)
    return int(recorded)


def callbacks(run_dir: Path, wall_offset: float = 0.0) -> list[L.Callback]:
    """The callbacks of every run: a checkpoint at each epoch end (resume), per-epoch wall clock, and what makes a
    resume exact and safe (the global RNG states and the run's id in every checkpoint: oscrepro.runs.resume)."""
    # save_top_k=1 (no monitor: the newest epoch) so a checkpoint exists after every epoch; last.ckpt links to it.
    # (save_top_k=0 would write last.ckpt only when training ends: nothing to resume from.)
    return [EpochCheckpoint(dirpath=str(run_dir / "checkpoints"), save_last="link", save_top_k=1,
                            save_on_train_epoch_end=True),
            EpochWallClock(offset_s=wall_offset), RngStateCheckpoint(), RunIdCheckpoint(run_dir.name)]


def selection_checkpoint(cfg: DictConfig, run_dir: Path) -> EpochCheckpoint | None:
    """``select: {monitor: val/<metric>, mode: min | max}`` (optional, top-level; absent from most configs so that
    their run ids do not change): keep the epoch whose validation value is best and test that model instead of the
    last one (validation-based model selection; test data never selects). None when the config has no ``select``."""
    sel = cfg.get("select")
    if not sel:
        return None
    return EpochCheckpoint(dirpath=str(run_dir / "checkpoints" / "best"), monitor=str(sel.monitor), mode=str(sel.mode),
                           save_top_k=1, filename="best-{epoch}", auto_insert_metric_name=False)


def read_checkpoint(ckpt_path: Path) -> dict[str, Any]:
    """A run's checkpoint, loaded with ``weights_only=True``: tensors and plain containers only, so a file whose
    pickle would run code is refused before anything runs (Lightning's own resume load is as strict)."""
    try:
        return torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # UnpicklingError and RuntimeError from the restricted unpickler, or a corrupt file
        raise RuntimeError(f"checkpoint {ckpt_path} refused: it does not load as tensors and plain data "
                           f"(weights_only=True): {type(err).__name__}: {(str(err).splitlines() or [''])[0]}. This "
                           f"framework's checkpoints always load so; delete {ckpt_path.parent} to train the run from "
                           f"the start") from None


def check_checkpoint_owner(run_dir: Path) -> None:
    """Before a run resumes: raise :class:`~oscrepro.runs.resume.CheckpointOwnerError` (a refusal, before
    anything is written) when its ``checkpoints/last.ckpt`` carries another run's id or none, or does not load as
    tensors and plain data (garbage, truncated, a pickle that would run code); another run's checkpoint of the
    same shapes would otherwise be resumed silently and recorded under this run's id."""
    last = run_dir / "checkpoints" / "last.ckpt"
    if not last.exists():
        return
    try:
        ckpt = read_checkpoint(last)
    except RuntimeError as err:  # not loadable as plain data (garbage, truncated, a pickle that would run code)
        raise CheckpointOwnerError(str(err)) from None
    check_owner(ckpt, run_dir.name, last)


def mid_epoch(ckpt_path: Path) -> bool:
    """True when a checkpoint was saved inside an epoch (a step-based run's validation checkpoint). Our loaders
    are not resumable (Lightning would restart the epoch's data order from its first batch), so resuming from it
    would not give the uninterrupted run's result; an epoch-end checkpoint resumes exactly."""
    ckpt = read_checkpoint(ckpt_path)
    progress = ckpt.get("loops", {}).get("fit_loop", {}).get("epoch_loop.batch_progress", {})
    return bool(progress) and progress["current"]["completed"] > 0 and not progress.get("is_last_batch", False)


def resumes_exactly(cfg: DictConfig, ckpt_path: Path) -> bool:
    """Whether resuming from ``ckpt_path`` gives the uninterrupted run's result bit for bit: an epoch-end checkpoint
    of a run validated at epoch ends (tests/integration/test_exact_resume.py). Not a mid-epoch checkpoint (records
    from before epoch-end-only checkpoints), and not a run validated inside epochs (``val_check_interval`` in
    steps or a fraction): Lightning restores such a run's loop one batch off at an epoch boundary (measured: the
    resumed run logged the next epoch's first step under the previous epoch and diverged from the next step on)."""
    interval = cfg.trainer.get("val_check_interval")
    return not mid_epoch(ckpt_path) and (interval is None or (isinstance(interval, float) and interval == 1.0))


def process_rank() -> int:
    """This process's global rank in a multi-process launch, else 0: Lightning's DDP launcher re-runs the command
    with ``LOCAL_RANK`` / ``NODE_RANK`` set, torchrun sets ``RANK``, SLURM ``SLURM_PROCID`` (per task)."""
    for var in ("RANK", "SLURM_PROCID", "LOCAL_RANK", "NODE_RANK"):
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) != 0:
            return int(value)
    return 0


def _fit_and_test(cfg: DictConfig, run_dir: Path, rank0: bool, loggers: list[Logger], built: Built | Exception
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build, fit (resuming from an exact checkpoint) and test one run: (metrics, record extras); ``loggers`` gets
    the run's loggers (the caller finishes them, also after an error). Rank 0 alone prepares the run dir (drops a
    checkpoint that would not resume exactly, sets the history aside) before ``fit`` starts the other ranks."""
    if isinstance(built, Exception):
        raise built
    datamodule, model, task = built
    ckpt_dir = run_dir / "checkpoints"
    last = ckpt_dir / "last.ckpt"
    wall_offset = 0.0
    if rank0 and last.exists() and not resumes_exactly(cfg, last):  # start the run again (resumes_exactly)
        log.warning("run %s: its checkpoint would not resume to the uninterrupted run's result (mid-epoch, or "
                    "validation inside epochs); training it again from the start", run_dir.name)
        shutil.rmtree(ckpt_dir)
        shutil.rmtree(run_dir / "logs", ignore_errors=True)
    if rank0 and not last.exists() and (run_dir / "logs").is_dir():  # an attempt stopped before its first checkpoint
        log.info("run %s: an earlier attempt left no checkpoint; training it from the start", run_dir.name)
        shutil.rmtree(run_dir / "logs")  # its partial CSV history (Lightning would warn, then overwrite it)
    if rank0 and last.exists():  # resume: keep the history logged up to the checkpoint (the CSV logger deletes it)
        ckpt_epoch = int(read_checkpoint(last)["epoch"])
        wall_offset = history.set_aside(run_dir / "logs", ckpt_epoch)
        log.info("resuming %s after epoch %d", run_dir.name, ckpt_epoch)
    loggers.extend(_loggers(cfg, run_dir))
    best = selection_checkpoint(cfg, run_dir)
    trainer = make_trainer(cfg, task, logger=loggers, default_root_dir=str(run_dir),
                           callbacks=callbacks(run_dir, wall_offset) + ([best] if best else []))
    with expected_on_resume(last.exists()):  # Lightning's "dir exists and is not empty": our own checkpoint
        trainer.fit(task, datamodule=datamodule, ckpt_path=str(last) if last.exists() else None)
    val = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(("val/", EPOCH_TIME))}
    selected = {}
    if best is not None:  # test the best validation epoch's weights (read by Lightning with weights_only)
        selected = {"select/epoch": int(read_checkpoint(Path(best.best_model_path))["epoch"]),
                    "select/score": float(best.best_model_score)}
    test = trainer.test(task, datamodule=datamodule, verbose=False,
                        ckpt_path=best.best_model_path if best is not None else None)[0]
    metrics = {**val, **{k: float(v) for k, v in test.items()}, **selected,
               "n_params": sum(p.numel() for p in model.parameters()), "epochs": trainer.current_epoch}
    if trainer.world_size > 1:
        metrics["world_size"] = trainer.world_size
    check_final_metrics(metrics, run_dir, trainer)
    extra = {"data_source": datamodule.source, "data_fingerprint": datamodule.fingerprint}
    return metrics, extra


class NonFiniteMetricsError(DivergedError):
    """A run whose training loss stayed finite but whose final validation or test metrics are not (an lr so large
    that the weights overflow after the last loss was computed): recorded ``diverged``, as a non-finite loss is."""

    def __init__(self, values: dict[str, float], epoch: int, step: int) -> None:
        listed = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
        RuntimeError.__init__(self, f"non-finite final metric(s) {listed}, first non-finite at epoch {epoch} "
                                    f"(the training loss stayed finite)")
        self.epoch, self.step, self.loss, self.values = epoch, step, math.nan, values


def check_final_metrics(metrics: dict[str, Any], run_dir: Path, trainer: L.Trainer) -> None:
    """Raise :class:`NonFiniteMetricsError` if a final ``val/*`` or ``test/*`` metric is NaN or infinite: such a
    record is not ``ok`` (a table would average invented numbers). Its epoch: the first whose logged validation
    value is not finite (history), else the last epoch trained."""
    bad = {k: v for k, v in metrics.items() if k.startswith(("val/", "test/")) and not math.isfinite(v)}
    if not bad:
        return
    val_keys = [k for k in bad if k.startswith("val/")]
    epoch = history.first_non_finite_epoch(run_dir / "logs", val_keys) if val_keys else None
    raise NonFiniteMetricsError(bad, max(0, trainer.current_epoch - 1) if epoch is None else epoch,
                                trainer.global_step)


def _run(cfg: DictConfig, record: RunRecord | None, run_dir: Path, built: Built | Exception) -> dict[str, Any]:
    """Train, test and record one run (the caller holds the run's lock). ``record=None``: a DDP worker (rank > 0)
    that trains and tests in step with rank 0 and writes nothing; its errors propagate (rank 0 records the run)."""
    if record is None:
        return {**_fit_and_test(cfg, run_dir, rank0=False, loggers=[], built=built)[0], "status": "ok"}
    check_checkpoint_owner(run_dir)  # another run's checkpoint: refused before anything is written
    start_record(record, cfg)
    t0 = time.time()
    loggers: list[Logger] = []
    status, metrics, extra = "failed", {}, {}
    try:
        metrics, extra = _fit_and_test(cfg, run_dir, rank0=True, loggers=loggers, built=built)
        status = "ok"
    except DivergedError as err:
        status, metrics = "diverged", {"diverged_epoch": err.epoch, "diverged_step": err.step}
        extra = {"reason": str(err)}
        log.warning("run %s diverged: %s", run_dir.name, err)
    except Exception as err:  # recorded, not hidden; the sweep goes on
        extra = {"reason": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        log.error("run %s failed:\n%s", run_dir.name, extra["traceback"])
    finally:  # also after an interrupt; an error here never replaces the run's own
        closing = close_attempt(run_dir, loggers)
    if closing is not None:
        status, extra = failed_closing(status, extra, closing)
    metrics["train_wall_time_s"] = round(time.time() - t0, 2)
    status = write_record(record, status, metrics, extra)
    report_run(run_dir, status, metrics, extra.get("reason"))  # the run's numbers, on one line
    return {**metrics, "status": status}


EXIT_REFUSED = 2  # bad input (config, unknown key, data, checkpoint): one message, nothing run or written
EXIT_FAILED = 1  # a run that failed, or a multirun with a job not ok: the run records say why


def refuse(message: str) -> NoReturn:
    """Print ``message`` to stderr (one line per problem, no traceback) and exit with :data:`EXIT_REFUSED`."""
    print(message, file=sys.stderr)
    raise SystemExit(EXIT_REFUSED)


def checked_jobs(argv: list[str]) -> tuple[Plan, list[DictConfig]]:
    """Every job of a train command line composed and validated before Hydra starts (so before Hydra's output dir,
    a run id or a record exists): ``(plan, each job's config)``. A key Hydra does not know or an override it cannot
    compose is refused at once; bad values of every job are refused together, in one message, each problem once
    (prefixed by the job, ``job seed=-1:``, when not every job has it). A sweeper other than Hydra's basic one
    decides its jobs as it goes: then the first values are checked (each job checks itself in :func:`train`)."""
    from oscrepro.runs import sweep
    from oscrepro.runs.compose import CONF_DIR, compose_run, config_groups
    from oscrepro.runs.validate import config_problems, invalid_config_message
    from oscrepro.utils.suggest import compose_job, one_line, one_value_each

    overrides = list(sweep.cli_args(argv).overrides)
    groups = config_groups()
    try:
        plan = sweep.plan(argv, CONF_DIR)
    except HydraException as err:  # the first values do not compose, or the sweep does not parse
        refuse(f"oscrepro.train: {compose_job(overrides, compose_run, groups)[1] or one_line(str(err))}")
    if not plan.runs:
        return plan, []
    jobs = plan.jobs if plan.jobs is not None else [one_value_each(overrides)]
    swept = sweep.swept_keys(jobs)
    configs: list[DictConfig] = []
    seen: dict[str, list[str]] = {}  # problem -> the jobs that have it
    for job in jobs:
        label = sweep.job_label(job, swept)
        cfg, message = compose_job(job, compose_run, groups)
        if cfg is None:
            refuse(f"oscrepro.train: {f'job {label}: ' if len(jobs) > 1 else ''}{message}")
        configs.append(cfg)
        for problem in config_problems(cfg):
            seen.setdefault(problem, []).append(label)
    if seen:
        refuse(invalid_config_message([p if len(labels) == len(jobs) else f"job {', '.join(labels)}: {p}"
                                       for p, labels in seen.items()]))
    for runs_dir in sorted({str(cfg.paths.runs_dir) for cfg in configs}):
        why = unwritable_dir(Path(runs_dir))
        if why is not None:
            refuse(f"oscrepro.train: runs dir {why}; set paths.results_dir=<a folder you can write> (or "
                   f"OSCREPRO_RESULTS_DIR), nothing was run or written")
    return plan, configs


def drop_hydra_output(cfg: DictConfig) -> None:
    """Remove the job's Hydra output dir (``.hydra/`` and its log: all Hydra writes before the job runs) and the
    parents it created under the results dir, so that a job refused inside :func:`train` (a bad data dir, another
    run's checkpoint) leaves nothing written. A dir holding anything else is kept."""
    out = Path(HydraConfig.get().runtime.output_dir)
    if not out.is_dir() or any(p.name != ".hydra" and p.suffix != ".log" for p in out.iterdir()):
        return
    shutil.rmtree(out, ignore_errors=True)
    stop = Path(str(cfg.paths.results_dir)).resolve()
    parent = out.parent.resolve()
    while parent != stop and stop in parent.parents and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Hydra entry point; returns the configured objective so Hydra sweepers can optimize it. A single run that
    is refused exits :data:`EXIT_REFUSED`, one that fails :data:`EXIT_FAILED` naming its record; a multirun job is
    isolated (a refused one is logged and the sweep goes on; :func:`cli` summarises every job at the end)."""
    if cfg.get("mechanism") is None:  # as the table engine's compose_run sets it
        with_mechanism(cfg, HydraConfig.get().runtime.choices.get(MECHANISM_GROUP))
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        result = train(cfg)
    except (ConfigError, *REFUSALS) as err:
        drop_hydra_output(cfg)  # Hydra wrote its job dir before train() could refuse: leave nothing behind
        if not multirun:
            refuse(str(err))
        log.error("job refused, nothing was run or written for it: %s", err)
        return None
    if result["status"] == "failed" and not multirun:
        print(f"run failed; see {run_dir_of(cfg)}/status.json", file=sys.stderr)
        raise SystemExit(EXIT_FAILED)
    objective = cfg.get("objective")
    return result.get(objective) if objective else None


def cli() -> None:
    """``python -m oscrepro.train``: every job checked before Hydra starts (:func:`checked_jobs`: a misspelled
    key gets the closest valid key; bad values, shapes and mechanism/backbone mismatches one message; exit
    :data:`EXIT_REFUSED`, nothing written); then Hydra's own entry point. A multirun ends with one line that
    counts its jobs by status, read from their run records (whatever the launcher), and exits :data:`EXIT_FAILED`
    when any job is not ``ok``."""
    quiet_third_party()  # before Hydra's launcher logs (the joblib launcher's settings repr: oscrepro.utils.quiet)
    plan, configs = checked_jobs(sys.argv[1:])
    main()
    if plan.multirun and plan.runs and plan.jobs is not None:
        ok, line = outcome(configs, plan.jobs)
        print(line, file=sys.stdout if ok else sys.stderr)
        if not ok:
            raise SystemExit(EXIT_FAILED)


if __name__ == "__main__":
    cli()
