"""Weights of source runs kept without them are recovered in the build's pool (oscrepro.tables.recover
recover_in_pool, called by oscrepro.tables.sources.gather_runs) — an analysis reading 18 source models must not
retrain them one after another — and only the records that lack them, each once. The retraining itself is
replaced by a recorder (its bit-exactness is tests/integration/test_recover.py's)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from oscrepro.tables import recover


def _record(d: Path, status: str = "ok", ckpt: bool = False) -> Path:
    d.mkdir(parents=True)
    (d / "status.json").write_text(json.dumps({"status": status}))
    if ckpt:
        (d / "checkpoints").mkdir()
        (d / "checkpoints" / "last.ckpt").write_bytes(b"w")
    return d


def _fake_recover(run_dir: Path, **_: object) -> str:
    """Stands in for a retraining: writes the checkpoint and the pid of the process that did it."""
    (Path(run_dir) / "checkpoints").mkdir()
    (Path(run_dir) / "checkpoints" / "last.ckpt").write_text(str(os.getpid()))
    return "recovered"


def test_weightless_picks_finished_records_without_checkpoints_once(tmp_path: Path) -> None:
    a, b = _record(tmp_path / "a"), _record(tmp_path / "b", ckpt=True)
    c, d = _record(tmp_path / "c", status="diverged"), _record(tmp_path / "d")
    assert recover.weightless([a, b, c, d, a]) == [a, d]


def test_inprocess_recovers_each_weightless_record_once_in_this_process(tmp_path, monkeypatch, capsys):
    dirs = [_record(tmp_path / f"r{i}", ckpt=(i == 1)) for i in range(3)]
    monkeypatch.setattr(recover, "recover_checkpoint", _fake_recover)
    recover.recover_in_pool([*dirs, dirs[0]], "inprocess", 2, key="toy/analysis")
    assert all(recover.has_checkpoint(d) for d in dirs)
    assert {(d / "checkpoints" / "last.ckpt").read_text() for d in (dirs[0], dirs[2])} == {str(os.getpid())}
    out = capsys.readouterr().out
    assert "[table toy/analysis] 2 source run(s) kept without weights" in out and "1 at a time" in out
    assert "weights recovered 2/2" in out
    recover.recover_in_pool(dirs, "inprocess", 2)  # nothing left to recover: silent, nothing retrained
    assert capsys.readouterr().out == ""


def test_joblib_recovers_in_worker_processes(tmp_path, monkeypatch, capsys):
    dirs = [_record(tmp_path / f"r{i}") for i in range(2)]
    monkeypatch.setattr(recover, "recover_checkpoint", _fake_recover)  # loky pickles the patched module global
    recover.recover_in_pool(dirs, "joblib", 2)
    pids = {(d / "checkpoints" / "last.ckpt").read_text() for d in dirs}
    assert str(os.getpid()) not in pids  # retrained by the pool's workers, not this process
    assert "2 at a time" in capsys.readouterr().out


def test_a_failed_recovery_is_an_error(tmp_path, monkeypatch):
    d = _record(tmp_path / "r")

    def fail(run_dir: Path, **_: object) -> str:
        raise recover.RunNotUsableError(f"retraining {run_dir} ended with status 'diverged'")

    monkeypatch.setattr(recover, "recover_checkpoint", fail)
    with pytest.raises(recover.RunNotUsableError, match="ended with status"):
        recover.recover_in_pool([d], "inprocess", 1)
