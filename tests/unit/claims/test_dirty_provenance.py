"""Committed tables built from uncommitted code are flagged (issue: 31 tables named a ``+dirty`` commit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oscrepro.claims.__main__ import dirty_tables, render
from oscrepro.tables import build as engine


def _table(path: Path, commit: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# t\n\n- **Device:** cpu; **commit** `{commit}`; **date** 2026-11-26\n\n| a |\n|---|\n| 1 |\n")
    return path


def test_dirty_tables_lists_only_tables_built_from_uncommitted_code(tmp_path: Path):
    dirty = _table(tmp_path / "fqo" / "cpu" / "table2.md", "abc1234+dirty")
    _table(tmp_path / "fqo" / "table2.md", "abc1234")
    _table(tmp_path / "runs" / "x" / "notes.md", "abc1234+dirty")  # run records are not tables
    assert dirty_tables(tmp_path) == [(dirty, "abc1234")]
    text = render([], tmp_path)
    assert "tables built from uncommitted code" in text and "fqo/cpu/table2.md" in text


def test_a_build_on_a_dirty_tree_says_so(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    monkeypatch.setattr(engine, "git_commit", lambda: "abc1234+dirty")
    engine.warn_if_dirty("fqo/table2")
    assert "built from uncommitted code (commit abc1234+dirty)" in capsys.readouterr().err
    monkeypatch.setattr(engine, "git_commit", lambda: "abc1234")
    engine.warn_if_dirty("fqo/table2")
    assert capsys.readouterr().err == ""


def test_run_records_from_uncommitted_code_are_counted_and_verified_only_by_a_clean_retrain(tmp_path: Path):
    """A record trained from a dirty tree counts as such; it is verified only by a retrain from a commit whose
    metrics match; a retrain from a dirty tree, or one whose metrics differ, verifies nothing."""
    import json

    from oscrepro.claims.__main__ import dirty_runs

    def rec(name: str, commit: str, again: dict | None = None) -> None:
        d = tmp_path / "runs" / "p" / "exp" / name
        d.mkdir(parents=True)
        (d / "status.json").write_text(json.dumps({"status": "ok", "git_commit": commit,
                                                   **({"checkpoint_recovered": again} if again else {})}))

    rec("a", "abc1234")
    rec("b", "abc1234+dirty")
    rec("c", "abc1234+dirty", {"metrics_match": True, "git_commit": "def5678"})
    rec("d", "abc1234+dirty", {"metrics_match": True, "git_commit": "def5678+dirty"})
    rec("e", "abc1234+dirty", {"metrics_match": False, "git_commit": "def5678"})
    rec("f", "abc1234+dirty", {"metrics_match": True})  # retrained before the commit was recorded
    prov = dirty_runs(tmp_path)["p/exp"]
    assert (prov.records, prov.dirty, prov.verified) == (6, 5, 1)
    text = render([], tmp_path)
    assert "| `p/exp` | 6 | 5 | 1 |" in text
