"""The chaos test's own checks can fail (a truncated file is found), and a short chaos run passes (slow)."""

from __future__ import annotations

import json

import pytest

from oscrepro.tables.chaos import half_written, run_chaos


def _record(root, status="ok", metrics='{"test/acc": 0.5}', history="epoch,step\n0,1\n"):
    run = root / "runs" / "fqo" / "sva" / "abc"
    run.mkdir(parents=True, exist_ok=True)
    (run / "status.json").write_text(status if status.startswith("{") else json.dumps({"status": status}))
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "metrics.json").write_text(metrics)
    (run / "history.csv").write_text(history)
    return root / "runs"


def test_half_written_finds_each_kind_of_truncation(tmp_path):
    assert half_written(_record(tmp_path / "ok")) == []
    assert half_written(_record(tmp_path / "s", status='{"status": "o')) != []
    assert half_written(_record(tmp_path / "m", metrics='{"test/acc": 0.')) != []
    assert half_written(_record(tmp_path / "h", history="epoch,step\n0,1\n1")) != []
    assert half_written(_record(tmp_path / "u", status="unknown")) != []
    runs = _record(tmp_path / "n")
    (runs / "fqo" / "sva" / "abc" / "metrics.json").unlink()
    assert half_written(runs) == [f"{runs / 'fqo' / 'sva' / 'abc'}: status ok without metrics.json"]


@pytest.mark.slow
def test_killed_builds_finish_to_the_uninterrupted_table(tmp_path):
    """4 SIGKILLs of fqo/table2 at smoke (3-epoch runs, so killed runs resume from checkpoints): ~2 min."""
    report = run_chaos(kills=4, seed=1, extra=["trainer.max_epochs=3"], workdir=tmp_path)
    assert len(report.kills) == 4 and report.half_written == []
    assert report.rounds_equal and all(report.rounds_equal), report.markdown()
