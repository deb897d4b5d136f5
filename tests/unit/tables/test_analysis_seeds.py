"""An analysis table's own seed runs (``analysis.seeds_arg``): the count the claims planner decides reaches the
adapter, never lowers the spec's, and the planner's cost per seed comes from the experiment's records."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from oscrepro.claims.decide import write_decided
from oscrepro.claims.prices import analysis_seed_cost, trial_cost
from oscrepro.runs.compose import CONF_DIR
from oscrepro.tables.build import analysis_kwargs
from oscrepro.tables.spec import ANALYSIS_SEEDS, ANALYSIS_TRIALS, SpecError, load_spec

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
    assert analysis_seed_cost(spec, "cpu", tmp_path) == pytest.approx(120.0 / 3)  # ok records over 3 seeds
    assert math.isnan(analysis_seed_cost(spec, "cpu", tmp_path / "empty"))  # no records: nothing to cost it by


TIMED = "osciformer/fig2_time"


@pytest.fixture
def timed_conf(tmp_path: Path) -> Path:
    root = tmp_path / "conf"
    (root / "table" / TIMED).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(CONF_DIR / "table" / f"{TIMED}.yaml", root / "table" / f"{TIMED}.yaml")
    return root


def test_decided_trials_reach_the_adapter(timed_conf: Path):
    """A timing analysis's repeats (``analysis.trials_arg``) are raised like seeds; the planner's cap reads the
    spec's own count, and the pointer and the price never reach the adapter."""
    spec = load_spec(TIMED, timed_conf)
    assert spec.analysis_trials("cpu") == 8 and spec.analysis_trials("smoke") == 1
    write_decided("cpu", TIMED, [ANALYSIS_TRIALS], 12, timed_conf)
    spec = load_spec(TIMED, timed_conf)
    kwargs = analysis_kwargs(spec, "cpu")
    assert kwargs["repeats"] == 12
    assert not {"trials_arg", "trial_core_s"} & set(kwargs)
    assert spec.analysis_trials("cpu", decided=False) == 8  # the cap is fixed from the spec, not the raised count
    assert analysis_kwargs(spec, "smoke")["repeats"] == 1
    with pytest.raises(SpecError, match="trials_arg"):
        load_spec(KEY, CONF_DIR).analysis_trials("cpu")


def test_trial_price_comes_from_the_spec(timed_conf: Path):
    spec = load_spec(TIMED, timed_conf)
    assert trial_cost(spec, "cpu") == pytest.approx(10.6)
    assert math.isnan(trial_cost(spec, "paper"))  # not measured at paper: the planner leaves it out, saying why


def test_per_cell_seeds_reach_the_adapter(tmp_path: Path):
    """coupledqk Table 7 names analysis.cell_seeds_arg: the planner's per-cell raises reach the adapter as
    ``{"<row> | <column>": n}``, and its whole-table seed count stays the spec's."""
    from oscrepro.tables.spec import CELL_SEP, cell_key

    key = "coupledqk/table7"
    root = tmp_path / "conf"
    (root / "table" / "coupledqk").mkdir(parents=True)
    shutil.copy(CONF_DIR / "table" / f"{key}.yaml", root / "table" / f"{key}.yaml")
    assert analysis_kwargs(load_spec(key, root), "cpu")["cell_seeds"] == {}
    cell = cell_key("Standard", "QNLI (ours)")
    write_decided("cpu", key, [ANALYSIS_SEEDS + CELL_SEP + cell], 5, root)
    kwargs = analysis_kwargs(load_spec(key, root), "cpu")
    assert kwargs["cell_seeds"] == {cell: 5} and kwargs["n_seeds"] == 3 and "cell_seeds_arg" not in kwargs
