"""Run records: ``<runs_dir>/<experiment>/<run-id>/{config.yaml, metrics.json, status.json, history.csv}``.

The run id is a stable hash of the resolved config minus keys that do not change the result (paths, logging,
progress display, table membership), so the same cell requested by two tables, or by a resumed sweep, maps to
the same record and a finished run is never redone. Two processes asking for the same run (two table builds
sharing a cell, say fqo Table 4 and the ssa LM table's softmax baseline) never train it twice at once: the
first holds an exclusive ``flock`` on ``<run-id>/lock`` while it trains; the second waits on it, then finds the
run finished and reads its record.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

# Config keys that never influence the numbers a run produces.
# task.optimizer.foreach: the multi-tensor AdamW gives bit-identical parameters to the per-tensor loop on CPU
# (tests/unit/tasks/test_optimizer.py) and only changes speed; ignored, so records from before it keep their ids.
IGNORED_KEYS: tuple[str, ...] = ("paths", "logger", "hydra", "tags", "table_name", "torch_threads", "mechanism",
                                 "trainer.enable_progress_bar", "trainer.enable_model_summary",
                                 "task.optimizer.foreach")
# Keys hashed only when they differ from their default: added to the configs after records existed, so a run at
# the default keeps its id (trainer.precision=bf16-mixed is a different run; 32-true is the run it always was).
DEFAULT_VALUES: dict[str, Any] = {"trainer.precision": "32-true", "data.time_stride": 1, "data.verify": True,
                                  "model.ffn.init": "gaussian"}
# Keys that say where a run read its inputs from, not what it computed: hashed as null, so a run that read the
# same files from another folder (a device machine's copy, OSCREPRO_DATA_DIR) has the id of the one that used the
# default lookup. What was read is in status.json (data_source, data_fingerprint), and published datasets are
# verified against their digests (oscrepro.data.integrity). Records before this rule all had null here.
LOCATION_KEYS: tuple[str, ...] = ("data.data_dir",)
# Classes moved after records were made with them: {dotted path now: the path the records' run ids hashed}. The run
# id hashes every ``_target_`` at its first path (:func:`hashed_payload`), so moving a paper's class into
# ``oscrepro/papers/<key>/`` keeps every record's id; :func:`current_targets` reads a record back at today's paths.
# A new path whose old one is still a class (the core ClassificationTask, which kept its path and shed fqo's probe)
# is told apart by RETIRED_KEYS. tests/unit/utils/test_run_identity.py checks every committed record and import.
MOVED_TARGETS: dict[str, str] = {
    "oscrepro.papers.fsn.torus_lm.TorusLM": "oscrepro.models.torus_lm.TorusLM",
    "oscrepro.papers.fsn.torus_lm.SwiGLUPhaseFFN": "oscrepro.models.torus_lm.SwiGLUPhaseFFN",
    "oscrepro.papers.fsn.fsn_mf.CollectiveModeFFN": "oscrepro.models.fsn_mf.CollectiveModeFFN",
    "oscrepro.papers.fsn.fsn_mf.WindingRegisterFFN": "oscrepro.models.fsn_mf.WindingRegisterFFN",
    "oscrepro.papers.fqo.verb_attention.VerbAttentionProbeTask": "oscrepro.tasks.classification.ClassificationTask",
}
# Keys a class's config no longer holds, with the value every record made by that class (and not by the class that
# took the key over) holds: hashed at that value when absent, so a key leaving a config keeps the run ids (the
# reverse of DEFAULT_VALUES, for keys that records have). fqo's probe switch left the core classification task.
RETIRED_KEYS: dict[str, dict[str, Any]] = {
    "oscrepro.tasks.classification.ClassificationTask": {"attention_probe": False, "probe_layer": 0},
}
FINISHED = ("ok", "diverged")
MECHANISM_GROUP = "attention"  # the config group whose chosen name is the run's mechanism (wandb job_type)


def _parent(d: dict, dotted: str) -> tuple[Any, str]:
    """The node holding the dotted key's leaf ({} where a parent is missing) and the leaf's name."""
    *parents, leaf = dotted.split(".")
    for p in parents:
        d = d.get(p) or {}
    return d, leaf


def _drop(d: dict, dotted: str, only_if: Any = ...) -> None:
    """Remove the dotted key (if it holds ``only_if``, when given)."""
    node, leaf = _parent(d, dotted)
    if isinstance(node, dict) and (only_if is ... or node.get(leaf, ...) == only_if):
        node.pop(leaf, None)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a temporary file beside it, then ``os.replace`` (a SIGKILL leaves the old
    file or the new one, never half of one; scripts/chaos.py checks it). A write that fails (a full disk) removes
    its temporary file and raises the original error: no ``*.tmp`` litter."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException as err:
        try:
            tmp.unlink(missing_ok=True)
        except OSError as cleanup:  # the write's error is the one to report; this one rides along with it
            err.add_note(f"{tmp} could not be removed either: {cleanup}")
        raise


def results_root(results_dir: str | Path | None = None) -> Path:
    """The results dir (records under ``<it>/runs``, tables beside them): ``results_dir``, else
    ``$OSCREPRO_RESULTS_DIR``, else ``results``."""
    return Path(results_dir or os.environ.get("OSCREPRO_RESULTS_DIR", "results"))


def unwritable_dir(path: Path) -> str | None:
    """Why ``path`` cannot be created or written by this process, or None when it can: the nearest existing folder
    on its path (where the first ``mkdir`` would happen) must be a directory that is writable (``os.access``, which
    also says no on a read-only mount or an immutable folder). Checked before anything is written."""
    probe = Path(path)
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        return f"{path} cannot be created: {probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return (f"{path} is not writable" if probe == Path(path) else
                f"{path} cannot be created: {probe} is not writable")
    return None


def with_mechanism(cfg: DictConfig, choice: str | None) -> DictConfig:
    """Set ``cfg.mechanism`` to the chosen attention config's name (``osciformer``, ``fqo_gain``: the name a user
    types) for wandb's ``job_type``; in :data:`IGNORED_KEYS`, so it never changes a run id."""
    with open_dict(cfg):
        cfg.mechanism = choice
    return cfg


def _nodes(tree: Any) -> Iterator[dict]:
    """Every dict of a config container (the root included), depth first."""
    if isinstance(tree, dict):
        yield tree
        for value in tree.values():
            yield from _nodes(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from _nodes(value)


def _as_first_hashed(container: dict[str, Any]) -> None:
    """Put every ``_target_`` node of ``container`` as its run id first hashed it: retired keys
    (:data:`RETIRED_KEYS`) back at their values where absent, a moved class (:data:`MOVED_TARGETS`) at its old path."""
    for node in _nodes(container):
        target = node.get("_target_")
        if isinstance(target, str):
            for key, value in RETIRED_KEYS.get(target, {}).items():
                node.setdefault(key, value)
            node["_target_"] = MOVED_TARGETS.get(target, target)


def current_targets(cfg: DictConfig) -> DictConfig:
    """A run record's config with every ``_target_`` at today's path, to build its model, data or task again (its
    run id is unchanged: :func:`hashed_payload` maps back). A node of a class with :data:`RETIRED_KEYS` that holds
    them at their retired values is that class and drops them; any other node at a path some class moved from
    (:data:`MOVED_TARGETS`) is the moved class (fqo's probe task: ``attention_probe: true``)."""
    container = OmegaConf.to_container(cfg, resolve=False)
    changed = False
    for node in _nodes(container):
        target = node.get("_target_")
        if not isinstance(target, str):
            continue
        retired = RETIRED_KEYS.get(target)
        if retired is not None and all(node.get(k, v) == v for k, v in retired.items()):
            changed |= any(key in node for key in retired)
            for key in retired:
                node.pop(key, None)
            continue
        moved = [new for new, old in MOVED_TARGETS.items() if old == target]
        if len(moved) > 1:
            raise ValueError(f"MOVED_TARGETS: {target} moved to {moved}; one path a class left, one class")
        if moved:
            node["_target_"] = moved[0]
            changed = True
    return OmegaConf.create(container) if changed else cfg  # a config at today's paths is returned as it is


def load_record_config(run_dir: Path) -> DictConfig:
    """``<run_dir>/config.yaml`` with today's ``_target_`` paths (:func:`current_targets`) and no data location
    (:data:`LOCATION_KEYS` as null, as the run id hashes them): what rebuilds a run. A recorded ``data.data_dir``
    names where the training machine kept the data (``/work/main/.devdata`` on 214 committed records); this
    checkout finds it through its own data path (local dir, ``../shared/data``, ``$OSCREPRO_DATA_DIR``)."""
    cfg = current_targets(OmegaConf.load(Path(run_dir) / "config.yaml"))
    for key in LOCATION_KEYS:
        if OmegaConf.select(cfg, key) is not None:
            OmegaConf.update(cfg, key, None, merge=False)
    return cfg


def hashed_payload(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config the run id hashes: without :data:`IGNORED_KEYS` and defaulted :data:`DEFAULT_VALUES`,
    :data:`LOCATION_KEYS` as null, and every ``_target_`` as records first hashed it (:data:`MOVED_TARGETS`,
    :data:`RETIRED_KEYS`)."""
    container = copy.deepcopy(OmegaConf.to_container(cfg, resolve=True))
    _as_first_hashed(container)
    for key in IGNORED_KEYS:
        _drop(container, key)
    for key, default in DEFAULT_VALUES.items():
        _drop(container, key, default)
    for key in LOCATION_KEYS:
        node, leaf = _parent(container, key)
        if isinstance(node, dict) and node.get(leaf) is not None:
            node[leaf] = None
    return container


def run_id(cfg: DictConfig) -> str:
    """12-hex sha256 of :func:`hashed_payload`."""
    blob = json.dumps(hashed_payload(cfg), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def run_dir(cfg: DictConfig) -> Path:
    """Where the run record of ``cfg`` lives: ``<paths.runs_dir>/<experiment_name>/<run id>``."""
    return Path(cfg.paths.runs_dir) / str(cfg.experiment_name) / run_id(cfg)


class RunRecord:
    """Reads and writes one run directory."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir)

    @property
    def status_path(self) -> Path:
        return self.dir / "status.json"

    def status(self) -> dict[str, Any]:
        return json.loads(self.status_path.read_text()) if self.status_path.exists() else {}

    def finished(self) -> bool:
        return self.status().get("status") in FINISHED

    def metrics(self) -> dict[str, Any]:
        path = self.dir / "metrics.json"
        return json.loads(path.read_text()) if path.exists() else {}

    @contextlib.contextmanager
    def lock(self) -> Iterator[bool]:
        """Hold the run's exclusive lock for the block; yields whether another process held it first (then
        this one waited for it to finish). Released when the block exits or the process dies."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "lock", "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                waited = False
            except BlockingIOError:
                fcntl.flock(fh, fcntl.LOCK_EX)  # another process is training this run: wait for it
                waited = True
            try:
                yield waited
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def start(self, cfg: DictConfig, extra: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        self._t0, self._cpu0 = time.time(), time.process_time()
        self._write_status({"status": "running", **extra})

    def finish(self, status: str, metrics: dict[str, Any], extra: dict[str, Any]) -> None:
        """Write metrics.json and the final status (``ok`` | ``diverged`` | ``failed``). A non-finite metric is
        refused (ValueError, nothing written): a recorded metric is always a number (train.py records a run whose
        final metrics are not finite as ``diverged``, without them)."""
        atomic_write_text(self.dir / "metrics.json",
                          json.dumps(metrics, indent=2, sort_keys=True, default=float, allow_nan=False))
        wall = round(time.time() - getattr(self, "_t0", time.time()), 2)
        # CPU seconds of this process (every thread) while the run trained: the core-time it cost, which wall x
        # threads overstates when other work shares the cores (the decide planner prices runs from it)
        cpu = round(time.process_time() - getattr(self, "_cpu0", time.process_time()), 2)
        self._write_status({**self.status(), "status": status, "wall_time_s": wall, "cpu_time_s": cpu, **extra})

    def update_status(self, extra: dict[str, Any]) -> None:
        """Merge ``extra`` into status.json (atomically; used when a record gains its recovered checkpoint)."""
        self._write_status({**self.status(), **extra})

    def _write_status(self, payload: dict[str, Any]) -> None:
        atomic_write_text(self.status_path, json.dumps(payload, indent=2, sort_keys=True, default=str))
