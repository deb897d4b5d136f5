"""Silence known third-party console noise, in one place, so a run shows progress, results and real problems.

Every entry below names one message, the package that prints it, why it prints it, and what would make it go away;
nothing here is a blanket ignore. Warnings are matched on message + category + emitting module, and loggers are
raised to WARNING only where the logger's INFO lines are device/advert chatter, so our own warnings, Lightning's
real warnings (they go through :mod:`warnings`, not these loggers), data errors and divergence still show.

Noise whose cause is in this repository is fixed there, not filtered here: Hydra's "validated against ConfigStore
schema with the same name" deprecation came from ``conf/hydra/launcher/joblib.yaml`` shadowing the joblib plugin's
own config and is gone since that file became ``joblib_2jobs.yaml``, which extends the plugin config explicitly.

Set ``OSCREPRO_THIRD_PARTY_NOISE=1`` to see everything again (e.g. when reporting an upstream bug).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

NOISE_ENV = "OSCREPRO_THIRD_PARTY_NOISE"


@dataclass(frozen=True)
class WarningFilter:
    """One ``warnings.filterwarnings("ignore", ...)`` entry: regexes are matched from the start of the text."""

    message: str  # regex on the warning text
    category: type[Warning]
    module: str  # regex on the emitting module's ``__name__`` (the frame the warning is attributed to)
    cause: str  # upstream package, why it warns, what would make it go away


WARNING_FILTERS: tuple[WarningFilter, ...] = (
    # torch 2.11 deprecated ``torch.utils._pytree.LeafSpec`` (``typing_extensions.deprecated`` on the class, so every
    # ``LeafSpec()`` warns) in favour of ``treespec_leaf()`` / ``TreeSpec.is_leaf()``. Lightning 2.6.x's
    # ``lightning/pytorch/utilities/_pytree.py::_tree_flatten`` still builds ``LeafSpec()`` while moving batches and
    # results, so it fires once per run (Lightning-AI/pytorch-lightning#21326). Goes away with a Lightning release
    # whose ``_pytree.py`` uses ``treespec_leaf()``; the pin lives in pyproject.toml.
    WarningFilter(
        message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        category=FutureWarning,
        module=r"lightning\.pytorch\.utilities\._pytree\Z",
        cause="torch 2.11 deprecated pytree LeafSpec; Lightning 2.6 _pytree._tree_flatten still instantiates it",
    ),
    # torch 2.11 deprecated TorchScript's ``torch.jit.script_method``, but torch's own ``torch/utils/mkldnn.py``
    # still decorates the methods of its MkldnnLinear/Conv/BatchNorm modules with it; ``torch._inductor`` imports
    # that module on the first ``torch.compile`` of a process (the fqo ODE solver's fused error norm), giving 14
    # DeprecationWarnings (shown under pytest / ``-W default``; Python's default filters hide them). torch warns with
    # stacklevel=1, so the module is always torch.jit._script whoever calls it: oscrepro must not use script_method
    # itself (tests/unit/utils/test_quiet.py checks). Goes away when PyTorch ports torch/utils/mkldnn.py.
    WarningFilter(
        message=r"`torch\.jit\.script_method` is deprecated",
        category=DeprecationWarning,
        module=r"torch\.jit\._script\Z",
        cause="torch 2.11 deprecated jit.script_method; torch/utils/mkldnn.py (imported by inductor) still uses it",
    ),
    # Lightning's fit loop warns when an epoch has fewer training batches than ``log_every_n_steps`` (fit_loop.py
    # ``setup_data``): then no per-step ``train/loss_step`` lands inside the epoch. Short-epoch recipes (UEA stand-ins:
    # 13-14 batches) lose nothing that matters: ``train/loss_epoch`` is accumulated by oscrepro.tasks.base on every
    # batch and logged at each epoch end, so history.csv has the training loss per epoch either way. Would go away
    # if the budgets of every short-epoch data set lowered ``trainer.log_every_n_steps`` (a hashed key: new run ids).
    WarningFilter(
        message=r"The number of training batches \(\d+\) is smaller than the logging interval",
        category=UserWarning,
        module=r"lightning\.pytorch\.loops\.fit_loop\Z",
        cause="Lightning warns when an epoch is shorter than log_every_n_steps; train/loss_epoch is logged anyway",
    ),
    # Lightning's data connector (``_check_dataloader_iterable``/``_worker_check``) suggests ``num_workers=<cores-1>``
    # for every loader with fewer workers than that, once per loader and run (seen on the 16-core GPU machine). Our
    # data modules serve windows from tensors already in memory, where worker processes cost more than they save
    # (``num_workers: 0`` in conf/data, a hashed key). Would go away only with worker processes.
    WarningFilter(
        message=r"The '\w+_dataloader' does not have many workers which may be a bottleneck",
        category=UserWarning,
        module=r"lightning\.pytorch\.trainer\.connectors\.data_connector\Z",
        cause="Lightning suggests DataLoader workers; oscrepro's loaders read in-memory tensors (num_workers 0)",
    ),
)


# Only while a run resumes from its own checkpoint (see :func:`expected_on_resume`), never globally: a run directory is
# keyed by the config hash and locked while it trains, so on resume its checkpoints/ and logs/ hold our own previous
# attempt, which oscrepro.train resumes from (last.ckpt) and whose history it has already set aside.
RESUME_FILTERS: tuple[WarningFilter, ...] = (
    # Lightning's ModelCheckpoint.setup warns whenever its dirpath is non-empty at fit start, resume or not
    # (callbacks/model_checkpoint.py ``__warn_if_dir_not_empty``); resuming into the run's own checkpoints/ always
    # trips it. Would go away if Lightning skipped the check when ``fit(ckpt_path=...)`` points into that dir.
    WarningFilter(
        message=r"Checkpoint directory .*checkpoints exists and is not empty\.",
        category=UserWarning,
        module=r"lightning\.pytorch\.callbacks\.model_checkpoint\Z",
        cause="Lightning ModelCheckpoint warns on any non-empty dirpath, including the dir it resumes from",
    ),
    # Lightning's CSVLogger warns that "previous log files ... will be deleted" when logs/ is non-empty
    # (fabric/loggers/csv_logs.py ``_check_log_dir_exists``); it only ever deletes metrics.csv, which
    # oscrepro.runs.history.set_aside has already folded into metrics.before_resume.csv, so nothing is lost.
    # Would go away if set_aside kept the earlier rows outside logs/.
    WarningFilter(
        message=r"Experiment logs directory .*logs exists and is not empty\.",
        category=UserWarning,
        module=r"lightning\.fabric\.loggers\.csv_logs\Z",
        cause="Lightning CSVLogger warns on a non-empty log dir; on resume it holds our own set-aside history",
    ),
)


# Only outside a SLURM allocation (``SLURM_JOB_ID`` unset: see :func:`outside_slurm`); inside one the hint is real.
OUTSIDE_SLURM_FILTERS: tuple[WarningFilter, ...] = (
    # Lightning's ``SLURMEnvironment._validate_srun_used`` (fabric/plugins/environments/slurm.py) warns, once per
    # Trainer and so once per run, whenever an ``srun`` binary is on PATH and the process was not started by srun:
    # on a login node or a workstation with the SLURM client installed, where a local run is meant. Inside an
    # allocation (``SLURM_JOB_ID`` set) a missing srun makes multi-GPU jobs hang, so there the hint still shows. The
    # category is Lightning's ``PossibleUserWarning``, a UserWarning subclass (matched as UserWarning, so this module
    # imports no Lightning). Would go away if Lightning checked for an allocation before suggesting srun.
    WarningFilter(
        message=r"The `srun` command is available on your system but is not used\.",
        category=UserWarning,
        module=r"lightning\.fabric\.plugins\.environments\.slurm\Z",
        cause="Lightning suggests srun whenever the binary exists; outside an allocation a local run is intended",
    ),
)


def outside_slurm() -> bool:
    """True when this process is not inside a SLURM allocation (no ``SLURM_JOB_ID``)."""
    return not os.environ.get("SLURM_JOB_ID")


@dataclass(frozen=True)
class QuietLogger:
    """A third-party logger whose INFO lines are chatter; raised to WARNING (its warnings/errors still show)."""

    name: str
    cause: str


QUIET_LOGGERS: tuple[QuietLogger, ...] = (
    # Lightning's ``rank_zero_info`` (lightning_utilities, re-pointed to this logger by lightning.pytorch) prints, per
    # Trainer, "GPU available: False, used: False", "TPU available: False, using: 0 TPU cores" (trainer/setup.py
    # ``_log_device_info``), the "💡 Tip: ... try installing [litlogger]" advert (logger_connector.py, printed
    # whenever no LitLogger is attached) and "`Trainer.fit` stopped: ... reached". Lightning has no switch for these
    # short of this logger's level; device problems still show: "GPU available but not used" is a
    # ``rank_zero_warn`` (a UserWarning, not a log record).
    QuietLogger("lightning.pytorch.utilities.rank_zero",
                "Lightning rank_zero_info: GPU/TPU availability lines, litlogger tip, fit-stopped line"),
    # ``lightning.fabric.utilities.seed.seed_everything`` logs "Seed set to <n>" at INFO on every run; the seed is in
    # the run's config.yaml. Warnings about the seed (out of bounds, none given) are ``rank_zero_warn``: still shown.
    QuietLogger("lightning.fabric.utilities.seed", "Lightning seed_everything: 'Seed set to <n>' per run"),
    # On a GPU, ``lightning.pytorch.accelerators.cuda`` logs "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]" per run.
    QuietLogger("lightning.pytorch.accelerators.cuda", "Lightning CUDA accelerator: LOCAL_RANK/CUDA_VISIBLE_DEVICES"),
)


@dataclass(frozen=True)
class LogFilter:
    """One message of a third-party logger, dropped by a ``logging.Filter`` (the logger's other records still show)."""

    name: str
    message: str  # regex matched from the start of the formatted message
    cause: str


LOG_FILTERS: tuple[LogFilter, ...] = (
    # The first ``torch.compile`` of a process (fsn fused stages, the fqo/SSA tiles, the bounded update) imports
    # ``torch.utils.cpp_extension``, which logs a WARNING when CUDA_HOME is set but no CUDA runtime is loaded (every
    # CPU machine with the CUDA wheel): "No CUDA runtime is found, using CUDA_HOME='/usr/local'". The CPU kernels do
    # not need CUDA. Would go away with a CPU-only torch wheel or if torch logged it only when building CUDA code.
    LogFilter("torch.utils.cpp_extension", r"No CUDA runtime is found",
              "torch's cpp_extension warns on CPU machines with CUDA_HOME set; compiled CPU kernels need no CUDA"),
    # hydra-joblib-launcher's ``launch`` (hydra_plugins/hydra_joblib_launcher/_core.py) logs at INFO the whole
    # ``Joblib.Parallel(n_jobs=2,backend=loky,prefer=processes,require=None,verbose=0,timeout=None,pre_dispatch=
    # 2*n_jobs,batch_size=auto,temp_folder=None,max_nbytes=None,mmap_mode=r) is launching N jobs`` before every
    # sweep: the launcher's settings repr, not progress (its next lines, the sweep dir and each job's overrides,
    # still show). Would go away if the plugin logged it at DEBUG.
    LogFilter("hydra_plugins.hydra_joblib_launcher._core", r"Joblib\.Parallel\(.*\) is launching \d+ jobs",
              "Hydra's joblib launcher logs its joblib.Parallel settings repr at INFO before each sweep"),
)


@dataclass(frozen=True)
class EnvDefault:
    """An environment variable a C++ library reads at start-up to pick its log level; set only when unset."""

    name: str
    value: str
    cause: str


ENV_DEFAULTS: tuple[EnvDefault, ...] = (
    # The CPU peak-memory measurement of the benchmarks (oscrepro.bench.harness: ssa Table 1, coupledqk overhead)
    # runs one pass under ``torch.profiler`` (kineto). With the CUDA wheel on a machine without a GPU driver,
    # kineto's ``DeviceProperties.cpp`` asks for the GPU count when the profiler starts and logs
    # "ERROR:<date> <pid> DeviceProperties.cpp:48] gpuGetDeviceCount failed with code 35" (cudaErrorInsufficientDriver)
    # from C++, to stderr, once per process. Only CPU events are recorded, which need no GPU. Kineto's own switch is
    # ``KINETO_LOG_LEVEL`` (0 verbose ... 4 error; 5: none), read when the profiler first starts; oscrepro uses the
    # profiler for nothing else. Would go away with a CPU-only torch wheel or if kineto skipped GPU queries for
    # CPU-only activities.
    EnvDefault("KINETO_LOG_LEVEL", "5",
               "kineto (torch.profiler) logs gpuGetDeviceCount code 35 on CUDA wheels without a driver"),
)


class _DropMatching(logging.Filter):
    def __init__(self, pattern: str) -> None:
        super().__init__()
        self.pattern = re.compile(pattern)

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.match(record.getMessage())


def _noisy() -> bool:
    return os.environ.get(NOISE_ENV, "0") not in ("", "0")


def _ignore(filters: tuple[WarningFilter, ...]) -> None:
    for f in filters:
        # filterwarnings drops an identical existing entry before inserting, so repeated calls do not pile up
        warnings.filterwarnings("ignore", message=f.message, category=f.category, module=f.module)


def quiet_third_party() -> None:
    """Install :data:`WARNING_FILTERS` (and :data:`OUTSIDE_SLURM_FILTERS` outside a SLURM allocation) and
    :data:`LOG_FILTERS`, set :data:`ENV_DEFAULTS` that are unset, raise :data:`QUIET_LOGGERS` to WARNING (idempotent;
    no-op when ``OSCREPRO_THIRD_PARTY_NOISE`` is set to a non-empty value other than ``0``)."""
    if _noisy():
        return
    _ignore(WARNING_FILTERS)
    if outside_slurm():
        _ignore(OUTSIDE_SLURM_FILTERS)
    for env in ENV_DEFAULTS:
        os.environ.setdefault(env.name, env.value)
    for lf in LOG_FILTERS:
        logger = logging.getLogger(lf.name)
        if not any(isinstance(f, _DropMatching) and f.pattern.pattern == lf.message for f in logger.filters):
            logger.addFilter(_DropMatching(lf.message))
    for q in QUIET_LOGGERS:
        logger = logging.getLogger(q.name)
        if logger.getEffectiveLevel() < logging.WARNING:
            logger.setLevel(logging.WARNING)


@contextlib.contextmanager
def expected_on_resume(resuming: bool) -> Iterator[None]:
    """Around ``Trainer.fit``: while ``resuming`` a run from its own ``last.ckpt``, ignore :data:`RESUME_FILTERS`
    (restored on exit); otherwise, or with ``OSCREPRO_THIRD_PARTY_NOISE`` set, change nothing."""
    if not resuming or _noisy():
        yield
        return
    with warnings.catch_warnings():
        _ignore(RESUME_FILTERS)
        yield
