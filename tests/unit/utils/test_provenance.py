"""``git_commit``: code changes mark a build ``+dirty``; tool-written outputs (results/, conf/decide/, the golden-config
snapshot) do not."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from oscrepro.utils.provenance import git_commit


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for rel in ("oscrepro/model.py", "conf/decide/cpu.yaml", "conf/train.yaml", "results/t.md",
                "tests/fixtures/golden_configs.json", "tests/unit/test_x.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("a\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    return tmp_path


def test_clean_tree_names_the_commit(repo: Path) -> None:
    assert not git_commit(repo).endswith("+dirty") and git_commit(repo) != "unknown"


@pytest.mark.parametrize("rel", ["results/t.md", "conf/decide/cpu.yaml", "tests/fixtures/golden_configs.json"])
def test_outputs_do_not_dirty(repo: Path, rel: str) -> None:
    (repo / rel).write_text("b\n")
    assert not git_commit(repo).endswith("+dirty")


@pytest.mark.parametrize("rel", ["oscrepro/model.py", "conf/train.yaml", "tests/unit/test_x.py"])
def test_code_and_config_dirty(repo: Path, rel: str) -> None:
    (repo / rel).write_text("b\n")
    assert git_commit(repo).endswith("+dirty")


def test_outside_git_is_unknown(tmp_path: Path) -> None:
    assert git_commit(tmp_path / "nowhere") == "unknown"


@pytest.mark.parametrize(("header", "commit", "dirty"), [
    ("> git_commit: 0c739c1+dirty", "0c739c1+dirty", True),      # a benchmark's header
    ("> git_commit: fe49953", "fe49953", False),
    ("- **Device:** cpu: X; **commit** `ab12cd3+dirty`; **date** d;", "ab12cd3+dirty", True),  # the table engine's
])
def test_report_reads_the_commit_and_dirtiness_of_a_header(tmp_path: Path, header: str, commit: str, dirty: bool):
    from oscrepro.report.collect import Document
    from oscrepro.report.provenance import read_provenance

    (tmp_path / "t.md").write_text(f"# a table\n\n{header}\n")
    prov = read_provenance(tmp_path, Document(path=Path("t.md"), page="other"))
    assert (prov.commit, prov.dirty) == (commit, dirty)
