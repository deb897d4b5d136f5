"""GPT-2 byte-level BPE from OpenAI's files (coupledqk Sec. 3.2): known ids, vocabulary size, lossless round trip,
clear error when the files are missing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from oscrepro.data import bpe, paths
from oscrepro.data.paths import DatasetNotFoundError
from tests.helpers.shared_data import require_shared


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)


@pytest.fixture()
def tok():
    require_shared(bpe.DATASET_NAME)
    return bpe.gpt2_tokenizer()


def test_known_ids(tok) -> None:
    assert tok.encode("Hello world").ids == [15496, 995]
    # the second check string of shared/data/gpt2_tokenizer/SOURCE.md (tiktoken and HF agree on it)
    assert tok.encode(" The quick brown fox jumps over the lazy dog.").ids == [
        383, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13]


def test_vocabulary_and_eos(tok) -> None:
    assert tok.get_vocab_size() == bpe.VOCAB_SIZE == 50_257
    assert tok.token_to_id("<|endoftext|>") == bpe.EOS_ID == 50_256
    assert tok.encode("a<|endoftext|>b").ids == [64, 50_256, 65]  # the literal special string is the EOS id
    assert bpe.gpt2_tokenizer() is tok  # cached


def _random_unicode(rng: np.random.Generator, n: int) -> str:
    """Code points from ASCII, Latin-1, CJK, emoji, combining marks, controls and whitespace (no surrogates)."""
    ranges = [(0, 0x7F), (0x80, 0x24F), (0x300, 0x36F), (0x4E00, 0x9FFF), (0x1F300, 0x1FAFF), (0x2000, 0x206F),
              (0xE000, 0xF8FF), (0x10000, 0x1000F)]
    picks = rng.integers(len(ranges), size=n)
    return "".join(chr(int(rng.integers(ranges[k][0], ranges[k][1] + 1))) for k in picks)


def test_decode_inverts_encode_on_arbitrary_unicode(tok) -> None:
    fixed = ["", " ", "  leading and trailing  ", "tabs\tand\r\nCRLF\n\n\n", "naïve café ß ﬁ", "日本語のテキスト",
             "emoji 🤖🧬👩‍👩‍👧 flags 🇩🇪", "e\u0301 combining", "\x00\x01\x7f controls", "Ω≈ç√∫˜µ≤≥÷",
             "<|endoftext|> inside", "'s 've 're  ll123 4567 ..."]
    rng = np.random.default_rng(0)
    texts = fixed + [_random_unicode(rng, int(rng.integers(1, 200))) for _ in range(200)]
    for s in texts:
        ids = tok.encode(s).ids
        assert all(0 <= i < bpe.VOCAB_SIZE for i in ids)
        assert tok.decode(ids, skip_special_tokens=False) == s, repr(s)


def test_hugging_face_file_names_are_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = require_shared(bpe.DATASET_NAME, "encoder.json")
    folder = tmp_path / "data" / bpe.DATASET_NAME
    folder.mkdir(parents=True)
    (folder / "vocab.json").symlink_to(shared / "encoder.json")
    (folder / "merges.txt").symlink_to(shared / "vocab.bpe")
    vocab, merges = bpe.tokenizer_files(tmp_path / "data")
    assert (vocab.name, merges.name) == ("vocab.json", "merges.txt")
    assert bpe.gpt2_tokenizer(tmp_path / "data").encode("Hello world").ids == [15496, 995]


def test_missing_files_raise_the_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path / "work" / "repo")  # no default root holds a copy
    half = tmp_path / "given" / bpe.DATASET_NAME
    half.mkdir(parents=True)
    (half / "encoder.json").write_text("{}")  # a vocabulary without merges is no tokenizer
    with pytest.raises(DatasetNotFoundError) as err:
        bpe.gpt2_tokenizer(tmp_path / "given")
    msg = str(err.value)
    assert "Dataset 'gpt2_tokenizer' not found" in msg and str(half) in msg
    assert "vocab.json + merges.txt" in msg and "encoder.json + vocab.bpe" in msg and bpe.OPENAI_URL in msg
