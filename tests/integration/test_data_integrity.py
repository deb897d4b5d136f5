"""A corrupted copy of a published dataset is refused with one clear message and nothing written; data.verify=false
trains on it, labelled. Uses the real WikiText-2 (../shared/data/wikitext-2, found through the data path): without
it this test fails, saying so."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oscrepro.data.integrity import DataIntegrityError, check, published, verifying
from oscrepro.data.paths import DatasetNotFoundError, find_dataset
from oscrepro.train import train

ROOT = Path(__file__).resolve().parents[2]
RUN = ["experiment=fqo/lm_wikitext2", "budget=smoke", "trainer.enable_progress_bar=false"]


@pytest.fixture
def wikitext_copy(tmp_path) -> Path:
    src = find_dataset("wikitext-2", marker="train.txt")
    assert src is not None, "the real WikiText-2 is needed (../shared/data/wikitext-2 or <data_dir>/wikitext-2)"
    dst = tmp_path / "data" / "wikitext-2"
    shutil.copytree(src, dst)
    return dst


def _cfg(compose, data: Path, results: Path, *extra: str):
    return compose([*RUN, f"paths.data_dir={data.parent}", f"paths.results_dir={results}", *extra])


def test_the_manifest_knows_the_published_files(wikitext_copy):
    ref = published(wikitext_copy / "train.txt")
    assert ref is not None and ref[:3] == ("wikitext-2", "train.txt", 10_797_148)
    assert published(wikitext_copy.parent / "some_own_corpus.txt") is None
    with verifying(False):  # outside verification nothing is checked
        check(wikitext_copy / "train.txt", 1, "0" * 64)


@pytest.mark.parametrize("damage", ["truncated", "altered byte", "missing split"])
def test_corrupted_copy_is_refused_before_anything_is_written(damage, wikitext_copy, compose, tmp_path):
    if damage == "truncated":
        path = wikitext_copy / "train.txt"
        path.write_bytes(path.read_bytes()[:100_000])
        error = DataIntegrityError
        words = ["train.txt", "100,000 bytes", "10,797,148", "truncated", "data.verify=false"]
    elif damage == "altered byte":
        path = wikitext_copy / "valid.txt"
        blob = bytearray(path.read_bytes())
        blob[5000] ^= 0x01
        path.write_bytes(bytes(blob))
        error, words = DataIntegrityError, ["valid.txt", "other content", "sha256"]
    else:
        (wikitext_copy / "test.txt").unlink()
        error, words = DatasetNotFoundError, ["test.txt"]
    results = tmp_path / "results"
    with pytest.raises(error) as info:
        train(_cfg(compose, wikitext_copy, results))
    assert all(w in str(info.value) for w in words), str(info.value)
    assert not (results / "runs").exists()


def test_the_cli_says_it_in_one_message(wikitext_copy, tmp_path):
    path = wikitext_copy / "train.txt"
    path.write_bytes(path.read_bytes()[:100_000])
    proc = subprocess.run([sys.executable, "-m", "oscrepro.train", *RUN, f"paths.data_dir={wikitext_copy.parent}",
                           f"paths.results_dir={tmp_path / 'r'}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip().startswith("dataset file")  # refused input: exit 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "r" / "runs").exists()


def test_verify_false_trains_on_a_modified_copy_and_says_so(wikitext_copy, compose, tmp_path):
    path = wikitext_copy / "train.txt"
    path.write_bytes(path.read_bytes()[:100_000])
    cfg = _cfg(compose, wikitext_copy, tmp_path / "r", "data.verify=false")
    with pytest.warns(UserWarning, match="vocabulary is 3672, not the requested 10000"):  # the data says it is cut
        assert train(cfg)["status"] == "ok"
    (status,) = (tmp_path / "r" / "runs").rglob("status.json")
    assert "NOT verified" in json.loads(status.read_text())["data_source"]
