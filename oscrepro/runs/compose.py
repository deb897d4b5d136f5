"""Compose a run's config as ``python -m oscrepro.train`` does, and the names every run reader shares.

The bottom of the runs layer: training (:mod:`oscrepro.train`), the table engine (:mod:`oscrepro.tables`) and the
runs CLI (:mod:`oscrepro.runs`) compose a run's config here, so a cell's run id is the id ``train`` gives it.
"""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.types import Quote, QuotedString
from omegaconf import DictConfig, open_dict

from oscrepro.runs.record import MECHANISM_GROUP, with_mechanism

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
CKPT_NAME = "last.ckpt"


class RunNotUsableError(RuntimeError):
    """The run record has no checkpoint, or did not finish with status ``ok``."""


def config_groups(conf_dir: Path = CONF_DIR) -> tuple[str, ...]:
    """The config group names (``experiment``, ``attention``, ``data``, ...): the folders of ``conf/``."""
    return tuple(sorted(p.name for p in conf_dir.iterdir() if p.is_dir()))


def path_override(key: str, path: str | Path) -> str:
    """The override ``key=<path>`` with the path quoted the Hydra way (single quotes, inner quotes and the
    backslashes before them escaped), so that any path composes to itself: unquoted, Hydra's override grammar
    refuses spaces and non-ASCII letters (``--results-dir "résultats et runs"`` failed to parse)."""
    return f"{key}={QuotedString(text=str(path), quote=Quote.single).with_quotes()}"


def compose_run(overrides: list[str], conf_dir: Path = CONF_DIR) -> DictConfig:
    """Compose ``conf/train.yaml`` with ``overrides`` exactly as ``python -m oscrepro.train`` would."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides, return_hydra_config=True)
    choices = cfg.hydra.runtime.choices
    with open_dict(cfg):
        del cfg["hydra"]
    return with_mechanism(cfg, choices.get(MECHANISM_GROUP))
