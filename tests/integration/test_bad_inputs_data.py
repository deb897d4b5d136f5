"""Bad data inputs (issue 31, "data are checked by content"): each is refused with one message naming what is wrong,
and nothing is trained on or recorded.

* a same-size edit of a dataset file with its mtime restored (``os.utime``) is seen: the digest cache is keyed by
  ctime and inode too (oscrepro.data.fingerprint), so a published file is refused and any other file's fingerprint
  changes;
* every reader verifies before it parses: a corrupted published UEA ``.ts``, NHP pickle, RMTPP text or python_code
  archive gives the integrity error, not its parser's error;
* an explicit data dir is authoritative (oscrepro.data.paths): empty, missing or partial is a DatasetNotFoundError
  naming what is missing and the place looked, never a read of ``../shared/data``; a directory in place of
  ``train.txt`` is named as such;
* a fall-through between the default roots is said: one console line and the data module's ``source`` (the run
  record's ``data_source``).

Hermetic where it can be: the default roots are moved into tmp (``paths.REPO_ROOT``), with a complete copy of the
dataset in the tmp "shared" root, so that the old silent fall-through would have found it. The committed
``tests/fixtures/published/uea_small/LICENSE_MTS-DA.txt`` is a published file; the WikiText-2 case uses the real
copy through ``require_shared`` (fails under CI when it is missing).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oscrepro import train as train_cli
from oscrepro.data import fingerprint as fp
from oscrepro.data import paths
from oscrepro.data.charlevel import PythonCodeCharDataModule, WikiTextCharDataModule
from oscrepro.data.events import EventDataModule
from oscrepro.data.integrity import DataIntegrityError, verifying
from oscrepro.data.paths import DatasetNotFoundError
from oscrepro.data.uea import UEADataModule
from oscrepro.data.wordlevel import WordLMDataModule
from tests.helpers.shared_data import require_shared

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
PUBLISHED = FIXTURES / "published" / "uea_small" / "LICENSE_MTS-DA.txt"
TICK_S = 0.05  # longer than a coarse file-timestamp tick (<= 10 ms), so a later write gets another ctime
WIKI_RUN = ["experiment=fqo/lm_wikitext2", "budget=smoke", "trainer.enable_progress_bar=false"]


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Default roots in tmp: ``<repo>/data`` (absent) and ``<repo>/../shared/data``; no env root; caches in tmp."""
    repo = tmp_path / "work" / "repo"
    repo.mkdir(parents=True)
    shared = tmp_path / "work" / "shared" / "data"
    shared.mkdir(parents=True)
    monkeypatch.setattr(paths, "REPO_ROOT", repo)
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    return {"repo": repo / "data", "shared": shared, "tmp": tmp_path}


def _wikitext(root: Path) -> Path:
    """A complete, tiny WikiText-2-shaped copy under ``root`` (not the published files)."""
    d = root / "wikitext-2"
    d.mkdir(parents=True)
    (d / "train.txt").write_text(" = Title = \n the cat sat on the mat . \n the dog <unk> the cat . \n")
    (d / "valid.txt").write_text(" the cat ate a fish . \n")
    (d / "test.txt").write_text(" a dog sat . \n")
    return d


def _words(data_dir: Path | None, tmp: Path) -> WordLMDataModule:
    return WordLMDataModule("wikitext2", data_dir=None if data_dir is None else str(data_dir),
                            cache_dir=str(tmp / "cache"), vocab_size=8, seq_len=4, batch_size=2)


def _same_size_edit_keeping_mtime(path: Path) -> None:
    """Flip one byte in place (same size) and put the old atime / mtime back, as ``touch -r`` would."""
    st = path.stat()
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    path.write_bytes(bytes(blob))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


# ------------------------------------------------------------------------------ 1. the digest cache key
def test_same_size_edit_of_a_published_file_with_mtime_restored_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(fp, "RACY_NS", 0)  # cache even a fresh file: the key is tested here, not the racy rule
    copy = tmp_path / "data" / "uea_small" / PUBLISHED.name
    copy.parent.mkdir(parents=True)
    shutil.copyfile(PUBLISHED, copy)
    cache = tmp_path / "cache"
    with verifying():
        clean = fp.fingerprint_files([copy], cache_override=cache)  # verified and cached (memory and disk)
    time.sleep(TICK_S)
    _same_size_edit_keeping_mtime(copy)
    for new_process in (False, True):  # the in-memory cache, then the on-disk cache alone
        if new_process:
            fp._memory.clear()
        with verifying(), pytest.raises(DataIntegrityError) as info:
            fp.fingerprint_files([copy], cache_override=cache)
        msg = str(info.value)
        assert "uea_small/LICENSE_MTS-DA.txt" in msg and "the published size (1,073 bytes) but other content" in msg
    with verifying(False):  # outside verification the digest is still the new content's
        assert fp.fingerprint_files([copy], cache_override=cache) != clean


def test_same_size_edit_of_an_unpublished_file_with_mtime_restored_changes_its_fingerprint(tmp_path, monkeypatch):
    monkeypatch.setattr(fp, "RACY_NS", 0)
    own = tmp_path / "my_corpus" / "train.txt"
    own.parent.mkdir()
    own.write_text("one two three four five six seven\n" * 100)
    before = fp.fingerprint_files([own], cache_override=tmp_path / "cache")
    time.sleep(TICK_S)
    _same_size_edit_keeping_mtime(own)
    assert fp.fingerprint_files([own], cache_override=tmp_path / "cache") != before
    fp._memory.clear()
    assert fp.fingerprint_files([own], cache_override=tmp_path / "cache") != before


def test_wikitext_train_txt_edited_with_mtime_restored_is_refused_by_train(tmp_path, monkeypatch, compose):
    """The issue's case: a warm digest cache, then a same-size edit of the real WikiText-2 train.txt with its mtime
    restored. It trained ``ok`` under the clean fingerprint; now it is refused and nothing is recorded."""
    from oscrepro.train import train

    src = require_shared("wikitext-2", "train.txt")
    monkeypatch.setattr(fp, "RACY_NS", 0)
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    data = tmp_path / "data"
    shutil.copytree(src, data / "wikitext-2")
    with verifying():  # what an earlier run on the clean copy left in the cache
        fp.fingerprint_files(sorted((data / "wikitext-2").glob("*.txt")))
    time.sleep(TICK_S)
    _same_size_edit_keeping_mtime(data / "wikitext-2" / "train.txt")
    results = tmp_path / "results"
    with pytest.raises(DataIntegrityError, match=r"train\.txt .*published size .* but other content"):
        train(compose([*WIKI_RUN, f"paths.data_dir={data}", f"paths.results_dir={results}"]))
    assert not (results / "runs").exists()


# ------------------------------------------------------------------------------ 2. verify before parsing
def _garbage(path: Path, text: str = "this is not the published file\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _uea(root: Path) -> UEADataModule:
    for split in ("TRAIN", "TEST"):
        _garbage(root / "uea_small" / f"AtrialFibrillation_{split}.ts")
    return UEADataModule("AtrialFibrillation", data_dir=str(root), batch_size=4)


def _nhp(root: Path) -> EventDataModule:
    for split in ("train", "dev", "test"):
        _garbage(root / "event_seq_tpp" / "nhp_format" / "data_so_nhp_subset" / "fold1" / f"{split}.pkl")
    return EventDataModule("stackoverflow_nhp", data_dir=str(root))


def _rmtpp(root: Path) -> EventDataModule:
    for name in ("event-1-train", "event-1-test", "time-1-train", "time-1-test"):
        _garbage(root / "event_seq_tpp" / "rmtpp_raw" / "book_order" / f"{name}.txt", "1 x 2\n")
    return EventDataModule("bookorder", data_dir=str(root))


def _python_code(root: Path) -> PythonCodeCharDataModule:
    for split in ("train", "valid"):
        _garbage(root / "python_code" / f"cpython311_stdlib_{split}.jsonl.gz")
    return PythonCodeCharDataModule(data_dir=str(root), seq_len=8, batch_size=2)


@pytest.mark.parametrize("make", [_uea, _nhp, _rmtpp, _python_code], ids=["uea_ts", "nhp_pickle", "rmtpp_text",
                                                                          "python_code_gz"])
def test_a_corrupted_published_file_is_refused_before_it_is_parsed(make, roots):
    """The files carry published names but other bytes, which their parsers reject (aeon, the restricted
    unpickler, the RMTPP parser, gzip): the error must be the integrity error, raised before any parser runs."""
    dm = make(roots["tmp"] / "data")
    with verifying(), pytest.raises(DataIntegrityError) as info:
        dm.setup("fit")
    assert "differs from the published" in str(info.value) and "data.verify=false" in str(info.value)


# ------------------------------------------------------------------------------ 3. an explicit data dir decides
def _explicit_case(case: str, roots: dict[str, Path]) -> tuple[object, list[str]]:
    """(data module on a bad explicit data dir, words its error must contain); the tmp shared root holds a
    complete copy of the dataset, which the old lookup silently read instead."""
    explicit, shared = roots["tmp"] / "explicit", roots["shared"]
    if case == "words_empty_dir":
        _wikitext(shared)
        explicit.mkdir()
        return _words(explicit, roots["tmp"]), ["'wikitext-2' not found", str(explicit / "wikitext-2")]
    if case == "words_missing_dir":
        _wikitext(shared)
        return _words(explicit, roots["tmp"]), ["'wikitext-2' not found", "(does not exist)"]
    if case == "chars_partial_dir":
        _wikitext(shared)
        (explicit / "wikitext-2").mkdir(parents=True)
        (explicit / "wikitext-2" / "train.txt").write_text(" a b c \n")
        return (WikiTextCharDataModule(data_dir=str(explicit), seq_len=4, batch_size=2),
                ["lacks valid.txt, test.txt", str(explicit / "wikitext-2")])
    if case == "uea_partial_dir":
        shutil.copytree(FIXTURES / "uea" / "Epilepsy", shared / "uea" / "Epilepsy")
        (explicit / "uea" / "Epilepsy").mkdir(parents=True)
        shutil.copyfile(FIXTURES / "uea" / "Epilepsy" / "Epilepsy_TRAIN.ts",
                        explicit / "uea" / "Epilepsy" / "Epilepsy_TRAIN.ts")
        return (UEADataModule("Epilepsy", data_dir=str(explicit), batch_size=4),
                ["holds Epilepsy_TRAIN.ts but lacks Epilepsy_TEST.ts", str(explicit / "uea" / "Epilepsy")])
    if case == "uea_empty_dir_not_aeon_bundled":  # BasicMotions ships with aeon: it was read in the dir's place
        explicit.mkdir()
        return UEADataModule("BasicMotions", data_dir=str(explicit), batch_size=4), ["'uea/BasicMotions' not found"]
    assert case == "events_empty_dir"
    shutil.copytree(FIXTURES / "events" / "event_seq_tpp", shared / "event_seq_tpp")
    explicit.mkdir()
    return (EventDataModule("stackoverflow", data_dir=str(explicit)),
            ["event_seq_tpp/rmtpp_raw/so (fold 1)' not found", str(explicit / "event_seq_tpp")])


@pytest.mark.parametrize("case", ["words_empty_dir", "words_missing_dir", "chars_partial_dir", "uea_partial_dir",
                                  "uea_empty_dir_not_aeon_bundled", "events_empty_dir"])
def test_an_explicit_data_dir_without_the_dataset_is_an_error_not_a_fall_through(case, roots):
    dm, words = _explicit_case(case, roots)
    with pytest.raises(DatasetNotFoundError) as info:  # (unverified: the tmp copies are not the published files)
        dm.setup("fit")
    msg = str(info.value)
    assert all(w in msg for w in words), msg
    assert str(roots["shared"]) not in msg and "aeon" not in msg.split("How to supply it")[0]  # looked nowhere else


def test_a_directory_in_place_of_train_txt_is_named(roots):
    data = roots["tmp"] / "data"
    d = _wikitext(data)
    (d / "train.txt").unlink()
    (d / "train.txt").mkdir()
    with pytest.raises(DatasetNotFoundError, match=r"wikitext-2/train\.txt is a directory, not a file"):
        _words(data, roots["tmp"]).setup("fit")


def test_a_fall_through_between_default_roots_is_logged_and_in_the_source(roots, monkeypatch, caplog):
    _wikitext(roots["shared"])
    plain = _words(None, roots["tmp"])  # the ordinary layout: <repo>/data has no wikitext-2, shared has
    plain.setup("fit")
    assert "fell through" not in plain.source
    env = roots["tmp"] / "env_data"
    env.mkdir()
    monkeypatch.setenv(paths.DATA_DIR_ENV, str(env))
    (roots["repo"] / "wikitext-2").mkdir(parents=True)  # an incomplete copy in <repo>/data, skipped
    with caplog.at_level(logging.WARNING, logger="oscrepro.data"):
        dm = _words(str(env), roots["tmp"])  # paths.data_dir echoes $OSCREPRO_DATA_DIR: a default root
        dm.setup("fit")
    note = (f"; wikitext-2 fell through to {roots['shared']} after ${paths.DATA_DIR_ENV}={env} (has no wikitext-2); "
            f"{roots['repo'] / 'wikitext-2'} (incomplete: passed over)")
    assert dm.source.endswith(note), dm.source
    lines = [r.getMessage() for r in caplog.records if r.name == "oscrepro.data"]
    assert lines == [f"data: {note[2:]}"]


def test_a_fall_through_is_said_once_per_process_but_kept_in_every_source(roots, monkeypatch, caplog):
    """A table build sets up one data module per run: the console line comes once, every run's source keeps it."""
    _wikitext(roots["shared"])
    env = roots["tmp"] / "env_once"
    env.mkdir()
    monkeypatch.setenv(paths.DATA_DIR_ENV, str(env))
    with caplog.at_level(logging.WARNING, logger="oscrepro.data"):
        sources = []
        for _ in range(3):
            dm = _words(str(env), roots["tmp"])
            dm.setup("fit")
            sources.append(dm.source)
    lines = [r.getMessage() for r in caplog.records if r.name == "oscrepro.data" and "fell through" in r.getMessage()]
    assert len(lines) == 1, lines
    assert all(s.endswith(f"; {lines[0].removeprefix('data: ')}") for s in sources), sources


def test_training_refuses_a_missing_data_dir_that_a_rebuilt_record_relocates(roots, caplog):
    """setup_data (training) keeps a missing explicit data_dir an error; instantiate_data (rebuilding a run from a
    record made on another machine, whose data_dir is a location key) searches the default roots, and says so."""
    from omegaconf import OmegaConf

    from oscrepro.data.integrity import instantiate_data, setup_data

    _wikitext(roots["shared"])
    elsewhere = roots["tmp"] / "device" / "data"  # the trainer's copy, absent on this machine
    cfg = OmegaConf.create({"_target_": "oscrepro.data.wordlevel.WordLMDataModule", "corpus": "wikitext2",
                            "data_dir": str(elsewhere), "cache_dir": str(roots["tmp"] / "cache"), "vocab_size": 8,
                            "seq_len": 4, "batch_size": 2, "verify": False})
    with pytest.raises(DatasetNotFoundError, match=re.escape(str(elsewhere / "wikitext-2"))):
        setup_data(cfg)
    with caplog.at_level(logging.WARNING, logger="oscrepro.data"):
        dm = instantiate_data(cfg)[0]
    dm.setup("fit")
    assert str(roots["shared"] / "wikitext-2") in dm.source
    assert [r.getMessage() for r in caplog.records if r.name == "oscrepro.data"] == [
        f"data: recorded data_dir {elsewhere} does not exist here: the default data roots are searched (a location "
        f"of the machine that trained the run)"]


# ------------------------------------------------------------------------------ 4. end to end: the CLI
@pytest.mark.parametrize("case", ["empty_dir", "directory_as_train_txt"])
def test_the_cli_refuses_a_bad_data_dir_and_records_nothing(case, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    if case == "directory_as_train_txt":
        d = _wikitext(data)
        (d / "train.txt").unlink()
        (d / "train.txt").mkdir()
    env = {k: v for k, v in os.environ.items() if k != paths.DATA_DIR_ENV}
    env[paths.CACHE_DIR_ENV] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-m", "oscrepro.train", *WIKI_RUN, f"paths.data_dir={data}",
                           f"paths.results_dir={tmp_path / 'r'}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)
    first = proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else ""
    expected = ("Dataset 'wikitext-2' not found." if case == "empty_dir"
                else f"dataset file {data / 'wikitext-2' / 'train.txt'} is a directory, not a file")
    assert proc.returncode == train_cli.EXIT_REFUSED and first.startswith(expected), (proc.returncode,
                                                                                       proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    # nothing written: no record, and not Hydra's job dir either (it is created before the data are read)
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("*")), sorted((tmp_path / "r").rglob("*"))
