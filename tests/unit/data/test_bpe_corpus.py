"""GPT-2-BPE LM corpora (coupledqk Sec. 3.2): chunking, documents and EOS, splits, stand-in labels, missing data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from oscrepro.data import bpe, paths
from oscrepro.data import bpe_corpus as bc
from oscrepro.data.paths import DatasetNotFoundError
from tests.helpers.shared_data import require_shared

ARTICLE = " \n = {t} = \n \n {t} is a thing . \n \n = = Section = = \n \n More about {t} , 1 @,@ 000 . \n"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)


@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data root holding only the (linked) GPT-2 tokenizer; no default root holds a corpus."""
    shared = require_shared(bpe.DATASET_NAME)
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path / "work" / "repo")
    data = tmp_path / "data"
    data.mkdir()
    (data / bpe.DATASET_NAME).symlink_to(shared, target_is_directory=True)
    return data


def _wikitext(folder: Path, names: dict[str, str], titles: dict[str, list[str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split, name in names.items():
        (folder / name).write_text("".join(ARTICLE.format(t=t) for t in titles[split]), encoding="utf-8")


def _module(root: Path, corpus: str, **kw: object) -> bc.BPELMDataModule:
    dm = bc.BPELMDataModule(corpus, data_dir=str(root), cache_dir=str(root.parent / "cache"),
                            **{"seq_len": 8, "batch_size": 4, **kw})
    dm.setup("fit")
    return dm


def test_chunks_are_contiguous_and_targets_shift_by_one() -> None:
    ids = np.arange(1000, 1000 + 43, dtype=np.uint16)  # 43 tokens, T=6: 6 chunks of 7, one token left over
    ds = bc.TokenChunks(ids, 6)
    assert len(ds) == 6
    x, y = ds.__getitems__(list(range(len(ds))))
    assert x.shape == y.shape == (6, 6) and x.dtype == y.dtype == torch.long
    assert torch.equal(y[:, :-1], x[:, 1:])  # next-token targets
    rebuilt = torch.cat([torch.cat([x[i], y[i, -1:]]) for i in range(len(ds))])  # chunk i = x_i + last target
    assert torch.equal(rebuilt, torch.from_numpy(ids[:42].astype(np.int64)))  # non-overlapping, in order
    assert all(torch.equal(a, b) for a, b in zip(ds[3], (x[3], y[3]), strict=True))


def test_articles_split_at_top_level_titles_only() -> None:
    text = "".join(ARTICLE.format(t=t) for t in ("Alpha", "Beta", "Gamma"))
    docs = bc.split_articles(text)
    assert len(docs) == 3 and "".join(docs) == text  # lossless; "= = Section = =" starts no article
    assert [d.splitlines()[1] for d in docs] == [" = Alpha = ", " = Beta = ", " = Gamma = "]


def test_document_split_is_a_seeded_partition() -> None:
    parts = bc.document_split(200, (80, 10, 10), seed=3)
    assert [len(parts[s]) for s in bc.SPLITS] == [160, 20, 20]
    assert sorted(np.concatenate(list(parts.values())).tolist()) == list(range(200))
    again, other = bc.document_split(200, (80, 10, 10), seed=3), bc.document_split(200, (80, 10, 10), seed=4)
    assert all(np.array_equal(parts[s], again[s]) for s in bc.SPLITS)
    assert not np.array_equal(parts["test"], other["test"])


def test_contiguous_split_cuts_at_paragraphs() -> None:
    paragraphs = [f"paragraph {k} " + "word " * (k % 7) for k in range(100)]
    text = "\n\n".join(paragraphs) + "\n\n"
    parts = bc.contiguous_split(text, (80, 10, 10))
    assert "".join(parts[s][0] for s in bc.SPLITS) == text
    assert all(parts[s][0].endswith("\n\n") and parts[s][0].startswith("paragraph") for s in bc.SPLITS)
    assert 0.7 < len(parts["train"][0]) / len(text) < 0.9


def test_wikitext2_stream_windows_and_standin_label(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    titles = {"train": ["Alpha", "Beta", "Gamma", "Delta"], "valid": ["Eps"], "test": ["Zeta", "Eta"]}
    _wikitext(root / "wikitext-2", {s: f"{s}.txt" for s in bc.SPLITS}, titles)
    dm = _module(root, "wikitext2")
    tok = bpe.gpt2_tokenizer(root)
    expect = [i for t in titles["train"] for i in tok.encode(ARTICLE.format(t=t)).ids + [bpe.EOS_ID]]
    assert dm.streams["train"].tolist() == expect  # documents each followed by <|endoftext|>
    assert dm.n_docs == {"train": 4, "valid": 1, "test": 2}
    assert dm.source.startswith("stand-in for WikiText-103: WikiText-2") and dm.vocab_size == 50_257
    assert dm.dims == {"vocab_size": 50_257, "seq_len": 8} and len(dm.fingerprint) == 16
    x, y = next(iter(dm.val_dataloader()))
    assert x.dtype == y.dtype == torch.long and x.shape[1] == 8 and torch.equal(y[:, :-1], x[:, 1:])
    assert x[0].tolist() == dm.streams["valid"][:8].tolist()
    # the second setup reads the cache: no encoding
    monkeypatch.setattr(bc, "encode_documents", lambda *_: pytest.fail("encoded again"))
    again = _module(root, "wikitext2", max_train_tokens=20, max_eval_tokens=9)
    assert again.streams["train"].tolist() == expect[:20] and len(again.streams["test"]) == 9
    assert "subset: max_train_tokens=20, max_eval_tokens=9" in again.source


def test_wikitext103_without_train_is_a_clear_error(root: Path) -> None:
    titles = {"valid": ["Eps"], "test": ["Zeta"]}
    _wikitext(root / "wikitext-103", {s: f"wiki.{s}.tokens" for s in titles}, titles)
    with pytest.raises(DatasetNotFoundError) as err:
        _module(root, "wikitext103")
    msg = str(err.value)
    assert "Dataset 'wikitext-103' not found" in msg  # what
    assert f"train split is missing: {root / 'wikitext-103'} holds valid and test only" in msg  # where
    assert "wiki.{train,valid,test}.raw" in msg and "wikitext-103-raw-v1" in msg  # how
    assert "data.download=true" in msg and "data.standin=wikitext2" in msg


def test_wikitext103_with_the_named_train_standin(root: Path) -> None:
    _wikitext(root / "wikitext-103", {s: f"wiki.{s}.tokens" for s in ("valid", "test")},
              {"valid": ["Eps"], "test": ["Zeta"]})
    _wikitext(root / "wikitext-2", {"train": "train.txt"}, {"train": ["Alpha", "Beta"]})
    dm = _module(root, "wikitext103", standin="wikitext2")
    assert "with train stand-in: WikiText-2 train (train.txt, 2 articles" in dm.source
    assert dm.n_docs == {"train": 2, "valid": 1, "test": 1}
    with pytest.raises(ValueError, match="standin must be null or one of"):
        bc.BPELMDataModule("wikitext103", standin="pubmed_abstracts")


def test_pubmed_standin_is_labelled_with_its_size_and_split(root: Path) -> None:
    sample = root / "pubmed_abstracts"
    sample.mkdir()
    rows = [{"pmid": str(k), "title": f"Title {k}.", "abstract": f"Abstract number {k} about cells."}
            for k in range(30)]
    (sample / bc.PUBMED_SAMPLE[0]).write_text("".join(json.dumps(r) + "\n" for r in rows[:10]))
    (sample / bc.PUBMED_SAMPLE[1]).write_text("".join(json.dumps({"abstract": r["abstract"]}) + "\n"
                                                      for r in rows[10:]))
    with pytest.raises(DatasetNotFoundError, match="data.standin=pubmed_abstracts"):
        _module(root, "pubmed")  # no full copy and no stand-in named: an error, not a silent substitution
    dm = _module(root, "pubmed", standin="pubmed_abstracts", split_percent=[80, 10, 10], seed=1)
    total = sum(len(v) for v in dm.streams.values())
    assert dm.source.startswith(f"stand-in: PubMed abstracts sample ({bc.PUBMED_SAMPLE[0]}+{bc.PUBMED_SAMPLE[1]};"
                                f" 30 docs/{total:,} tokens")
    assert "seeded document-level split 80/10/10 % (seed=1)" in dm.source
    assert dm.n_docs == {"train": 24, "valid": 3, "test": 3}
    assert sum(int((v == bpe.EOS_ID).sum()) for v in dm.streams.values()) == 30  # one EOS per document


def test_openwebtext_standin_is_split_contiguously(root: Path) -> None:
    sample = root / "openwebtext_sample"
    sample.mkdir()
    (sample / bc.OWT_SAMPLE).write_text("".join(f"Paragraph {k} of some web page.\n\n" for k in range(50)))
    dm = _module(root, "openwebtext", standin="openwebtext_sample")
    assert dm.source.startswith("stand-in: OpenWebText sample") and "contiguous 90/5/5 % split" in dm.source
    assert dm.n_docs == {"train": 1, "valid": 1, "test": 1}


def test_shared_wikitext_articles_match_the_published_counts() -> None:
    wt2, wt103 = require_shared("wikitext-2", "train.txt"), require_shared("wikitext-103", "wiki.valid.tokens")
    counts = [len(bc.split_articles((wt2 / f"{s}.txt").read_text(encoding="utf-8"))) for s in ("train", "valid")]
    assert counts == [600, 60]  # WikiText's published article counts
    assert len(bc.split_articles((wt103 / "wiki.test.tokens").read_text(encoding="utf-8"))) == 60
