"""Snapshot of every table's resolved run configs (see tests/fixtures/make_golden_configs.py)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from typing import Any

from omegaconf import OmegaConf

from oscrepro.tables.plan import plan
from oscrepro.tables.spec import BUDGETS, available_tables, load_spec
from oscrepro.utils.run_record import IGNORED_KEYS, _drop


def run_payload(cfg) -> dict[str, Any]:
    """The part of a resolved config that determines a run's numbers (what the run id hashes)."""
    container = copy.deepcopy(OmegaConf.to_container(cfg, resolve=True))
    for key in IGNORED_KEYS:
        _drop(container, key)
    return container


def digest(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def snapshot() -> dict[str, Any]:
    """{"cells": {table|budget|row|column|seed: digest}, "configs": {digest: payload},
    "analyses": {table|budget[|post]: kwargs}}: configs shared by cells are stored once."""
    for var in ("OSCREPRO_DATA_DIR", "OSCREPRO_RESULTS_DIR", "OSCREPRO_CACHE_DIR"):
        os.environ.pop(var, None)
    cells: dict[str, str] = {}
    configs: dict[str, Any] = {}
    analyses: dict[str, Any] = {}
    for key in available_tables():
        spec = load_spec(key)
        for budget in BUDGETS:
            if spec.kind == "analysis":
                kwargs = {k: v for k, v in spec.analysis.items() if k not in ("_target_", "budgets")}
                kwargs.update((spec.analysis.get("budgets") or {}).get(budget, {}))
                analyses[f"{key}|{budget}"] = kwargs
                continue
            if spec.post:
                analyses[f"{key}|{budget}|post"] = {k: v for k, v in spec.post.items() if k != "_target_"}
            for (ri, col), reqs in plan(spec, budget).items():
                for seed, req in zip(spec.seeds_for(budget), reqs):
                    payload = run_payload(req.cfg)
                    cells[f"{key}|{budget}|{spec.rows[ri].label}|{col}|{seed}"] = h = digest(payload)
                    configs[h] = payload
    return {"cells": cells, "configs": configs, "analyses": analyses}
