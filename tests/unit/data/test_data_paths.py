"""Dataset lookup order, missing-data errors and content fingerprints (oscrepro.data.paths / .fingerprint)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import pytest

from oscrepro.data import fingerprint as fp
from oscrepro.data import paths
from oscrepro.data.paths import DatasetNotFoundError, find_dataset, missing_dataset_error


@pytest.fixture
def fake_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Four roots, each holding a folder 'ds' with a marker file; the repo root points into tmp."""
    repo = tmp_path / "work" / "repo"
    roots = {
        "explicit": tmp_path / "explicit",
        "env": tmp_path / "env",
        "repo": repo / "data",
        "shared": tmp_path / "work" / "shared" / "data",
    }
    for root in roots.values():
        (root / "ds").mkdir(parents=True)
        (root / "ds" / "marker.txt").write_text("x")
    monkeypatch.setattr(paths, "REPO_ROOT", repo)
    monkeypatch.setenv(paths.DATA_DIR_ENV, str(roots["env"]))
    return roots


def test_find_dataset_order(fake_layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    r = fake_layout
    assert find_dataset("ds", str(r["explicit"])) == r["explicit"] / "ds"
    assert find_dataset("ds") == r["env"] / "ds"
    monkeypatch.delenv(paths.DATA_DIR_ENV)
    assert find_dataset("ds") == r["repo"] / "ds"
    shutil.rmtree(r["repo"] / "ds")
    assert find_dataset("ds") == r["shared"] / "ds"
    shutil.rmtree(r["shared"] / "ds")
    assert find_dataset("ds") is None
    # the explicit root still wins when given, and an empty string means "not given"
    assert find_dataset("ds", str(r["explicit"])) == r["explicit"] / "ds"
    assert find_dataset("ds", "") is None


def test_find_dataset_marker_skips_incomplete_folders(fake_layout: dict[str, Path]) -> None:
    r = fake_layout
    (r["explicit"] / "ds" / "marker.txt").unlink()
    assert find_dataset("ds", str(r["explicit"])) == r["explicit"] / "ds"  # no marker asked: folder counts
    # an explicit root is authoritative: its incomplete copy is not passed over for another root's
    assert find_dataset("ds", str(r["explicit"]), marker="marker.txt") is None
    (r["env"] / "ds" / "marker.txt").unlink()  # between the default roots an incomplete folder is skipped
    assert find_dataset("ds", marker="marker.txt") == r["repo"] / "ds"
    assert find_dataset("ds", marker="absent.bin") is None


def test_search_roots_and_download_root(fake_layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    r = fake_layout
    assert paths.search_roots(str(r["explicit"])) == [r["explicit"]]  # explicit: the only root searched
    assert paths.search_roots(None) == [r["env"], r["repo"], r["shared"]]
    # paths.data_dir defaults to $OSCREPRO_DATA_DIR (conf/paths/default.yaml): that echo is the default order
    assert paths.search_roots(str(r["env"]) + "/") == [r["env"], r["repo"], r["shared"]]
    assert paths.download_root(str(r["explicit"])) == r["explicit"]
    assert paths.download_root(None) == r["env"]
    monkeypatch.delenv(paths.DATA_DIR_ENV)
    assert paths.download_root(None) == r["repo"]
    assert paths.candidate_dirs("x") == [r["repo"] / "x", r["shared"] / "x"]


def test_real_repo_root_is_parent_of_package() -> None:
    assert (paths.REPO_ROOT / "oscrepro" / "data" / "paths.py").is_file()


def test_missing_dataset_error_names_what_where_how(tmp_path: Path) -> None:
    looked = [tmp_path / "a" / "speech_commands", tmp_path / "b" / "speech_commands"]
    (tmp_path / "a" / "speech_commands").mkdir(parents=True)
    err = missing_dataset_error("speech_commands", looked, "  - download: http://example.org/sc.tar.gz")
    assert isinstance(err, DatasetNotFoundError) and isinstance(err, FileNotFoundError)
    msg = str(err)
    assert "'speech_commands' not found" in msg
    for p in looked:
        assert str(p) in msg
    assert "does not exist" in msg  # the second place is flagged as absent
    assert msg.count("does not exist") == 1
    assert paths.DATA_DIR_ENV in msg and "data_dir" in msg
    assert "http://example.org/sc.tar.gz" in msg


def test_cache_dir_override_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "envcache"))
    assert paths.cache_dir("sub") == tmp_path / "envcache" / "sub" and (tmp_path / "envcache" / "sub").is_dir()
    assert paths.cache_dir("sub", tmp_path / "explicit") == tmp_path / "explicit" / "sub"


def _corpus(root: Path) -> list[Path]:
    root.mkdir(parents=True)
    (root / "sub").mkdir()
    files = [root / "train.txt", root / "valid.txt", root / "sub" / "c.bin"]
    for i, f in enumerate(files):
        f.write_bytes(f"content {i}\n".encode() * 100)
    return files


def test_fingerprint_stable_and_location_independent(tmp_path: Path) -> None:
    a = _corpus(tmp_path / "a")
    b = _corpus(tmp_path / "elsewhere" / "b")
    f1 = fp.fingerprint_files(a, cache_override=tmp_path / "c")
    # the documented formula: sha256 over sorted "name \0 sha256(content) \n" lines, first 16 hex digits
    lines = sorted((f.relative_to(tmp_path / "a").as_posix(), hashlib.sha256(f.read_bytes()).hexdigest()) for f in a)
    expected = hashlib.sha256(b"".join(n.encode() + b"\0" + d.encode() + b"\n" for n, d in lines)).hexdigest()
    assert re.fullmatch(r"[0-9a-f]{16}", f1) and f1 == expected[:16]
    assert fp.fingerprint_files(a, cache_override=tmp_path / "c") == f1  # stable across calls
    assert fp.fingerprint_files(list(reversed(a)), cache_override=tmp_path / "c") == f1  # order-free
    assert fp.fingerprint_files(b, cache_override=tmp_path / "c") == f1  # same names + contents elsewhere


def test_fingerprint_sensitive_to_content_name_and_membership(tmp_path: Path) -> None:
    files = _corpus(tmp_path / "a")
    cache = tmp_path / "c"
    f0 = fp.fingerprint_files(files, cache_override=cache)
    st = files[0].stat()
    files[0].write_bytes(files[0].read_bytes().replace(b"content 0", b"content X"))  # same size
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    f1 = fp.fingerprint_files(files, cache_override=cache)
    assert f1 != f0
    renamed = files[1].with_name("valid2.txt")
    files[1].rename(renamed)
    f2 = fp.fingerprint_files([files[0], renamed, files[2]], cache_override=cache)
    assert f2 not in (f0, f1)
    assert fp.fingerprint_files([files[0], renamed], cache_override=cache) != f2
    with pytest.raises(ValueError):
        fp.fingerprint_files([], cache_override=cache)


def test_fingerprint_digest_cache_avoids_rehashing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _corpus(tmp_path / "a")
    cache = tmp_path / "c"
    calls: list[Path] = []
    real = fp.file_sha256

    def counting(p: Path) -> str:
        calls.append(p)
        return real(p)

    monkeypatch.setattr(fp, "file_sha256", counting)
    monkeypatch.setattr(fp, "RACY_NS", 0)  # the files were just written: cache them anyway (racy rule tested below)
    f0 = fp.fingerprint_files(files, cache_override=cache)
    assert len(calls) == 3
    fp._memory.clear()  # simulate a new process: only the on-disk cache is left
    assert fp.fingerprint_files(files, cache_override=cache) == f0
    assert len(calls) == 3
    st = files[2].stat()
    os.utime(files[2], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched -> rehashed, same digest
    assert fp.fingerprint_files(files, cache_override=cache) == f0
    assert len(calls) == 4


def test_a_just_written_file_is_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Racy rule: a file changed less than RACY_NS before it was read may change again within the same timestamp
    tick (same key), so its digest is used once and not cached; the next run reads it again."""
    files = _corpus(tmp_path / "a")
    calls: list[Path] = []
    real = fp.file_sha256
    monkeypatch.setattr(fp, "file_sha256", lambda p: calls.append(p) or real(p))
    f0 = fp.fingerprint_files(files, cache_override=tmp_path / "c")
    assert fp.fingerprint_files(files, cache_override=tmp_path / "c") == f0
    assert len(calls) == 6  # hashed twice: nothing cached while the files are fresh
    monkeypatch.setattr(fp, "RACY_NS", 0)  # as if the files were older than the window
    fp.fingerprint_files(files, cache_override=tmp_path / "c")
    fp.fingerprint_files(files, cache_override=tmp_path / "c")
    assert len(calls) == 9  # hashed once more, then cached


def test_fingerprint_params_distinguishes_values() -> None:
    a = fp.fingerprint_params(n_fft=640, hop=320)
    assert a == fp.fingerprint_params(hop=320, n_fft=640)
    assert a != fp.fingerprint_params(n_fft=640, hop=160)
