"""scripts/gpu_step_cost.py: a row's record is consistent (positive step time, tokens/s = tokens/step / s/step, the
budget's steps x seeds x step time), a failing row is recorded rather than raised, rows of one step config share
one measurement, and the script writes its markdown and csv. All on CPU (``--device cpu``) at budget smoke."""

from __future__ import annotations

import csv
import importlib.util
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cost():
    spec = importlib.util.spec_from_file_location("gpu_step_cost", ROOT / "scripts" / "gpu_step_cost.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_step_cost"] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("gpu_step_cost", None)


def smoke(cost, **kw):
    return cost.Session(budget="smoke", device="cpu", steps=3, warmup=1, **kw)


def test_row_record_is_consistent(cost):
    (plan,) = cost.plan_rows(["fqo/table2"], max_rows=1)  # SVA, softmax: a synthetic task, seconds at smoke
    rec = cost.measure_row(plan, smoke(cost))
    assert rec["status"] == "ok", rec["note"]
    assert rec["ms/step"] > 0 and rec["timed steps"] == 3 and rec["first step s"] > 0
    assert rec["tokens/s"] == pytest.approx(rec["tokens/step"] / (rec["ms/step"] / 1e3))
    batch, seq = (int(n) for n in rec["batch"].split("x"))
    assert rec["tokens/step"] == batch * seq and rec["samples/step"] == batch
    assert rec["params"] > 0 and rec["peak GPU MiB"] is None  # no GPU here
    # smoke trains 1 epoch of at most 3 batches (conf/budget/smoke.yaml), 1 seed
    assert rec["train steps"] == 3 and rec["seeds"] == 1
    assert rec["est h"] == pytest.approx(3 * 1 * rec["ms/step"] / 3.6e6)
    assert "trainer=gpu" not in rec["overrides"] and "seed=0" in rec["overrides"]


@pytest.mark.parametrize(
    ("override", "where"),
    [
        ("model.n_heads=3", "compose: ConfigError"),  # d_model 32 (smoke) is not divisible by 3 heads: refused
        ("model.positional=bogus", "model: InstantiationException"),  # passes validation, fails the model build
        ("+task.optimizer.betas=[2.0,0.9]", "timing: ValueError: Invalid beta"),  # fails at the optimizer
    ],
)
def test_failing_row_is_recorded_not_raised(cost, override, where):
    (plan,) = cost.plan_rows(["fqo/table2"], max_rows=1)
    rec = cost.measure_row(plan, smoke(cost, extra=[override]))
    assert rec["status"] == "failed" and where in rec["note"], rec["note"]
    assert rec.get("ms/step") is None and rec.get("est h") is None


def test_rows_of_one_step_config_share_a_measurement(cost):
    plans = cost.plan_rows(["fqo/table2"], max_rows=1)
    session = smoke(cost)
    first, second = cost.measure_row(plans[0], session), cost.measure_row(plans[0], session)
    assert first["status"] == second["status"] == "ok"
    assert second["ms/step"] == first["ms/step"] and "step as timed for row 'Softmax'" in second["note"]


def test_plan_is_round_robin_over_tables(cost):
    plans = cost.plan_rows(["fqo/table2", "ssa/lm_wikitext2"], max_rows=2)
    assert [(p.spec.key, p.row) for p in plans] == [
        ("fqo/table2", 0),
        ("ssa/lm_wikitext2", 0),
        ("fqo/table2", 1),
        ("ssa/lm_wikitext2", 1),
    ]
    assert plans[0].column == "overall" and plans[0].run_columns == 1  # overall and hard: the same runs
    (fqo4,) = cost.plan_rows(["fqo/table4"], max_rows=1)
    assert fqo4.run_columns == 2  # oscillator and softmax: two runs per seed


def test_script_writes_markdown_and_csv(cost, tmp_path):
    out = tmp_path / "cost.md"
    cost.main(
        [
            "fqo/table2",
            "--max-rows",
            "1",
            "--budget",
            "smoke",
            "--device",
            "cpu",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--out",
            str(out),
        ]
    )
    text = out.read_text()
    assert "| fqo/table2 | Softmax | overall | ok |" in text and "**Device:** cpu" in text
    with out.with_suffix(".csv").open() as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    assert [(r["table"], r["row"], r["status"]) for r in rows] == [("fqo/table2", "Softmax", "ok")]
    assert float(rows[0]["ms/step"]) > 0


def test_row_cap_cuts_timed_steps_and_the_hard_cap_raises(cost, monkeypatch):
    (plan,) = cost.plan_rows(["fqo/table2"], max_rows=1)
    session = cost.Session(budget="smoke", device="cpu", steps=6, warmup=1)
    cfg = cost.compose_run(plan.overrides("smoke", session.overrides()))
    dm, _ = cost.resolve_data(plan, cfg, session)
    _, task = cost.build(cfg, dm)
    times, first = [], []
    out = cost.time_steps(cfg, dm, task, session, deadline=0.0, times=times, first_done=first.append)  # passed
    assert out["timed steps"] == 3 and len(times) == 1 + 3  # the warm-up step, then the 3 timed at least
    assert first == times[:1]  # told once, after the first step
    with pytest.raises(cost.RowTimeout), cost.alarm(0.2):
        time.sleep(5)
    with cost.alarm(0.2) as rearm:  # re-armed: the countdown starts again
        rearm(5.0)
        time.sleep(0.4)
    assert not issubclass(cost.RowTimeout, Exception)  # compile fallbacks' `except Exception` must not eat it

    def stuck(cfg, dm, task, session, deadline, times, first_done=lambda _: None):  # a step that never ends
        first_done(0.0)  # the first step is over: the hard cap (0.1 s from the row's start) is armed again
        time.sleep(30)

    monkeypatch.setattr(cost, "time_steps", stuck)  # deterministic: no reliance on how fast this machine steps
    rec = cost.measure_row(plan, cost.Session(budget="smoke", device="cpu", row_timeout_s=0.05))  # hard cap 0.1 s
    assert rec["status"] == "timeout" and "RowTimeout: hard cap" in rec["note"]


def test_list_data_names_the_files_a_fallback_row_reads(cost, capsys):
    from tests.helpers.shared_data import require_shared

    require_shared("wikitext-2", marker="train.txt")  # skips visibly locally, fails under CI
    (plan,) = cost.plan_rows(["fsn/table1"], max_rows=1)  # enwik8 missing: the cpu stand-in reads WikiText-2 bytes
    text = cost.list_data([plan], cost.Session())
    assert "data config of budget cpu" in capsys.readouterr().out
    for name in ("train.txt", "valid.txt", "test.txt"):
        assert f"/wikitext-2/{name} data/wikitext-2/{name}" in text
