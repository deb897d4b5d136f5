"""The loggers of one run: Lightning's CSV logger (always: history.csv comes from it) and those of ``cfg.logger``.

A wandb run is the run record's twin on a dashboard:

* its config is the resolved config the run id hashes (:func:`~oscrepro.runs.record.hashed_payload`) plus
  ``run_id`` and ``record`` (the run dir), so a dashboard filters by any hyperparameter and links back to the record;
* its id is the run id, with ``resume="allow"``: a resumed or requeued run continues the same wandb run;
* group, job_type and tags come from ``conf/logger/wandb.yaml``;
* offline unless ``WANDB_MODE`` says otherwise; the offline runs land in ``<results_dir>/wandb/offline-run-*``,
  so ``wandb sync results/wandb`` finds them (wandb always writes under ``<dir>/wandb/``, hence ``dir`` is the
  results dir, not ``results/wandb``).

Two wandb warnings had a cause here, fixed rather than filtered: "The anonymous setting has no effect" (Lightning
2.6's ``WandbLogger`` always passes ``anonymous=None`` to ``wandb.init``, and wandb 0.31 warns on any value; the key
is dropped before ``init``) and "git root <dir> does not exist" (wandb looks for the git repo from ``dir``, which did
not exist yet; it is created first, and inside the repository wandb now records the commit).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from hydra.utils import get_class, instantiate
from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger
from omegaconf import DictConfig, OmegaConf

from oscrepro.runs.record import hashed_payload

log = logging.getLogger("oscrepro.train")

# The user's own settings win (setdefault). WANDB_SHOW_INFO=false drops wandb's info lines (a 3-line offline banner
# and a ~25-line history/summary per run: the run's own line has its numbers, finish_wandb says where the run is);
# wandb's warnings and errors still show.
WANDB_DEFAULTS = {"WANDB_MODE": "offline", "WANDB_SHOW_INFO": "false"}


def wandb_config(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """The wandb run config: the hashed payload (what makes the run this run), its id and its record."""
    return {**hashed_payload(cfg), "run_id": run_dir.name, "record": str(run_dir)}


def wandb_logger(cfg: DictConfig, lcfg: DictConfig, run_dir: Path) -> WandbLogger:
    """A ``WandbLogger`` from ``lcfg`` (``conf/logger/wandb.yaml``) for the run in ``run_dir`` (module docstring)."""
    for var, value in WANDB_DEFAULTS.items():
        os.environ.setdefault(var, value)  # the user's own setting wins
    save_dir = Path(str(lcfg.get("save_dir") or cfg.paths.results_dir))
    save_dir.mkdir(parents=True, exist_ok=True)  # wandb finds the git root from here: it must exist
    kwargs = OmegaConf.to_container(lcfg, resolve=True)
    target = get_class(kwargs.pop("_target_"))  # not instantiate(): its own first parameter is named ``config``
    logger = target(
        **{**kwargs, "save_dir": str(save_dir)}, id=run_dir.name, resume="allow", config=wandb_config(cfg, run_dir)
    )
    logger._wandb_init.pop("anonymous", None)  # Lightning passes None, wandb warns on any value (module docstring)
    return logger


def run_loggers(cfg: DictConfig, run_dir: Path) -> list[Logger]:
    """CSV logger into ``<run_dir>/logs`` plus every logger configured under ``cfg.logger``."""
    loggers: list[Logger] = [CSVLogger(save_dir=str(run_dir), name="", version="logs")]
    for lcfg in (cfg.get("logger") or {}).values():
        if lcfg is None or "_target_" not in lcfg:
            continue
        is_wandb = issubclass(get_class(str(lcfg._target_)), WandbLogger)
        loggers.append(wandb_logger(cfg, lcfg, run_dir) if is_wandb else instantiate(lcfg))
    return loggers


def finish_wandb(loggers: list[Logger]) -> None:
    """End the wandb run of ``loggers`` (if any), so the next run of the process starts its own, and say in one
    line where it is (the offline run's folder and the command that uploads it, or the online run's page)."""
    if not any(isinstance(lg, WandbLogger) for lg in loggers):
        return
    import wandb

    run = wandb.run
    if run is not None:
        if run.offline:
            sync_dir = Path(run.settings.sync_dir)
            log.info("wandb: offline run %s in %s (upload: wandb sync %s)", run.id, sync_dir, sync_dir.parent)
        else:
            log.info("wandb: run %s at %s", run.id, run.url)
    wandb.finish()
