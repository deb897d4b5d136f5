"""The bad-inputs census (scripts/bad_inputs_census.py, issue 31) classifies what a command did: fake commands with
a known outcome (exit 0 with an ``ok`` record, one line and exit 2, a traceback, a NaN metric, ...) must land in
their category, one real bad input runs end to end in its own temp dirs, and every case keeps its output out of the
repo's results/."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_census():
    spec = importlib.util.spec_from_file_location("bad_inputs_census", ROOT / "scripts" / "bad_inputs_census.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


census = _load_census()

# A fake command: argv[1] = the case's results dir, argv[2] = what to do.
FAKE = r'''
import json, pathlib, sys
results, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
def record(status, metrics=None, reason=""):
    run = results / "runs" / "x" / "abc123"
    run.mkdir(parents=True, exist_ok=True)
    (run / "status.json").write_text(json.dumps({"status": status, "reason": reason}))
    if metrics is not None:
        (run / "metrics.json").write_text(json.dumps(metrics))
if mode == "ok":
    record("ok", {"test/acc": 0.9, "epochs": 1})
elif mode == "nan":
    record("ok", {"test/acc": float("nan"), "epochs": 1})
elif mode == "epochs0":
    record("ok", {"test/acc": 0.5, "epochs": 0})
elif mode == "failed":
    record("failed", reason="RuntimeError: boom")
    print("run failed; see status.json", file=sys.stderr)
    sys.exit(1)
elif mode == "diverged":
    record("diverged", reason="non-finite final metric(s) test/loss=nan")
elif mode == "refuse":
    print("invalid config, nothing was run or written: seed=-1: must be an integer >= 0", file=sys.stderr)
    sys.exit(2)
elif mode == "traceback":
    raise ValueError("seed=-1")
elif mode == "litter":
    results.mkdir(parents=True, exist_ok=True)
    (results / "status.json.123.tmp").write_text("{")
    print("disk full", file=sys.stderr)
    sys.exit(1)
elif mode == "ok_exit1":
    record("ok", {"test/acc": 0.9, "epochs": 1})
    sys.exit(1)
'''


def _fake(mode: str, expect=census.REFUSE, **kw) -> census.Case:
    return census.Case(name=f"fake {mode}", item="-", argv=["{py}", "-c", FAKE, "{results}", mode], expect=expect,
                       show=mode, cost=0.1, **kw)


DIVERGED = census.Expect("record", statuses=frozenset({"diverged"}), say="non-finite", nonzero=None)


@pytest.mark.parametrize(("mode", "expect", "kw", "category"), [
    ("refuse", census.Expect(say="seed"), {}, "refused cleanly"),
    ("refuse", census.Expect(say="checkpoint"), {}, "refused, other reason"),
    ("ok", census.REFUSE, {}, "silently accepted"),
    ("nan", census.REFUSE, {}, "wrong record"),
    ("epochs0", census.REFUSE, {}, "wrong record"),
    ("ok_exit1", census.REFUSE, {"ok_is_wrong": True}, "wrong record"),
    ("traceback", census.REFUSE, {}, "refused with traceback"),
    ("failed", census.REFUSE, {}, "recorded failed"),
    ("litter", census.REFUSE, {}, "recorded failed"),
    ("diverged", DIVERGED, {}, "refused cleanly"),
    ("ok", DIVERGED, {}, "silently accepted"),
    ("failed", DIVERGED, {}, "recorded failed"),
    ("ok", census.Expect("work"), {}, "worked"),
    ("refuse", census.Expect("work"), {}, "wrongly refused"),
])
def test_the_classifier_puts_each_outcome_in_its_category(tmp_path, mode, expect, kw, category):
    result = census.run_case(_fake(mode, expect, **kw), tmp_path, tmp_path / "cache", 0)
    assert result.category == category, (result.note, result.observed)
    if mode == "refuse":
        assert result.observed.exit == 2 and result.observed.written == [] and len(result.observed.message) == 1
    if mode == "ok":
        assert result.observed.records == {"runs/x/abc123": "ok"}


def test_a_pickle_that_ran_its_code_is_reported(tmp_path):
    """The census's own marker: a case whose planted code ran is ``code ran``, whatever its exit code."""
    def plant(d):
        census.marker(d).write_text("")

    result = census.run_case(_fake("refuse", setup=plant), tmp_path, tmp_path / "cache", 0)
    assert result.category == "code ran"


def test_every_case_writes_only_into_its_own_temp_dirs():
    all_cases = census.cases()
    assert len(all_cases) >= 60 and len({c.name for c in all_cases}) == len(all_cases)
    assert {"1", "2", "3", "4", "5", "6"} <= {i for c in all_cases for i in c.item.split(",")}
    for c in all_cases:
        joined = " ".join(c.argv)
        if "oscrepro.train" in joined:
            assert "paths.results_dir={results}" in joined or "paths.results_dir='{results}'" in joined, c.name
            assert "hydra.run.dir={hydra}" in joined, c.name
        else:
            assert c.argv[c.argv.index("--results-dir") + 1] == "{results}", c.name


def test_a_real_bad_input_is_refused_cleanly_in_its_own_dir(tmp_path):
    (seed,) = [c for c in census.cases() if c.name == "seed -1"]
    runs = ROOT / "results" / "runs"
    before = sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []
    result = census.run_case(seed, tmp_path, tmp_path / "cache", 0)
    assert result.category == "refused cleanly", (result.note, result.observed.output[-2000:])
    assert result.observed.exit != 0 and result.observed.written == []
    assert "seed" in census.headline(result.observed)
    assert (sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []) == before
