"""A Hydra multirun's jobs, known before the first starts, and their outcome, read back after the last ends.

``python -m oscrepro.train -m seed=0,-1`` used to train job 0 and only then refuse job 1 ("nothing was run or
written", though something was), and a sweep whose every job failed exited 0. :func:`plan` expands the
command line into each job's overrides the way Hydra's basic sweeper does (Hydra's own override parser and
``BasicSweeper.split_arguments``, with ``hydra.sweeper.params`` first), so that the train CLI composes and
validates every job before Hydra writes anything; :func:`outcome` reads each job's run record after Hydra returns
(the records are where every launcher, in-process, joblib or submitit, leaves its result) and gives the summary
(each job's metrics, then one line of counts) and whether the sweep succeeded.
"""

from __future__ import annotations

import argparse
import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import get_args_parser
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.initialize import get_gh_backup, restore_gh_from_backup
from omegaconf import DictConfig

from oscrepro.runs.record import RunRecord, run_dir
from oscrepro.utils.console import job_lines
from oscrepro.utils.suggest import one_value_each

BASIC_SWEEPER = f"{BasicSweeper.__module__}.{BasicSweeper.__name__}"
# Hydra commands that run no job (they print help, a config or information): nothing to check or summarise.
NO_JOB = ("help", "hydra_help", "cfg", "info", "shell_completion")


@contextlib.contextmanager
def isolated_hydra(conf_dir: Path) -> Iterator[None]:
    """Hydra initialised on ``conf_dir`` for the block, and the global Hydra state as it was afterwards: this may
    run inside a Hydra app (a job validating its config) or a table build, whose own state must survive."""
    saved = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            yield
    finally:
        restore_gh_from_backup(saved)


@dataclass(frozen=True)
class Plan:
    """What a train command line will run: ``jobs`` (each job's overrides; None when a sweeper other than the basic
    one decides them as it goes) and whether it is a multirun. ``runs`` is False for Hydra commands that run no
    job (``--cfg``, ``--help``, ...) or read another config (``-cn``, ``-cp``, ``-cd``, ``--experimental-rerun``)."""

    jobs: list[list[str]] | None
    multirun: bool
    runs: bool


def cli_args(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed by Hydra's own argument parser (the overrides, ``--multirun``, ``--cfg``, ...)."""
    return get_args_parser().parse_args(list(argv))


def plan(argv: Sequence[str], conf_dir: Path) -> Plan:
    """Expand ``argv`` (a train command line) into its jobs (module docstring). Raises Hydra's own error
    (``OverrideParseException``, ``ConfigCompositionException``, ``HydraException``) when the overrides do not
    parse or the sweep is not one the basic sweeper runs."""
    args = cli_args(argv)
    if any(getattr(args, flag) for flag in NO_JOB) or args.config_name or args.config_path or args.config_dir \
            or args.experimental_rerun:
        return Plan(jobs=None, multirun=bool(args.multirun), runs=False)
    overrides = list(args.overrides)
    with isolated_hydra(conf_dir):
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        parsed = parser.parse_overrides(overrides)
        multirun = args.multirun or any(o.get_key_element() == "hydra.mode" and o.value() == "MULTIRUN"
                                        for o in parsed)
        if not multirun:
            return Plan(jobs=[overrides], multirun=False, runs=True)
        sweeper = compose(config_name="train", overrides=one_value_each(overrides), return_hydra_config=True
                          ).hydra.sweeper
        if sweeper.get("_target_") != BASIC_SWEEPER:
            return Plan(jobs=None, multirun=True, runs=True)
        params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
        (batch,) = BasicSweeper.split_arguments(parser.parse_overrides(params + overrides), None)
    return Plan(jobs=[list(job) for job in batch], multirun=True, runs=True)


def outcome(configs: Sequence[DictConfig], jobs: Sequence[Sequence[str]] | None = None) -> tuple[bool, str]:
    """(every job ``ok``, the sweep's summary) from the run record of each job's config: one line per job with its
    final val/test metrics or why it is not ok (:func:`oscrepro.utils.console.job_lines`; labelled by the overrides
    that differ between ``jobs``, when given), then one line that counts ok / failed / diverged, jobs without a
    finished record (refused, or killed), and the records of those that are not ``ok``."""
    statuses, records = [], []
    for cfg in configs:
        record = RunRecord(run_dir(cfg))
        status = record.status()
        state = status.get("status")
        statuses.append(state if state in ("ok", "failed", "diverged") else "unfinished")
        records.append((record.dir, statuses[-1], record.metrics(), status.get("reason")))
    swept = swept_keys(jobs) if jobs is not None else []
    labels = ([job_label(job, swept) for job in jobs] if jobs is not None and len(jobs) == len(configs)
              else [f"job {i}" for i in range(len(configs))])
    counts = Counter(statuses)
    line = (f"multirun: {len(statuses)} job(s): {counts['ok']} ok, {counts['failed']} failed, "
            f"{counts['diverged']} diverged")
    if counts["unfinished"]:
        line += f", {counts['unfinished']} without a finished record (refused or stopped: see the job logs)"
    bad = [f"{run_dir(cfg)} ({status})" for cfg, status in zip(configs, statuses, strict=True) if status != "ok"]
    if bad:
        line += f"; not ok: {', '.join(bad)}"
    return not bad, "\n".join([*job_lines(labels, records), line])


def job_label(overrides: Sequence[str], swept: Sequence[str]) -> str:
    """A job named by the overrides that differ between jobs (``seed=-1``), for messages about one job."""
    mine = [o for o in overrides if o.split("=", 1)[0] in swept]
    return " ".join(mine) if mine else " ".join(overrides)


def swept_keys(jobs: Sequence[Sequence[str]]) -> list[str]:
    """The override keys whose value differs between jobs."""
    values: dict[str, set[str]] = {}
    for job in jobs:
        for o in job:
            key, _, value = o.partition("=")
            values.setdefault(key, set()).add(value)
    return [k for k, v in values.items() if len(v) > 1]

