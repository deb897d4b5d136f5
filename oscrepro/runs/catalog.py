"""The run records under a results dir as a catalogue: list, filter, diff against the experiment's defaults,
compare two runs, aggregate seeds. The engine behind ``python -m oscrepro.runs`` (:mod:`oscrepro.runs.__main__`).

A record is ``<runs_dir>/<experiment>/<run-id>/{config.yaml, status.json, metrics.json, history.csv}``
(:mod:`oscrepro.runs.record`). What makes a run differ from another is what its run id hashes
(:func:`oscrepro.runs.record.hashed_payload`): the catalogue compares those payloads, flattened to dotted keys, so
paths, logging and table membership never show up as differences.

*Overrides* of a run are the keys whose value differs from the experiment's own config at the run's budget
(``experiment=<name> budget=<budget>`` composed as ``train`` does). Composing costs about half a second, so the
flattened defaults are cached in ``<results>/.cache/run_defaults/``, keyed by a digest of every file under conf/:
any config edit recomputes them.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from oscrepro.runs.compose import CONF_DIR
from oscrepro.runs.record import MECHANISM_GROUP, hashed_payload

# Shown by ``ls`` first when a run has them; other metrics are reached through ``show``.
KEY_METRICS = ("val/acc", "test/acc", "val/loss", "test/loss", "val/bpc", "test/bpc", "val/ppl", "test/ppl",
               "val/mse", "test/mse")
SEED_KEY = "seed"


@dataclass
class Run:
    """One run record, read lazily from disk (config through the fast C YAML loader)."""

    dir: Path
    status: dict[str, Any]
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.dir.name

    @property
    def experiment(self) -> str:
        return str(self.status.get("experiment") or self.config.get("experiment_name", "?"))

    @cached_property
    def config(self) -> dict[str, Any]:
        """The record's config.yaml, read once."""
        return _load_yaml(self.dir / "config.yaml")

    @property
    def budget(self) -> str:
        return str(self.config.get("budget_name", "paper"))

    @property
    def seed(self) -> Any:
        return self.config.get(SEED_KEY)

    @cached_property
    def flat(self) -> dict[str, Any]:
        """The run-id payload as ``{dotted key: value}`` (the mechanism name included as ``mechanism``)."""
        cfg = self.config
        flat = flatten(hashed_payload(OmegaConf.create(cfg)))
        if cfg.get("mechanism") is not None:
            flat["mechanism"] = cfg["mechanism"]
        return flat


def _load_yaml(path: Path) -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path) as fh:
        return yaml.load(fh, Loader=loader) or {}


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists and empty mappings stay values."""
    if not isinstance(node, dict) or not node:
        return {prefix: node}
    out: dict[str, Any] = {}
    for k, v in node.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def runs_root(results: Path) -> Path:
    return Path(results) / "runs"


def scan(results: Path) -> Iterator[Run]:
    """Every run record under ``<results>/runs`` (a dir with a status.json), sorted by path."""
    for status_path in sorted(runs_root(results).glob("**/status.json")):
        rdir = status_path.parent
        try:
            status = json.loads(status_path.read_text())
        except (OSError, json.JSONDecodeError):
            status = {"status": "unreadable"}
        yield Run(rdir, status, _metrics(rdir))


def parse_where(items: Iterable[str]) -> dict[str, str]:
    """``["model.d_model=64", "mechanism=fqo"]`` -> ``{key: value}``; a malformed item is a ValueError."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--where {item!r}: expected key=value (e.g. model.d_model=64)")
        out[key.strip()] = value.strip()
    return out


def _same(value: Any, text: str) -> bool:
    return str(value) == text or (isinstance(value, bool) and str(value).lower() == text.lower())


def select(runs: Iterable[Run], experiment: str | None = None, status: str | None = None,
           budget: str | None = None, where: dict[str, str] | None = None) -> list[Run]:
    """Runs whose experiment matches the glob, whose status and budget are the given ones, and whose config holds
    every ``where`` value (dotted keys of the resolved config; ``mechanism`` for the attention choice)."""
    out = []
    for r in runs:
        if experiment and not fnmatch.fnmatch(r.experiment, experiment):
            continue
        if status and r.status.get("status") != status:
            continue
        if budget and r.budget != budget:
            continue
        if where and not all(k in r.flat and _same(r.flat[k], v) for k, v in where.items()):
            continue
        out.append(r)
    return out


def find(results: Path, prefix: str) -> Run:
    """The one run whose id starts with ``prefix`` (or whose record dir is ``prefix``); LookupError otherwise."""
    given = Path(prefix)
    if (given / "status.json").exists():
        return Run(given, json.loads((given / "status.json").read_text()), _metrics(given))
    hits = [r for r in scan(results) if r.id.startswith(prefix)]
    if len(hits) != 1:
        shown = ", ".join(f"{r.experiment}/{r.id}" for r in hits[:5])
        raise LookupError(f"run id {prefix!r} matches {len(hits)} records under {runs_root(results)}"
                          + (f": {shown}" if hits else "") + ("; give more characters" if hits else ""))
    return hits[0]


def _metrics(rdir: Path) -> dict[str, Any]:
    path = rdir / "metrics.json"
    return json.loads(path.read_text()) if path.exists() else {}


# ------------------------------------------------------------------------------------ overrides vs defaults
@cache
def conf_digest(conf_dir: Path = CONF_DIR) -> str:
    """A digest of every file under conf/ (paths and bytes): the key that invalidates cached defaults."""
    h = hashlib.sha256()
    for p in sorted(conf_dir.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(conf_dir)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def experiment_defaults(results: Path, experiment: str, budget: str, mechanism: str | None = None
                        ) -> dict[str, Any] | None:
    """The flattened run-id payload of ``experiment=<experiment> budget=<budget> [attention=<mechanism>]`` (cached
    on disk); None when that no longer composes (a record from a renamed experiment)."""
    cache_dir = Path(results) / ".cache" / "run_defaults" / conf_digest()
    name = "__".join([experiment.replace("/", "__"), budget, *([mechanism.replace("/", "__")] if mechanism else [])])
    path = cache_dir / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    from oscrepro.runs.compose import compose_run  # Hydra compose: only when the cache misses

    try:
        cfg = compose_run([f"experiment={experiment}", f"budget={budget}",
                           *([f"{MECHANISM_GROUP}={mechanism}"] if mechanism else [])])
    except Exception:  # noqa: BLE001 (any compose failure means: no defaults to compare with)
        return None
    flat = flatten(hashed_payload(cfg))
    if cfg.get("mechanism") is not None:
        flat["mechanism"] = cfg.mechanism
    cache_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(flat, sort_keys=True, default=str))
    return flat


def diff(a: dict[str, Any], b: dict[str, Any], skip: Iterable[str] = ()) -> dict[str, tuple[Any, Any]]:
    """``{key: (a's value, b's value)}`` for every key whose values differ (missing = ``None``)."""
    skipped = set(skip)
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b))
            if k not in skipped and json.dumps(a.get(k), default=str) != json.dumps(b.get(k), default=str)}


def overrides(run: Run, results: Path) -> list[str] | None:
    """``key=value`` for every key where the run differs from its experiment's defaults (seed apart); None when the
    experiment no longer composes. A run with another mechanism than the experiment's shows ``attention=<name>``
    and is then compared with the experiment composed with that mechanism, so the mechanism's own settings are not
    listed as overrides."""
    defaults = experiment_defaults(results, run.experiment, run.budget)
    if defaults is None:
        return None
    head = []
    mechanism = run.flat.get("mechanism")
    if mechanism is not None and mechanism != defaults.get("mechanism"):
        with_mech = experiment_defaults(results, run.experiment, run.budget, str(mechanism))
        if with_mech is not None:
            defaults, head = with_mech, [f"{MECHANISM_GROUP}={mechanism}"]
    return head + [f"{k}={_short(v)}" for k, (v, _d) in diff(run.flat, defaults, skip=(SEED_KEY,)).items()]


def _short(v: Any) -> str:
    text = json.dumps(v, default=str) if isinstance(v, (list, dict)) else str(v)
    return text if len(text) <= 40 else text[:37] + "..."


# ------------------------------------------------------------------------------------ seed aggregates
@dataclass
class Group:
    """Runs that differ only in their seed, with mean ± std (sample, n - 1) per metric over the ok ones."""

    runs: list[Run]
    stats: dict[str, tuple[float, float, int]]


def aggregate(runs: Iterable[Run]) -> list[Group]:
    """Group runs by their run-id payload without the seed; per metric of the ok runs: (mean, std, n)."""
    groups: dict[str, list[Run]] = {}
    for r in runs:
        key = json.dumps({k: v for k, v in r.flat.items() if k != SEED_KEY}, sort_keys=True, default=str)
        groups.setdefault(key, []).append(r)
    out = []
    for members in groups.values():
        ok = [r for r in members if r.status.get("status") == "ok"]
        names = sorted({k for r in ok for k, v in r.metrics.items() if isinstance(v, (int, float))})
        stats = {}
        for name in names:
            values = [float(r.metrics[name]) for r in ok if isinstance(r.metrics.get(name), (int, float))]
            values = [v for v in values if math.isfinite(v)]
            if values:
                std = statistics.stdev(values) if len(values) > 1 else math.nan
                stats[name] = (statistics.fmean(values), std, len(values))
        out.append(Group(sorted(members, key=lambda r: (str(r.seed), r.id)), stats))
    return sorted(out, key=lambda g: (g.runs[0].experiment, g.runs[0].id))
