"""GLUE data (oscrepro.data.glue): the real SST-2 / QNLI copies' sizes and labels, and on the committed fixture
(tests/fixtures/glue, GLUE layout) parsing, pair joining, truncation, padding / lengths, the seeded stratified
dev_holdout split and the refusal to train on dev silently."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, pre_tokenizers
from tokenizers.models import WordLevel

from oscrepro.data import glue, paths
from oscrepro.data.base import DataModule, model_dims
from oscrepro.data.glue import TASKS, GLUEDataModule, join_segments, read_tsv, stratified_holdout
from oscrepro.data.paths import DatasetNotFoundError
from tests.helpers.shared_data import require_shared

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "glue"
EOS = "<|endoftext|>"


def _word_tokenizer() -> Tokenizer:
    """Whitespace word-level tokenizer over the fixture words; EOS = id 0, so expected ids are easy to write."""
    words = sorted({w for f in FIXTURES.rglob("*.tsv") for line in f.read_text().splitlines()[1:]
                    for w in line.replace("\t", " ").split()})
    tok = Tokenizer(WordLevel({EOS: 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(words)}}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


@pytest.fixture
def word_tok(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tokenizer:
    """Hermetic: only the fixture root is searched (repo root in tmp, no env root), caches in tmp, word tokenizer."""
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path / "repo")
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    tok = _word_tokenizer()
    monkeypatch.setattr(glue, "gpt2_tokenizer", lambda data_dir=None: tok)
    return tok


def _dm(task: str, **kw: object) -> GLUEDataModule:
    return GLUEDataModule(task, data_dir=str(FIXTURES), **kw)


def _ids(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text.strip(), add_special_tokens=False).ids


# ---------------------------------------------------------------------------------------------- real data
def test_real_sst2_sizes_and_label_balance() -> None:
    root = require_shared("glue_sst2", "dev.tsv")
    _, dev = read_tsv(root / "dev.tsv", TASKS["sst2"])
    assert len(dev) == 872 and Counter(dev) == {0: 428, 1: 444}  # GLUE SST-2 dev
    _, train = read_tsv(root / "train.tsv", TASKS["sst2"])
    assert len(train) == 67_349 and Counter(train) == {0: 29_780, 1: 37_569}
    _, test = read_tsv(root / "test_labeled_sst2.tsv", TASKS["sst2"])  # header label<TAB>content
    assert len(test) == 1_821 and Counter(test) == {0: 912, 1: 909}


def test_real_sst2_module_with_gpt2_bpe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_shared("glue_sst2", "train.tsv")
    require_shared("gpt2_tokenizer", "encoder.json")
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    dm = GLUEDataModule("sst2", max_train_examples=100, batch_size=16)
    dm.setup("fit")
    assert dm.dims == {"vocab_size": 50_257, "n_classes": 2, "seq_len": dm.seq_len} and dm.seq_len <= 128
    assert [len(dm.sets[s]) for s in ("train", "val", "test")] == [100, 872, 1_821]
    assert "subset: 100 of 67,349" in dm.source and "dev.tsv (872)" in dm.source
    assert re.fullmatch(r"[0-9a-f]{16}", dm.fingerprint)
    first = dm.sets["val"].ids[0].tolist()  # "it 's a charming and often affecting journey . " (space stripped)
    assert first[:3] == [270, 705, 82] and 220 not in first  # GPT-2 ids of "it", " '", "s"; no lone space


def test_real_qnli_is_dev_only_and_never_trained_on_silently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = require_shared("glue_qnli", "dev.tsv")
    require_shared("gpt2_tokenizer", "encoder.json")
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    texts, labels = read_tsv(root / "dev.tsv", TASKS["qnli"])
    assert len(labels) == 5_463 and Counter(labels) == {0: 2_702, 1: 2_761}  # entailment / not_entailment
    assert all(len(t) == 2 and t[0] and t[1] for t in texts)
    with pytest.raises(DatasetNotFoundError, match="dev_holdout"):
        GLUEDataModule("qnli", split_protocol="official").setup("fit")
    dm = GLUEDataModule("qnli", split_protocol="dev_holdout")
    dm.setup("fit")
    assert len(dm.sets["val"]) == 540 + 552 and len(dm.sets["train"]) == 5_463 - 1_092
    assert "dev only" in dm.source and "not comparable" in dm.source and "5,463" in dm.source
    x, y, lengths = next(iter(dm.val_dataloader()))
    assert x.shape[1] <= 128 and (x == 50_256).any(dim=1).all()  # every pair carries the EOS separator


# ---------------------------------------------------------------------------------------------- fixture
def test_read_tsv_parses_glue_layouts() -> None:
    texts, labels = read_tsv(FIXTURES / "glue_sst2" / "train.tsv", TASKS["sst2"])
    assert len(texts) == 10 and labels[:2] == [1, 0]
    assert texts[0] == ("a warm , funny and moving film",)  # GLUE's trailing space stripped
    assert texts[4] == ('a "must see" for anyone who loves the genre',)  # bare quotes kept (QUOTE_NONE)
    texts, labels = read_tsv(FIXTURES / "glue_qnli" / "dev.tsv", TASKS["qnli"])
    assert texts[0] == ("What is the capital of the region?", "The capital of the region is the old port city.")
    assert Counter(labels) == {0: 12, 1: 8}
    texts, labels = read_tsv(FIXTURES / "glue_mnli" / "dev_matched.tsv", TASKS["mnli"])  # gold_label, not label1
    assert labels == [0, 2, 1] and texts[1] == ("A man is playing a guitar on stage.", "The man is sleeping at home.")


def test_join_segments_truncates_longest_first() -> None:
    assert join_segments([[1, 2, 3]], 2, 0) == [1, 2]
    assert join_segments([[1, 2], [3]], 8, 0) == [1, 2, 0, 3]
    assert join_segments([[1, 2], [3, 4, 5, 6, 7, 8]], 6, 0) == [1, 2, 0, 3, 4, 5]  # only the longer loses tokens
    assert join_segments([[1, 2, 3, 4, 5, 6], [7]], 5, 0) == [1, 2, 3, 0, 7]
    assert join_segments([[1, 2, 3, 4], [5, 6, 7, 8]], 6, 0) == [1, 2, 0, 5, 6, 7]  # both long: even shares
    assert join_segments([[1], []], 4, 0) == [1, 0]


def test_pairs_are_joined_with_eos_padded_right(word_tok: Tokenizer) -> None:
    dm = _dm("qnli", split_protocol="dev_holdout", batch_size=20, max_len=24)
    dm.setup("fit")
    assert isinstance(dm, DataModule) and model_dims(dm) == {"vocab_size": word_tok.get_vocab_size(), "n_classes": 2}
    texts, labels = read_tsv(FIXTURES / "glue_qnli" / "dev.tsv", TASKS["qnli"])
    _, held = stratified_holdout(np.array(labels), 0.2, 0)
    x, y, lengths = next(iter(dm.val_dataloader()))  # loader order = sorted held-out indices
    assert x.dtype == y.dtype == lengths.dtype == torch.long and x.shape == (len(held), int(lengths.max()))
    for row, i in enumerate(held):
        q, s = (_ids(word_tok, t) for t in texts[i])
        want = join_segments([q, s], 24, 0)
        assert want == [*q, 0, *s] or len(q) + len(s) + 1 > 24  # question EOS sentence
        assert x[row, : lengths[row]].tolist() == want and int(y[row]) == labels[i]
        assert (x[row, lengths[row]:] == 0).all()  # right padding with the EOS id
    sizes = [len(t) for s in ("train", "val") for t in dm.sets[s].ids]
    assert sizes.count(24) == 1 and max(sizes) == dm.seq_len == 24  # the fixture's one long pair, cut
    assert "1 examples cut" in dm.source and "pairs joined" in dm.source


def test_single_sentences_official_split(word_tok: Tokenizer) -> None:
    dm = _dm("sst2", batch_size=4)
    dm.setup("fit")
    assert [len(dm.sets[s]) for s in ("train", "val", "test")] == [10, 6, 6]
    assert "test = the val set" in dm.source and "train=train.tsv (10)" in dm.source
    x, y, lengths = next(iter(dm.val_dataloader()))
    assert x[1, : lengths[1]].tolist() == _ids(word_tok, "boring") and int(lengths[1]) == 1 and int(y[1]) == 0
    assert (x[1, 1:] == 0).all()
    fingerprint = dm.fingerprint
    dm.setup("test")  # idempotent
    assert dm.fingerprint == fingerprint and re.fullmatch(r"[0-9a-f]{16}", fingerprint)


def test_mnli_three_classes_and_mismatched_test(word_tok: Tokenizer) -> None:
    dm = _dm("mnli", batch_size=8)
    dm.setup("fit")
    assert dm.n_classes == 3 and [len(dm.sets[s]) for s in ("train", "val", "test")] == [6, 3, 3]
    assert "test=dev_mismatched.tsv (3)" in dm.source
    assert sorted(dm.sets["train"].labels.tolist()) == [0, 0, 1, 1, 2, 2]


def test_dev_holdout_is_stratified_deterministic_and_disjoint() -> None:
    labels = np.array([0] * 50 + [1] * 30 + [2] * 20)
    train, held = stratified_holdout(labels, 0.2, seed=3)
    assert set(train).isdisjoint(held) and sorted([*train, *held]) == list(range(100))
    assert Counter(labels[held]) == {0: 10, 1: 6, 2: 4}  # 20 % of every class
    again = stratified_holdout(labels, 0.2, seed=3)
    assert np.array_equal(train, again[0]) and np.array_equal(held, again[1])
    assert not np.array_equal(held, stratified_holdout(labels, 0.2, seed=4)[1])


def test_dev_holdout_module_split(word_tok: Tokenizer) -> None:
    a, b = _dm("qnli", split_protocol="dev_holdout"), _dm("qnli", split_protocol="dev_holdout")
    a.setup("fit")
    b.setup("fit")
    assert Counter(a.sets["val"].labels.tolist()) == {0: 2, 1: 2}  # round(0.2 * 12), round(0.2 * 8)
    assert len(a.sets["train"]) == 16 and a.sets["test"] is a.sets["val"]
    assert [t.tolist() for t in a.sets["val"].ids] == [t.tolist() for t in b.sets["val"].ids]
    train_rows = {tuple(t.tolist()) for t in a.sets["train"].ids}
    assert not train_rows & {tuple(t.tolist()) for t in a.sets["val"].ids}  # fixture rows are all distinct
    assert "QNLI dev only: 80%/20% seeded stratified split (seed 0) of the 20 dev pairs" in a.source
    c = _dm("qnli", split_protocol="dev_holdout", max_train_examples=5)
    c.setup("fit")
    assert len(c.sets["train"]) == 5 and "subset: 5 of 16" in c.source
    assert {tuple(t.tolist()) for t in c.sets["train"].ids} <= train_rows


def test_official_without_train_raises_the_clear_error(word_tok: Tokenizer) -> None:
    with pytest.raises(DatasetNotFoundError) as err:
        _dm("qnli", split_protocol="official").setup("fit")
    text = str(err.value)
    assert "has only dev.tsv" in text and "split_protocol=dev_holdout" in text and "nyu-mll/glue" in text
    with pytest.raises(DatasetNotFoundError, match="glue_mnli"):  # nothing at all: the framework's error
        GLUEDataModule("mnli", data_dir=str(FIXTURES / "nowhere")).setup("fit")
    with pytest.raises(ValueError, match="split_protocol"):
        _dm("sst2", split_protocol="train_on_dev")
