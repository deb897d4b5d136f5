"""Find a run's record: the exact run dir a config composes to, or a finished variant that differs only in where
it trained (:data:`DEVICE_KEYS`), and read a record's trained weights.

The runs layer sits below both :mod:`oscrepro.train` and the table engine (:mod:`oscrepro.tables`): it knows how a
config becomes a run id and a record dir (:mod:`oscrepro.runs.compose`, :mod:`oscrepro.runs.record`), never how
to train one.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from oscrepro.runs.compose import CONF_DIR, RunNotUsableError, compose_run
from oscrepro.runs.record import RunRecord, _drop, hashed_payload, run_dir

MODEL_PREFIX = "model."  # BaseTask stores the backbone as ``self.model``
# Keys that change where a run trains, not what it computes: a record trained with ``trainer=gpu`` serves a cell.
DEVICE_KEYS = ("trainer.accelerator", "trainer.devices", "trainer.deterministic", "trainer.strategy")


@dataclass
class RunRequest:
    """One training run a table needs: its overrides (seed included), composed config and record dir."""

    overrides: list[str]
    cfg: DictConfig
    run_dir: Path

    @classmethod
    def compose(cls, overrides: list[str], conf_dir: Path = CONF_DIR) -> RunRequest:
        cfg = compose_run(list(overrides), conf_dir)
        return cls(list(overrides), cfg, run_dir(cfg))

    @property
    def record(self) -> RunRecord:
        return RunRecord(self.run_dir)


def _normalised(cfg: DictConfig) -> str:
    """The run-id payload (:func:`hashed_payload`) without :data:`DEVICE_KEYS`, as comparable text."""
    payload = hashed_payload(cfg)
    for dotted in DEVICE_KEYS:
        _drop(payload, dotted)
    return json.dumps(payload, sort_keys=True, default=str)


@functools.lru_cache(maxsize=8192)
def _normalised_file(path: str, mtime_ns: int) -> str:
    """:func:`_normalised` of a record's ``config.yaml``, cached per (path, mtime): the claims planner looks up every
    seed it might add, and each miss scans the experiment's records (a record's config is written once)."""
    return _normalised(OmegaConf.load(path))


def find_record(req: RunRequest) -> Path | None:
    """The finished record of ``req``: its exact run dir, else a device-only variant (latest first)."""
    if req.record.finished():
        return req.run_dir
    if not req.run_dir.parent.is_dir():
        return None
    want = _normalised(req.cfg)
    hits = []
    for cfg_path in req.run_dir.parent.glob("*/config.yaml"):
        if RunRecord(cfg_path.parent).finished():
            if _normalised_file(str(cfg_path), cfg_path.stat().st_mtime_ns) == want:
                hits.append(cfg_path.parent)
    return max(hits, key=lambda p: p.stat().st_mtime) if hits else None


def serve_from_variants(reqs: Iterable[RunRequest]) -> None:
    """Point every request whose exact record is not finished at its finished device-only variant
    (:func:`find_record`), so that training skips it and aggregation and headers read the record that serves the
    cell (a run trained with ``trainer=gpu`` serves the plain table; the header's *Trained on* line names its
    machine). Requests left unfinished keep their own dir, where their training writes."""
    found: dict[Path, Path | None] = {}
    for r in reqs:
        if r.run_dir not in found:
            found[r.run_dir] = find_record(r)
        if (hit := found[r.run_dir]) is not None:
            r.run_dir = hit


def model_state_dict(ckpt_path: Path, map_location: str | torch.device = "cpu") -> dict[str, Tensor]:
    """The backbone's parameters from a Lightning task checkpoint (``model.`` prefix stripped)."""
    ckpt = torch.load(ckpt_path, map_location=map_location, weights_only=True)
    state = ckpt.get("state_dict", ckpt)
    out = {k[len(MODEL_PREFIX):]: v for k, v in state.items() if k.startswith(MODEL_PREFIX)}
    if not out:
        raise RunNotUsableError(f"{ckpt_path}: no '{MODEL_PREFIX}*' entries in the checkpoint's state_dict")
    return out
