"""An analysis table's own seed runs (``analysis.seeds_arg``): the count the claims planner decides reaches the
adapter, never lowers the spec's, and the planner's cost per seed comes from the experiment's records."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from oscrepro.claims.decide import _analysis_seed_cost, write_decided
from oscrepro.runs.compose import CONF_DIR
from oscrepro.tables.build import analysis_kwargs
from oscrepro.tables.spec import ANALYSIS_SEEDS, SpecError, load_spec

KEY = "osciformer/fig5_forecast"


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    root = tmp_path / "conf"
    for key in (KEY, "coupledqk/fig3"):
        (root / "table" / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CONF_DIR / "table" / f"{key}.yaml", root / "table" / f"{key}.yaml")
    return root


def test_decided_analysis_seeds_reach_the_adapter(conf: Path):
    spec = load_spec(KEY, conf)
    assert spec.analysis_seeds("cpu") == 3 and spec.analysis_seeds("smoke") == 1
    write_decided("cpu", KEY, [ANALYSIS_SEEDS], 5, conf)
    spec = load_spec(KEY, conf)
    kwargs = analysis_kwargs(spec, "cpu")
    assert kwargs["seeds"] == 5 and "seeds_arg" not in kwargs  # the adapter gets the count, not the pointer
    assert analysis_kwargs(spec, "smoke")["seeds"] == 1  # other budgets untouched
    write_decided("cpu", KEY, [ANALYSIS_SEEDS], 2, conf)  # never lowers
    assert load_spec(KEY, conf).analysis_seeds("cpu") == 5


def test_analysis_without_own_seeds_refuses(conf: Path):
    with pytest.raises(SpecError, match="seeds_arg"):
        load_spec("coupledqk/fig3", conf).analysis_seeds("cpu")


def test_cost_per_seed_from_the_experiment_records(tmp_path: Path, conf: Path):
    spec = load_spec(KEY, conf)  # the spec's 3 seeds (the project's conf/decide may have raised them)
    runs = tmp_path / "runs" / spec.analysis["experiment"]
    for name, status, wall in (("a", "ok", 30.0), ("b", "ok", 60.0), ("c", "ok", 30.0), ("d", "diverged", 900.0)):
        (runs / name).mkdir(parents=True)
        (runs / name / "status.json").write_text(json.dumps({"status": status, "wall_time_s": wall}))
    assert _analysis_seed_cost(spec, "cpu", tmp_path) == pytest.approx(120.0 / 3)  # ok records over 3 seeds
    assert math.isnan(_analysis_seed_cost(spec, "cpu", tmp_path / "empty"))  # no records: nothing to cost it by
