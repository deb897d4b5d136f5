"""Word-level LM data (WikiText-2 10K, TinyStories 8K; fqo Sec. 4.2, App. B): vocabulary, <unk>, windows."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from oscrepro.data import paths
from oscrepro.data import wordlevel as wl
from oscrepro.data.paths import DatasetNotFoundError
from tests.helpers.shared_data import require_shared


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)


def _wikitext_fixture(root: Path) -> Path:
    d = root / "wikitext-2"
    d.mkdir(parents=True)
    (d / "train.txt").write_text(" = Title = \n \n the cat sat on the mat . \n the dog <unk> the cat . \n zebra \n")
    (d / "valid.txt").write_text(" the cat ate a fish . \n \n")
    (d / "test.txt").write_text(" a dog sat . \n")
    return d


def _module(data_dir: Path, tmp_path: Path, corpus: str = "wikitext2", **kw: object) -> wl.WordLMDataModule:
    kw = {"vocab_size": 8, "seq_len": 4, "batch_size": 2, **kw}
    dm = wl.WordLMDataModule(corpus, data_dir=str(data_dir), cache_dir=str(tmp_path / "cache"), **kw)
    dm.setup("fit")
    return dm


def test_train_vocab_order_and_ties() -> None:
    counts = {"b": 3, "a": 3, "c": 5, "<unk>": 9, "d": 1}
    vocab = wl.train_vocab(wl.Counter(counts), 5)
    assert vocab == {"<unk>": 0, "<eos>": 1, "c": 2, "a": 3, "b": 4}  # specials, then count desc, ties a-z


def test_unk_handling_and_eos(tmp_path: Path) -> None:
    _wikitext_fixture(tmp_path / "data")
    dm = _module(tmp_path / "data", tmp_path)
    tok = dm.tokenizer
    assert dm.vocab_size == 8 and tok.token_to_id("<unk>") == 0 and tok.token_to_id("<eos>") == 1
    # train counts: the 4; "." "=" cat 2; Title dog mat on sat zebra 1 -> 6 words fit after the two specials
    assert [tok.token_to_id(w) for w in ("the", ".", "=", "cat", "Title", "dog")] == [2, 3, 4, 5, 6, 7]
    assert tok.token_to_id("zebra") is None and tok.token_to_id("mat") is None
    ids = tok.encode("the zebra <unk> fish", add_special_tokens=False).ids
    assert ids == [2, 0, 0, 0]  # unknown words and the literal <unk> share id 0
    # one <eos> per line, blank lines included (pytorch/examples convention): 5 train lines
    assert int((dm.streams["train"] == 1).sum()) == 5
    assert int((dm.streams["val"] == 1).sum()) == 2
    assert dm.streams["train"].numel() == 3 + 0 + 7 + 6 + 1 + 5
    assert (dm.n_features, dm.n_classes) == (None, None) and len(dm.fingerprint) == 16
    assert "WikiText-2" in dm.source and "vocab 8" in dm.source


def test_lm_windows_shift_by_one() -> None:
    ds = wl.LMWindows(torch.arange(105, dtype=torch.int32), seq_len=10)
    assert len(ds) == 10  # (105 - 1) // 10, last incomplete window dropped
    for i in (0, 3, 9):
        x, y = ds[i]
        assert x.dtype == torch.long and x.shape == y.shape == (10,)
        assert torch.equal(x, torch.arange(10 * i, 10 * i + 10)) and torch.equal(y, x + 1)
    assert len(wl.LMWindows(torch.arange(101), 10)) == 10 and len(wl.LMWindows(torch.arange(100), 10)) == 9


def test_module_batches_are_next_token_pairs(tmp_path: Path) -> None:
    _wikitext_fixture(tmp_path / "data")
    dm = _module(tmp_path / "data", tmp_path)
    x, y = next(iter(dm.val_dataloader()))
    assert x.shape == y.shape == (1, 4) and x.dtype == y.dtype == torch.long
    stream = dm.streams["val"].long()
    assert torch.equal(x[0], stream[:4]) and torch.equal(y[0], stream[1:5])
    budget = _module(tmp_path / "data", tmp_path, max_train_tokens=9)
    assert budget.streams["train"].numel() == 9 and torch.equal(budget.streams["train"], dm.streams["train"][:9])
    assert budget.vocab_size == dm.vocab_size and "max_train_tokens=9" in budget.source


def test_fast_path_matches_tokenizers_reference() -> None:
    lines = ["The Cat, sat. ÉCOLE naïve\t tabs", "", "   ", "ΣΑΣ stop Zebra", "unknown words here the cat"]
    for lowercase in (False, True):
        probe = wl.build_tokenizer({wl.UNK: 0}, lowercase, "whitespace")
        counts = wl.count_words(lines, probe)
        assert wl.count_words_fast(lines, probe) == counts
        tok = wl.build_tokenizer(wl.train_vocab(counts, 9), lowercase, "whitespace")
        for skip in (False, True):
            ref, fast = wl.encode_lines(lines, tok, skip), wl.encode_lines_fast(lines, tok, skip)
            assert torch.equal(ref[0], fast[0]) and torch.equal(ref[1], fast[1])
    assert wl.fast_path_applies(lines, "whitespace")
    assert not wl.fast_path_applies(["a\x1cb"], "whitespace")  # str.split would split, WhitespaceSplit not
    assert not wl.fast_path_applies(lines, "whitespace_punct")


def test_punct_pretokenizer_and_lowercase() -> None:
    tok = wl.build_tokenizer({"<unk>": 0, "<eos>": 1, "said": 2, ",": 3, "spot": 4}, True, "whitespace_punct")
    assert tok.encode("Spot said, hi", add_special_tokens=False).ids == [4, 2, 3, 0]
    with pytest.raises(ValueError):
        wl.build_tokenizer({"<unk>": 0}, False, "bpe")


def test_halve_at_line_cuts_on_a_line_end() -> None:
    ids, ends = wl.encode_lines_fast(
        ["a b c", "d", "e f g h", "i j"], wl.build_tokenizer({"<unk>": 0, "<eos>": 1}, False, "whitespace"), False
    )
    first, second = wl.halve_at_line(ids, ends)
    assert first.numel() + second.numel() == ids.numel() == 14
    assert first.numel() in ends.tolist() and first.numel() == 6  # line ends at 4, 6, 11, 14: nearest to 7


def test_tokenizer_and_ids_are_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _wikitext_fixture(tmp_path / "data")
    first = _module(tmp_path / "data", tmp_path)
    key_dirs = list((tmp_path / "cache" / "wordlevel").iterdir())
    assert len(key_dirs) == 1 and (key_dirs[0] / "tokenizer.json").is_file()
    assert first.fingerprint in key_dirs[0].name

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("should be served from the cache")

    monkeypatch.setattr(wl, "count_words_fast", boom)
    monkeypatch.setattr(wl, "encode_lines_fast", boom)
    again = _module(tmp_path / "data", tmp_path)
    assert torch.equal(again.streams["train"], first.streams["train"])
    (tmp_path / "data" / "wikitext-2" / "test.txt").write_text(" a cat . \n")  # new content -> new key
    with pytest.raises(AssertionError, match="cache"):
        _module(tmp_path / "data", tmp_path)


def test_missing_corpus_and_offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path / "repo")
    with pytest.raises(DatasetNotFoundError) as ei:
        _module(tmp_path / "nowhere", tmp_path)
    msg = str(ei.value)
    assert "wikitext-2" in msg and str(tmp_path / "nowhere" / "wikitext-2") in msg and "load_dataset" in msg

    def offline(*a: object, **k: object) -> None:
        raise ConnectionError("no network")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    with pytest.raises(DatasetNotFoundError, match="no network"):
        _module(tmp_path / "nowhere", tmp_path, download=True)


def test_hub_copy_is_written_and_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path / "repo")
    calls = []

    def fake_load(name: str, config: str | None) -> dict:
        calls.append((name, config))
        return {
            "train": {"text": ["Once upon a time.", "The end."]},
            "validation": {"text": ["Once a cat.", "Then a dog.", "The end."]},
        }

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=fake_load))
    dm = _module(
        tmp_path / "root", tmp_path, corpus="tinystories", lowercase=True, skip_blank_lines=True, download=True
    )
    assert calls == [("roneneldan/TinyStories", None)]
    assert (tmp_path / "root" / "tinystories" / "TinyStories-train.txt").read_text() == "Once upon a time.\nThe end.\n"
    assert "hub" in dm.source and "subset" not in dm.source
    assert dm.streams["val"].numel() + dm.streams["test"].numel() == 4 + 4 + 3  # valid halved at a line end


def test_shared_wikitext2_vocab_10k(tmp_path: Path) -> None:
    shared = require_shared("wikitext-2", "train.txt").parent
    dm = _module(shared, tmp_path, vocab_size=10_000, seq_len=50, batch_size=64)
    assert dm.vocab_size == 10_000 == dm.tokenizer.get_vocab_size()
    sizes = [dm.streams[s].numel() for s in ("train", "val", "test")]
    assert sizes == [2_088_628, 217_646, 245_569]  # pytorch/examples counts, one <eos> per line
    assert int(dm.streams["train"].max()) == 9_999 and int(dm.streams["train"].min()) == 0
    unk = float((dm.streams["val"] == 0).float().mean())
    assert 0.05 < unk < 0.2  # the corpus' own <unk> (~2.6%) plus words outside the 10K
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == y.shape == (64, 50)


def test_shared_tinystories_vocab_8k(tmp_path: Path) -> None:
    shared = require_shared("tinystories", "TinyStories-train-prefix-lowercased.txt").parent
    dm = _module(
        shared, tmp_path, corpus="tinystories", vocab_size=8_000, lowercase=True, skip_blank_lines=True, seq_len=50
    )
    assert dm.vocab_size == 8_000
    assert not any(w != w.lower() for w in dm.tokenizer.get_vocab())
    assert dm.tokenizer.encode("Spot", add_special_tokens=False).ids == dm.tokenizer.encode("spot").ids
    n_val, n_test = dm.streams["val"].numel(), dm.streams["test"].numel()
    assert abs(n_val - n_test) < 0.01 * (n_val + n_test)
    assert "subset" in dm.source and "halved" in dm.source


def test_chunked_encoding_matches_single_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = ["a b", "", "c", "a a a", "", "b c d"]
    tok = wl.build_tokenizer({"<unk>": 0, "<eos>": 1, "a": 2, "b": 3, "c": 4}, False, "whitespace")
    whole = [wl.encode_lines_fast(lines, tok, skip) for skip in (False, True)]
    monkeypatch.setattr(wl, "_LINE_CHUNK", 2)
    for skip, (ids, ends) in zip((False, True), whole, strict=True):
        for fn in (wl.encode_lines_fast, wl.encode_lines):
            c_ids, c_ends = fn(lines, tok, skip)
            assert torch.equal(c_ids, ids) and torch.equal(c_ends, ends)
    assert whole[1][0].tolist() == [2, 3, 1, 4, 1, 2, 2, 2, 1, 3, 4, 0, 1]
    assert whole[1][1].tolist() == [3, 5, 9, 13]
