"""The decide ledger: the looks a claim took under the group-sequential design, and the verdict they give.

``results/decide/<budget>.json`` (written by :mod:`oscrepro.claims.decide`) holds, per ``<claim id>@<budget>``,
the design's planned looks (``schedule``: seed counts fixed when the claim entered the design) and every look taken
(n, the level it was judged at, its verdict). A claim in the ledger is judged by the design, not by the fixed-sample
95 % test: its verdict is the first decisive look's, and later looks (which the design would not have taken) never
override it (:mod:`oscrepro.claims.sequential` explains what that guarantees). The scoreboard reads the ledger here,
so CLAIMS.md, each table's claims section and the per-paper reports all say what the design decided.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from oscrepro.claims.sequential import look_levels, sequential_verdict
from oscrepro.claims.verdict import Verdict


def ledger_path(results: Path, budget: str) -> Path:
    return Path(results) / "decide" / f"{budget}.json"


def load_ledger(results: Path, budget: str) -> dict[str, dict[str, Any]]:
    """``{claim id@budget: {"claim", "table", "schedule": [n...], "looks": [{look, n, level, status, ...}]}}``."""
    path = ledger_path(results, budget)
    return json.loads(path.read_text()) if path.exists() else {}


def ledger_verdict(entry: dict[str, Any]) -> Verdict:
    """The design's verdict from the looks taken (:func:`oscrepro.claims.sequential.sequential_verdict`): the first
    decisive one, else inconclusive after the last. Each stored look must have been judged at the level the design
    gives it (a hand-edited or off-schedule ledger raises ValueError)."""
    schedule = list(entry["schedule"])
    levels = look_levels(schedule)
    history = []
    for look in entry["looks"]:
        k = int(look["look"]) - 1
        if not math.isclose(float(look["level"]), levels[k], rel_tol=0, abs_tol=1e-9):
            raise ValueError(f"ledger look {k + 1} of {entry.get('claim')} was judged at level {look['level']}, but "
                             f"the design {schedule} gives {levels[k]:.6g}")
        ci = tuple(float(x) if x is not None else math.nan for x in look["ci"])
        stored = Verdict(look["status"], "stored look", float(look["effect"]), ci, str(look["detail"]))
        history.append((int(look["n"]), lambda _level, v=stored: v))
    return sequential_verdict(history, schedule)
