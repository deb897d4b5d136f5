"""Snapshot of every table's resolved run configs (see tests/fixtures/make_golden_configs.py)."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from oscrepro.runs.record import hashed_payload
from oscrepro.tables.plan import plan
from oscrepro.tables.spec import BUDGETS, TRIAL_CORE_S, TRIALS_ARG, available_tables, load_spec


def digest(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def snapshot(paper: str | None = None) -> dict[str, Any]:
    """{"cells": {table|budget|row|column|seed: digest}, "configs": {digest: payload},
    "analyses": {table|budget[|post]: kwargs}}: configs shared by cells are stored once. ``paper`` restricts it
    to that paper's tables (``<paper>/...``)."""
    for var in ("OSCREPRO_DATA_DIR", "OSCREPRO_RESULTS_DIR", "OSCREPRO_CACHE_DIR"):
        os.environ.pop(var, None)
    cells: dict[str, str] = {}
    configs: dict[str, Any] = {}
    analyses: dict[str, Any] = {}
    for key in available_tables():
        if paper is not None and not key.startswith(f"{paper}/"):
            continue
        spec = load_spec(key)
        for budget in BUDGETS:
            if spec.kind == "analysis":
                # the planner's pointer to the trial count and its price are not adapter arguments
                kwargs = {k: v for k, v in spec.analysis.items()
                          if k not in ("_target_", "budgets", TRIALS_ARG, TRIAL_CORE_S)}
                kwargs.update((spec.analysis.get("budgets") or {}).get(budget, {}))
                analyses[f"{key}|{budget}"] = kwargs
                continue
            if spec.post:
                analyses[f"{key}|{budget}|post"] = {k: v for k, v in spec.post.items() if k != "_target_"}
            for (ri, col), reqs in plan(spec, budget).items():
                for seed, req in zip(spec.seeds_for(budget, ri, col), reqs, strict=True):
                    payload = hashed_payload(req.cfg)
                    cells[f"{key}|{budget}|{spec.rows[ri].label}|{col}|{seed}"] = h = digest(payload)
                    configs[h] = payload
    return {"cells": cells, "configs": configs, "analyses": analyses}


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): d}


def restrict(snap: dict[str, Any], paper: str) -> dict[str, Any]:
    """The part of a whole snapshot that ``snapshot(paper)`` would give."""
    cells = {k: v for k, v in snap["cells"].items() if k.startswith(f"{paper}/")}
    return {"cells": cells, "configs": {h: snap["configs"][h] for h in set(cells.values())},
            "analyses": {k: v for k, v in snap["analyses"].items() if k.startswith(f"{paper}/")}}


def differences(golden: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Human-readable differences between two snapshots: cells added/removed, keys changed per cell."""
    out: list[str] = []
    gc, nc = golden["cells"], now["cells"]
    out += [f"cell removed: {k}" for k in sorted(set(gc) - set(nc))]
    out += [f"cell added: {k}" for k in sorted(set(nc) - set(gc))]
    for k in sorted(set(gc) & set(nc)):
        if gc[k] == nc[k]:
            continue
        a, b = _flat(golden["configs"][gc[k]]), _flat(now["configs"][nc[k]])
        for key in sorted(set(a) | set(b)):
            if a.get(key, "<absent>") != b.get(key, "<absent>"):
                out.append(f"{k}: {key}: {a.get(key, '<absent>')!r} -> {b.get(key, '<absent>')!r}")
    ga, na = golden["analyses"], now["analyses"]
    for k in sorted(set(ga) | set(na)):
        if ga.get(k) != na.get(k):
            out.append(f"analysis {k}: {ga.get(k)!r} -> {na.get(k)!r}")
    return out
