"""Character-level data modules (fsn): enwik8 zip format on a fixture, codeparrot cache, offline stand-ins."""

from __future__ import annotations

import hashlib
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from oscrepro.data import paths
from oscrepro.data.charlevel import (
    CODE_SYMBOLS,
    CodeParrotDataModule,
    Enwik8DataModule,
    PythonCodeCharDataModule,
    WikiTextCharDataModule,
    build_code_subset,
    encode_code,
)
from oscrepro.data.integrity import instantiate_data
from oscrepro.data.paths import DATA_DIR_ENV, DatasetNotFoundError
from tests.helpers.shared_data import require_shared

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"
FIXTURE_BYTES = zipfile.ZipFile(FIXTURES / "enwik8" / "enwik8.zip").read("enwik8")
FIXTURE_SHA = hashlib.sha256(FIXTURE_BYTES).hexdigest()


def enwik8(**kw: object) -> Enwik8DataModule:
    args = dict(data_dir=str(FIXTURES), expected_sha256=None, expected_vocab_size=None, seq_len=32,
                batch_size=4)
    args.update(kw)
    dm = Enwik8DataModule(**args)
    dm.setup("fit")
    return dm


def test_enwik8_fixture_split_vocab_and_windows() -> None:
    dm = enwik8()
    assert {k: v.size for k, v in dm.splits.items()} == {"train": 18_000, "val": 1_000, "test": 1_000}
    distinct = sorted(set(FIXTURE_BYTES))
    assert dm.vocab_size == len(distinct) and dm.symbols == [bytes([b]) for b in distinct]
    assert (dm.n_features, dm.n_classes) == (None, None)
    assert re.fullmatch(r"[0-9a-f]{16}", dm.fingerprint)
    assert "sha256 NOT checked" in dm.source
    raw_val = FIXTURE_BYTES[18_000:19_000]
    assert b"".join(dm.symbols[i] for i in dm.splits["val"]) == raw_val  # ids decode to the original bytes
    # windows: y is x shifted by one, strides 64 (train) / 128 (eval)
    x, y = next(iter(dm.val_dataloader()))
    assert x.shape == y.shape == (4, 32) and x.dtype == y.dtype == torch.int64
    assert (x[:, 1:] == y[:, :-1]).all()
    assert len(dm.dataset("train")) == len(range(0, 18_000 - 32, 64))
    assert len(dm.dataset("val")) == len(range(0, 1_000 - 32, 128))
    starts, chunks = dm.eval_chunks("val")
    assert chunks.shape == (len(dm.dataset("val")), 33)
    np.testing.assert_array_equal(chunks[:4, :-1], x.numpy())
    np.testing.assert_array_equal(starts[:3], [0, 128, 256])


def test_enwik8_fingerprint_is_stable_and_follows_the_content(tmp_path: Path) -> None:
    """Same file -> same fingerprint (two modules); one changed byte of the member -> another fingerprint."""
    a, b = enwik8(), enwik8()
    assert a.fingerprint == b.fingerprint and re.fullmatch(r"[0-9a-f]{16}", a.fingerprint)
    edited = bytearray(FIXTURE_BYTES)
    edited[100] = FIXTURE_BYTES[101]  # a byte value that occurs in the file: the vocabulary is unchanged
    assert bytes(edited) != FIXTURE_BYTES
    (tmp_path / "enwik8").mkdir()
    with zipfile.ZipFile(tmp_path / "enwik8" / "enwik8.zip", "w") as zf:
        zf.writestr("enwik8", bytes(edited))
    changed = enwik8(data_dir=str(tmp_path))
    assert str(tmp_path) in changed.source
    assert re.fullmatch(r"[0-9a-f]{16}", changed.fingerprint) and changed.fingerprint != a.fingerprint


def test_enwik8_sha_check_and_vocab_warning() -> None:
    dm = enwik8(expected_sha256=FIXTURE_SHA)
    assert "sha256 verified" in dm.source
    with pytest.raises(ValueError, match="sha256"):
        enwik8(expected_sha256="0" * 64)
    with pytest.warns(UserWarning, match="205"):
        enwik8(expected_vocab_size=205)


def test_enwik8_max_chars_keeps_vocab() -> None:
    full, cut = enwik8(), enwik8(max_chars=500)
    assert {k: v.size for k, v in cut.splits.items()} == {"train": 500, "val": 500, "test": 500}
    assert cut.vocab_size == full.vocab_size
    np.testing.assert_array_equal(cut.splits["val"], full.splits["val"][:500])
    assert "max_chars" in cut.source


def test_missing_enwik8_names_what_where_how(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path / "work" / "repo")  # no default root holds a real copy
    dm = Enwik8DataModule(data_dir=str(tmp_path))
    with pytest.raises(DatasetNotFoundError) as err:
        dm.setup("fit")
    msg = str(err.value)
    assert "'enwik8'" in msg and str(tmp_path / "enwik8") in msg  # what and where
    assert "http://mattmahoney.net/dc/enwik8.zip" in msg and "download=true" in msg  # how
    assert "data=standin/enwik8" in msg


def test_missing_codeparrot_names_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    with pytest.raises(DatasetNotFoundError) as err:
        CodeParrotDataModule(data_dir=str(tmp_path), n_chars=1234).setup("fit")
    msg = str(err.value)
    assert "'codeparrot'" in msg and str(tmp_path / "codeparrot") in msg
    assert "codeparrot/codeparrot-clean" in msg and "1,234" in msg and "data=standin/codeparrot" in msg


def test_code_vocabulary_and_oov() -> None:
    assert len(CODE_SYMBOLS) == 97 and len(set(CODE_SYMBOLS)) == 97
    text = "def f():\r\n\treturn 'é'\f\n"
    dropped = encode_code(text, "drop")
    assert "".join(CODE_SYMBOLS[i] for i in dropped) == "def f():\n\treturn ''\n"
    replaced = encode_code(text, "replace")
    assert "".join(CODE_SYMBOLS[i] for i in replaced) == "def f():\n\treturn '?'?\n"
    with pytest.raises(ValueError):
        encode_code(text, "keep")


def test_codeparrot_cached_subset_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    records = ({"content": f"import os\r\n\ndef f{k}(x):\n\treturn x * {k}  # ü\n"} for k in range(500))
    dm = CodeParrotDataModule(data_dir=str(tmp_path), n_chars=10_000, seq_len=16, batch_size=2)
    n_files = build_code_subset(records, 10_000, tmp_path / "codeparrot" / dm.file_name)
    assert 200 < n_files < 500  # stopped once n_chars were collected
    dm.setup("fit")
    assert dm.vocab_size == 97
    assert {k: v.size for k, v in dm.splits.items()} == {"train": 9_000, "val": 500, "test": 500}
    assert dm.decode(dm.splits["train"][:26]) == "import os\n\ndef f0(x):\n\tret"
    with pytest.raises(ValueError, match="fewer"):
        build_code_subset([{"content": "x"}], 10, tmp_path / "short.txt")


def test_wikitext_standin() -> None:
    shared_wiki = require_shared("wikitext-2", "train.txt")
    dm = WikiTextCharDataModule(max_chars=20_000, seq_len=64, batch_size=3)
    dm.setup("fit")
    assert "stand-in" in dm.source and "subset" in dm.source
    assert 90 <= dm.vocab_size <= 256  # distinct bytes of the three files (incl. UTF-8 bytes)
    assert all(v.size == 20_000 for v in dm.splits.values())
    assert dm.decode(dm.splits["val"][:12]) == (shared_wiki / "valid.txt").read_bytes()[:12].decode()
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (3, 64) and (x[:, 1:] == y[:, :-1]).all()


def test_python_code_standin() -> None:
    require_shared("python_code", "cpython311_stdlib_train.jsonl.gz")
    dm = PythonCodeCharDataModule(max_chars=30_000, seq_len=64, batch_size=2)
    dm.setup("fit")
    assert dm.vocab_size == 97 and "stand-in for codeparrot" in dm.source
    assert all(v.size == 30_000 for v in dm.splits.values())
    assert not np.array_equal(dm.splits["val"][:1000], dm.splits["test"][:1000])
    assert int(dm.splits["train"].max()) < 97
    x, y = next(iter(dm.test_dataloader()))
    assert x.shape == (2, 64) and (x[:, 1:] == y[:, :-1]).all()


@pytest.mark.parametrize("name", ["enwik8", "standin/enwik8", "codeparrot", "standin/codeparrot"])
def test_configs_instantiate(name: str) -> None:
    cfg = OmegaConf.load(ROOT / "conf" / "data" / f"{name}.yaml")
    cfg.data_dir = None  # ${paths.data_dir} resolves only inside the full train config
    dm = instantiate_data(cfg)[0]
    assert (dm.seq_len, dm.train_stride, dm.eval_stride, dm.batch_size) == (256, 64, 128, 64)
    assert dm.max_chars is None
