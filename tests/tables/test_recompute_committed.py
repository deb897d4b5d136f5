"""Every committed runs-table cell recomputes from the committed run records (as test_run_identity checks ids).

A committed table whose numbers no record in git gives is a number nobody can check. The engine's own planning
and aggregation (:func:`oscrepro.tables.build.recompute_mismatches`: matched widths, device-only variants, the decided
seeds) read the records under results/runs and must give every cell's mean, std and n as the committed csv has them.

Tables built before records were kept in git and not yet rebuilt are listed in :data:`NOT_YET_REBUILT` with the
measured cost of rebuilding them; they are strict xfails, so the test fails the day one of them recomputes (then
remove it from the list) and no other table can join them silently.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oscrepro.claims.scoreboard import table_csv
from oscrepro.tables.build import recompute_mismatches
from oscrepro.tables.spec import BUDGETS, available_tables, load_spec

RESULTS = Path(__file__).resolve().parents[2] / "results"

# (table, budget) -> why its records are not in git yet (run times from the tables' own records and headers)
NOT_YET_REBUILT: dict[tuple[str, str, str], str] = {}  # empty since fqo Table 4 at cpu was rebuilt (2026-11-27)


def _committed() -> list:
    out = []
    for key in available_tables():
        if load_spec(key).kind != "runs":
            continue
        for budget in BUDGETS:
            if not table_csv(RESULTS, key, budget).exists():
                continue
            why = NOT_YET_REBUILT.get((*key.split("/"), budget))
            marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
            out.append(pytest.param(key, budget, marks=marks, id=f"{key}@{budget}"))
    return out


@pytest.mark.parametrize(("key", "budget"), _committed())
def test_committed_table_recomputes_from_committed_records(key: str, budget: str):
    mismatches = recompute_mismatches(key, budget, RESULTS)
    assert not mismatches, f"{key} at {budget}: {len(mismatches)} cell value(s) differ: " + "; ".join(mismatches[:3])


def test_a_changed_record_is_detected(tmp_path: Path):
    """The check can fail: one record's metric changed in a copy of a committed table's records."""
    import json
    import shutil

    shutil.copytree(RESULTS / "runs" / "osciformer" / "xor", tmp_path / "runs" / "osciformer" / "xor")
    (tmp_path / "osciformer" / "cpu").mkdir(parents=True)
    shutil.copy(RESULTS / "osciformer" / "cpu" / "table4.csv", tmp_path / "osciformer" / "cpu" / "table4.csv")
    assert recompute_mismatches("osciformer/table4", "cpu", tmp_path) == []
    metrics = next(p for p in sorted((tmp_path / "runs").rglob("metrics.json"))
                   if json.loads(p.read_text()).get("test/acc") is not None)
    values = json.loads(metrics.read_text())
    values["test/acc"] = values["test/acc"] * 0.5
    metrics.write_text(json.dumps(values))
    assert recompute_mismatches("osciformer/table4", "cpu", tmp_path)
