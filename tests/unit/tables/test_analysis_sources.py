"""An analysis table's source runs are the engine's (oscrepro.tables.sources): the adapter declares them, the
engine trains the missing ones with the build's launcher (never the adapter), ``--render-only`` trains nothing, and
the adapter gets the finished run dirs. Training is replaced by a recorder that writes finished records, so nothing
is trained here (the source cell is fqo Table 2's smoke Softmax cell, composed only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oscrepro.tables import sources
from oscrepro.tables.build import run_analysis
from oscrepro.tables.launch import resolve_launcher
from oscrepro.tables.runs import MissingRunsError
from oscrepro.tables.sources import RunNeeds, SourceCell, SourceRuns, reads_runs
from oscrepro.tables.spec import BUDGETS, TableSpec
from oscrepro.tables.values import Num

ADAPTER_CALLS: list[SourceRuns] = []


def toy_runs(row: str, **_: Any) -> RunNeeds:
    """The toy analysis reads one cell of fqo Table 2."""
    return RunNeeds("toy/analysis", {"src": SourceCell("fqo/table2", row, checkpoints=False)})


@reads_runs(toy_runs)
def toy_adapter(out_dir: Path, budget: str, results_dir: Path, runs: SourceRuns, row: str
                ) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """Returns numbers (one per run dir it was given); trains nothing and takes no launcher."""
    ADAPTER_CALLS.append(runs)
    return ["Row", "runs"], [{"Row": row, "runs": Num(len(runs["src"]), "{:d}")}], list(runs.notes)


def _spec(tmp_path: Path, **analysis: Any) -> TableSpec:
    return TableSpec(key="toy/analysis", paper="toy", title="toy", kind="analysis", experiment=None,
                     seeds={b: 1 for b in BUDGETS}, rows=[], columns=[], budget_notes={},
                     analysis={"_target_": f"{__name__}.toy_adapter", "row": "Softmax", **analysis}, post={},
                     source="", path=tmp_path / "conf" / "table" / "toy" / "analysis.yaml")


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[Any], str]]:
    """Every call of the engine's launch: (requests, pool name); each request gets a finished record."""
    calls: list[tuple[list[Any], str]] = []

    def fake_launch(missing, pool, progress, max_workers=None, detach=False):
        calls.append((list(missing), pool.name))
        for r in missing:
            r.run_dir.mkdir(parents=True, exist_ok=True)
            (r.run_dir / "status.json").write_text(json.dumps({"status": "ok"}))

    monkeypatch.setattr(sources, "launch", fake_launch)
    ADAPTER_CALLS.clear()
    return calls


def test_missing_source_runs_are_trained_by_the_engine_launcher(tmp_path, launched, capsys):
    results = tmp_path / "results"
    columns, rows, notes = run_analysis(_spec(tmp_path), "smoke", resolve_launcher("joblib"), [], results,
                                        tmp_path / "out", None, render_only=False)
    assert len(launched) == 1
    reqs, pool = launched[0]
    assert pool == "joblib" and len(reqs) == 1  # the build's launcher, fqo Table 2's one smoke seed
    assert reqs[0].cfg.table_name == "fqo/table2" and reqs[0].run_dir.is_relative_to(results / "runs")
    assert ADAPTER_CALLS[0]["src"] == [reqs[0].run_dir]  # the adapter got the finished run dir
    assert rows == [{"Row": "Softmax", "runs": Num(1, "{:d}")}]
    assert "1 source runs, 1 to train (joblib)" in capsys.readouterr().out
    run_analysis(_spec(tmp_path), "smoke", resolve_launcher("joblib"), [], results, tmp_path / "out", None, False)
    assert len(launched) == 1  # finished runs are never trained again


def test_render_only_trains_nothing(tmp_path, launched):
    results = tmp_path / "results"
    with pytest.raises(MissingRunsError, match=r"python -m oscrepro.table fqo/table2 --budget smoke"):
        run_analysis(_spec(tmp_path), "smoke", resolve_launcher("inprocess"), [], results, tmp_path / "out", None,
                     render_only=True)
    assert not launched and not ADAPTER_CALLS and not (results / "runs").exists()


def test_the_specs_train_missing_false_trains_nothing_and_its_launcher_is_the_default(tmp_path, launched):
    results = tmp_path / "results"
    with pytest.raises(MissingRunsError):
        run_analysis(_spec(tmp_path, train_missing=False), "smoke", resolve_launcher("inprocess"), [], results,
                     tmp_path / "out", None, render_only=False)
    assert not launched
    run_analysis(_spec(tmp_path, launcher="joblib"), "smoke", resolve_launcher("inprocess"), [], results,
                 tmp_path / "out", None, render_only=False)
    assert [pool for _, pool in launched] == ["joblib"]  # the spec's launcher where the build chose none


def test_weights_the_adapter_loads_are_recovered_in_the_builds_pool(tmp_path, launched, monkeypatch):
    """A cell whose weights the adapter loads (``checkpoints=True``): its finished records are handed to
    ``recover_in_pool`` with the build's pool before they are resolved (one by one, serially, was the old way);
    a cell that reads metrics only (``checkpoints=False``, the toy's) hands none."""
    pooled: list[tuple[list[Path], str, int]] = []
    monkeypatch.setattr(sources, "recover_in_pool", lambda dirs, pool, workers, key="": pooled.append(
        (list(dirs), pool, workers)))
    results = tmp_path / "results"
    run_analysis(_spec(tmp_path), "smoke", resolve_launcher("joblib"), [], results, tmp_path / "out", None, False)
    assert pooled == [([], "joblib", pooled[0][2])]  # metrics only: nothing to recover
    needs = RunNeeds("toy/analysis", {"src": SourceCell("fqo/table2", "Softmax", checkpoints=True)})
    monkeypatch.setattr(sources, "resolve_needs", lambda *a, **k: SourceRuns({"src": []}, []))
    sources.gather_runs("toy/analysis", "smoke", needs, results, resolve_launcher("joblib"), 2, True, False)
    dirs, pool, workers = pooled[-1]
    assert pool == "joblib" and workers == 2 and len(dirs) == 1 and dirs[0].is_relative_to(results / "runs")
