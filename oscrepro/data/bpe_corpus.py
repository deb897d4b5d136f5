"""GPT-2-BPE causal-LM data: WikiText-103, PubMed abstracts, OpenWebText (coupledqk Sec. 3.2, Tables 1-5; App. B).

One ``BPELMDataModule`` configured per corpus (``conf/data/{wikitext103,wikitext2_bpe,pubmed,openwebtext}.yaml``).
Every split is a list of documents; each document is encoded with GPT-2's byte-level BPE
(:func:`oscrepro.data.bpe.gpt2_tokenizer`, vocabulary 50,257) and followed by ``<|endoftext|>`` (id 50256), and the
split's stream is cut into non-overlapping chunks of ``seq_len + 1`` tokens: chunk ``i`` = ``ids[i(T+1) :
(i+1)(T+1)]``, ``x = chunk[:-1]``, ``y = chunk[1:]`` (both LongTensor (B, T); the last incomplete chunk is
dropped). T = ``seq_len`` = 512 in the paper (App. B).

Corpora and where they come from (``corpus``):

* ``wikitext103``: ``wiki.{train,valid,test}.raw`` (raw version, preferred) or ``.tokens`` in ``<root>/wikitext-103``;
  with ``download=true`` the hub's ``wikitext``/``wikitext-103-raw-v1`` is written there as ``.raw`` files.
  Documents are articles: a line `` = Title = `` (one ``=``, blank line before and after) starts one, which
  gives WikiText-2's published 600/60/60 articles. The shared copy has valid and test only: without train the
  module raises ``DatasetNotFoundError`` unless ``standin: wikitext2`` names WikiText-2's train split as a
  stand-in (its 600 articles are a subset of WikiText-103's train articles; valid/test stay WikiText-103's).
* ``wikitext2``: WikiText-2 (``<root>/wikitext-2``) as a whole, the cpu budget's stand-in for WikiText-103 (same
  source articles, 2 M instead of 103 M train words); ``source`` always says "stand-in for WikiText-103".
* ``pubmed`` / ``openwebtext``: ``<root>/{pubmed,openwebtext}/documents.jsonl`` (one ``{"text": ...}`` per line),
  written with ``download=true`` by streaming the hub (``ncbi/pubmed`` title + abstract, a loading-script dataset
  recent ``datasets`` may refuse; ``Skylion007/openwebtext``) until ``hub_tokens`` GPT-2 tokens (the paper's 100 M).
  A train split only: a seeded document-level split (``split_percent``, ``seed``) makes train/val/test.
  Labelled stand-ins (``standin``): ``pubmed_abstracts`` (the shared 1,896 abstracts, same seeded split) and
  ``openwebtext_sample`` (the first 100 OpenWebText documents; documents and paragraphs both end in a blank line
  there, so the boundaries are lost: contiguous ``split_percent`` split at paragraphs, one EOS per split).

A ``standin`` named in the config is used even where the full corpus is on disk (the choice stays explicit and
the run's ``source`` says "stand-in"); without one the full corpus is looked up, then fetched (``download``).

Budget knobs: ``max_train_tokens`` keeps the first N train tokens, ``max_eval_tokens`` the first N of val and
of test (``source`` then says "subset"). Encoded streams (uint16 ``.npy``, memory-mapped) are cached under
``cache_dir`` keyed by the corpus fingerprint, the tokenizer files' digest and the split parameters.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from oscrepro.data.base import DataModuleBase
from oscrepro.data.bpe import EOS_ID, VOCAB_SIZE, gpt2_tokenizer, tokenizer_digest
from oscrepro.data.fingerprint import fingerprint_files, fingerprint_params
from oscrepro.data.paths import cache_dir, candidate_dirs, download_root, fallthrough_note, missing_dataset_error

SPLITS = ("train", "valid", "test")
_ARTICLE_TITLE = re.compile(r"^ = [^=].* = $")  # " = Title = " (section headings are " = = Sub = = ")
_DOC_CHUNK = 512  # documents per encode_batch call


@dataclass(frozen=True)
class Hub:
    """A ``datasets`` source: name, config, the splits to read (ours -> hub's), text fields joined by newline."""

    name: str
    config: str | None
    splits: dict[str, str]
    fields: tuple[str, ...]


@dataclass(frozen=True)
class CorpusSpec:
    """On-disk layout of one corpus (data facts, not hyperparameters)."""

    title: str
    dir_name: str
    split_files: tuple[str, ...] | None  # per-split file patterns ("{s}" = train/valid/test), first complete wins
    hub: Hub
    standins: tuple[str, ...] = ()


CORPORA: dict[str, CorpusSpec] = {
    "wikitext103": CorpusSpec("WikiText-103", "wikitext-103", ("wiki.{s}.raw", "wiki.{s}.tokens"),
                              Hub("wikitext", "wikitext-103-raw-v1",
                                  {"train": "train", "valid": "validation", "test": "test"}, ("text",)),
                              ("wikitext2",)),
    "wikitext2": CorpusSpec("WikiText-2", "wikitext-2", ("{s}.txt", "wiki.{s}.raw", "wiki.{s}.tokens"),
                            Hub("wikitext", "wikitext-2-raw-v1",
                                {"train": "train", "valid": "validation", "test": "test"}, ("text",))),
    "pubmed": CorpusSpec("PubMed abstracts", "pubmed", None,
                         Hub("ncbi/pubmed", None, {"train": "train"},
                             ("MedlineCitation.Article.ArticleTitle", "MedlineCitation.Article.Abstract.AbstractText")),
                         ("pubmed_abstracts",)),
    "openwebtext": CorpusSpec("OpenWebText", "openwebtext", None,
                              Hub("Skylion007/openwebtext", None, {"train": "train"}, ("text",)),
                              ("openwebtext_sample",)),
}
DOCUMENTS_FILE = "documents.jsonl"
PUBMED_SAMPLE = ("medcityai_abstracts.jsonl", "pubmedqa_abstracts.jsonl")
OWT_SAMPLE = "openwebtext_sample.txt"
SAMPLES: dict[str, tuple[tuple[str, ...], str]] = {  # stand-in folder -> (files, how splits are made)
    "pubmed_abstracts": (PUBMED_SAMPLE, "seeded"),
    "openwebtext_sample": ((OWT_SAMPLE,), "contiguous"),
}


def split_articles(text: str) -> list[str]:
    """WikiText text -> articles, cut at the blank line before each `` = Title = `` line (lossless: joined back
    they give ``text``)."""
    lines = text.splitlines(keepends=True)
    starts = [i - 1 for i in range(1, len(lines) - 1)
              if _ARTICLE_TITLE.match(lines[i].rstrip("\n")) and not lines[i - 1].strip() and not lines[i + 1].strip()]
    cuts = sorted({0, *[s for s in starts if s > 0], len(lines)})
    return ["".join(lines[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]


def read_jsonl_documents(path: Path) -> list[str]:
    """One document per JSON line: its ``title`` / ``abstract`` / ``text`` fields (those present) joined by '\\n'."""
    docs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                docs.append("\n".join(str(rec[k]) for k in ("title", "abstract", "text") if rec.get(k)))
    return docs


def document_split(n_docs: int, percent: tuple[int, int, int], seed: int) -> dict[str, np.ndarray]:
    """Seeded document-level split: a permutation of the ``n_docs`` indices cut at ``percent`` (train/val/test);
    each split keeps the documents' original order."""
    perm = np.random.default_rng(seed).permutation(n_docs)
    n_val, n_test = (round(n_docs * p / 100) for p in percent[1:])
    parts = {"valid": perm[:n_val], "test": perm[n_val : n_val + n_test], "train": perm[n_val + n_test :]}
    return {s: np.sort(parts[s]) for s in SPLITS}


def contiguous_split(text: str, percent: tuple[int, int, int], sep: str = "\n\n") -> dict[str, list[str]]:
    """Cut ``text`` at the ``sep`` boundaries nearest to the ``percent`` character fractions (train, val, test)."""
    bounds = np.array([m.end() for m in re.finditer(re.escape(sep), text)] or [len(text)])
    cuts = [0]
    for frac in np.cumsum(percent[:2]) / sum(percent):
        cuts.append(int(bounds[np.abs(bounds - frac * len(text)).argmin()]))
    cuts.append(len(text))
    return {s: [text[a:b]] for s, a, b in zip(SPLITS, cuts[:-1], cuts[1:], strict=True)}


def encode_documents(docs: list[str], tok: Tokenizer) -> np.ndarray:
    """Token stream ``doc_1 <eos> doc_2 <eos> ...`` as uint16 (N,) (GPT-2 ids < 2^16)."""
    eos = np.array([EOS_ID], dtype=np.uint16)
    parts: list[np.ndarray] = []
    for i in range(0, len(docs), _DOC_CHUNK):
        for enc in tok.encode_batch_fast(docs[i : i + _DOC_CHUNK], add_special_tokens=False):
            parts += [np.asarray(enc.ids, dtype=np.uint16), eos]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint16)


class TokenChunks(Dataset):
    """Non-overlapping (T+1)-chunks of a stream: item i = (ids[i(T+1) : i(T+1)+T], ids[i(T+1)+1 : (i+1)(T+1)]).
    Batches are fetched whole (``__getitems__``: one gather from the memory-mapped stream)."""

    def __init__(self, ids: np.ndarray, seq_len: int) -> None:
        self.ids, self.seq_len = ids, seq_len

    def __len__(self) -> int:
        return len(self.ids) // (self.seq_len + 1)

    def __getitems__(self, idx: list[int]) -> tuple[Tensor, Tensor]:
        span = self.seq_len + 1
        rows = np.asarray(idx)[:, None] * span + np.arange(span)  # (B, T + 1)
        chunk = torch.from_numpy(self.ids[rows].astype(np.int64))  # (B, T + 1)
        return chunk[:, :-1], chunk[:, 1:]  # (B, T), (B, T)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        x, y = self.__getitems__([i])
        return x[0], y[0]


def _whole_batch(batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    return batch


def _field(record: dict, path: str) -> str:
    """``a.b.c`` of a nested record as text (lists joined by spaces; missing -> '')."""
    value: object = record
    for key in path.split("."):
        value = value.get(key, "") if isinstance(value, dict) else ""
    return " ".join(map(str, value)) if isinstance(value, list) else str(value or "")


def fetch_from_hub(hub: Hub, dest: Path, tok: Tokenizer, max_tokens: int | None) -> None:
    """Write ``hub`` into ``dest``: per-split ``wiki.{s}.raw`` when it has splits, else ``documents.jsonl`` with
    the first documents holding ``max_tokens`` GPT-2 tokens (streamed). Raises whatever ``datasets`` raises."""
    import datasets

    dest.mkdir(parents=True, exist_ok=True)
    if len(hub.splits) > 1:
        ds = datasets.load_dataset(hub.name, hub.config)
        for ours, theirs in hub.splits.items():
            tmp = dest / f"wiki.{ours}.raw.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(t if t.endswith("\n") else t + "\n" for t in ds[theirs]["text"])
            tmp.replace(dest / f"wiki.{ours}.raw")
        return
    stream = datasets.load_dataset(hub.name, hub.config, split=hub.splits["train"], streaming=True)
    tmp, n_tokens = dest / (DOCUMENTS_FILE + ".tmp"), 0
    with open(tmp, "w", encoding="utf-8") as f:
        for rec in stream:
            text = "\n".join(t for t in (_field(rec, k) for k in hub.fields) if t)
            if text:
                f.write(json.dumps({"text": text}) + "\n")
                n_tokens += len(tok.encode(text, add_special_tokens=False).ids) + 1
            if max_tokens is not None and n_tokens >= max_tokens:
                break
    tmp.replace(dest / DOCUMENTS_FILE)


class BPELMDataModule(DataModuleBase):
    """GPT-2-BPE next-token chunks of WikiText-103 / PubMed / OpenWebText or a labelled stand-in (Sec. 3.2)."""

    def __init__(
        self,
        corpus: str,
        data_dir: str | None = None,
        batch_size: int = 32,
        seq_len: int = 512,
        max_train_tokens: int | None = None,
        max_eval_tokens: int | None = None,
        standin: str | None = None,
        split_percent: tuple[int, int, int] = (90, 5, 5),
        seed: int = 0,
        download: bool = False,
        hub_tokens: int | None = 100_000_000,
        cache_dir: str | None = None,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if corpus not in CORPORA:
            raise ValueError(f"corpus must be one of {sorted(CORPORA)}, got {corpus!r}")
        self.corpus, self.spec = corpus, CORPORA[corpus]
        if standin is not None and standin not in self.spec.standins:
            raise ValueError(f"{corpus}: standin must be null or one of {list(self.spec.standins)}, got {standin!r}")
        self.data_dir, self.batch_size, self.seq_len = data_dir, batch_size, seq_len
        self.max_train_tokens, self.max_eval_tokens = max_train_tokens, max_eval_tokens
        self.standin, self.split_percent, self.seed = standin, tuple(int(p) for p in split_percent), seed
        self.download, self.hub_tokens = download, hub_tokens
        self.cache_override, self.num_workers = cache_dir, num_workers
        self.vocab_size = VOCAB_SIZE
        self.streams: dict[str, np.ndarray] = {}
        self.n_docs: dict[str, int] = {}

    # --- locating the files -------------------------------------------------------------------------------------
    def _split_files(self, folder: Path, spec: CorpusSpec, splits: tuple[str, ...] = SPLITS) -> dict[str, Path] | None:
        for pattern in spec.split_files or ():
            files = {s: folder / pattern.format(s=s) for s in splits}
            if all(p.is_file() for p in files.values()):
                return files
        return None

    def _missing(self, what: str, name: str) -> Exception:
        hub = self.spec.hub
        files = (" / ".join(p.format(s="{train,valid,test}") for p in self.spec.split_files)
                 if self.spec.split_files else f"{DOCUMENTS_FILE} (one {{\"text\": ...}} per line)")
        how = (f"  - {what}\n  - files: {files}\n"
               f"  - hub: datasets.load_dataset({hub.name!r}, {hub.config!r}) (data.download=true when online)\n"
               + "".join(f"  - or the labelled stand-in: data.standin={s}\n" for s in self.spec.standins))
        return missing_dataset_error(name, candidate_dirs(name, self.data_dir), how)

    def _locate(self) -> tuple[dict[str, list[Path]], str]:
        """(split -> source files, how the split's documents are made: 'articles' | 'seeded' | 'contiguous')."""
        spec = self.spec
        # a stand-in named in the config is used as named; otherwise the full corpus (lookup order), else the hub
        if self.standin == "wikitext2":  # WikiText-103 valid/test + WikiText-2 train
            evals = next((f for c in candidate_dirs(spec.dir_name, self.data_dir)
                          if (f := self._split_files(c, spec, ("valid", "test")))), None)
            train = next((f for c in candidate_dirs("wikitext-2", self.data_dir)
                          if (f := self._split_files(c, CORPORA["wikitext2"], ("train",)))), None)
            if evals is None:
                raise self._missing("WikiText-103 valid and test are needed with standin=wikitext2", spec.dir_name)
            if train is None:
                raise self._missing("standin=wikitext2 needs WikiText-2's train split", "wikitext-2")
            return {"train": [train["train"]], "valid": [evals["valid"]], "test": [evals["test"]]}, "articles"
        if self.standin in SAMPLES:  # a shared sample folder holding these files
            names, mode = SAMPLES[self.standin]
            for cand in candidate_dirs(self.standin, self.data_dir):
                if all((cand / f).is_file() for f in names):
                    return {"all": [cand / f for f in names]}, mode
            raise self._missing(f"standin={self.standin} needs {' + '.join(names)}", self.standin)
        for cand in candidate_dirs(spec.dir_name, self.data_dir):
            if spec.split_files and (files := self._split_files(cand, spec)):
                return {s: [p] for s, p in files.items()}, "articles"
            if spec.split_files is None and (cand / DOCUMENTS_FILE).is_file():
                return {"all": [cand / DOCUMENTS_FILE]}, "seeded"
        if not self.download:
            partial = [c for c in candidate_dirs(spec.dir_name, self.data_dir)
                       if spec.split_files and self._split_files(c, spec, ("valid", "test"))]
            what = (f"the train split is missing: {partial[0]} holds valid and test only" if partial
                    else f"no complete copy of {spec.title}")
            raise self._missing(what, spec.dir_name)
        dest = download_root(self.data_dir) / spec.dir_name
        try:
            fetch_from_hub(spec.hub, dest, gpt2_tokenizer(self.data_dir), self.hub_tokens)
        except Exception as err:  # offline / hub errors come in many types; all mean 'not obtainable now'
            raise self._missing(f"fetching {spec.hub.name} failed: {type(err).__name__}: {err}", spec.dir_name) from err
        return self._locate_after_download(dest)

    def _locate_after_download(self, dest: Path) -> tuple[dict[str, list[Path]], str]:
        files = self._split_files(dest, self.spec)
        return ({s: [p] for s, p in files.items()}, "articles") if files else ({"all": [dest / DOCUMENTS_FILE]},
                                                                                 "seeded")

    # --- documents and encoding ---------------------------------------------------------------------------------
    def _documents(self, files: dict[str, list[Path]], mode: str) -> dict[str, list[str]]:
        if mode == "articles":
            return {s: split_articles(files[s][0].read_text(encoding="utf-8")) for s in SPLITS}
        if mode == "contiguous":
            return contiguous_split(files["all"][0].read_text(encoding="utf-8"), self.split_percent)
        docs = [d for p in files["all"] for d in read_jsonl_documents(p)]
        return {s: [docs[i] for i in idx] for s, idx in document_split(len(docs), self.split_percent,
                                                                        self.seed).items()}

    def _build(self, files: dict[str, list[Path]], mode: str, key_dir: Path) -> None:
        meta_path = key_dir / "meta.json"
        if not meta_path.exists():
            docs = self._documents(files, mode)
            tok = gpt2_tokenizer(self.data_dir)
            key_dir.mkdir(parents=True, exist_ok=True)
            for s in SPLITS:  # tmp + rename per process: parallel runs never read a half-written file
                tmp = key_dir / f"{s}.{os.getpid()}.tmp.npy"
                np.save(tmp, encode_documents(docs[s], tok))
                tmp.replace(key_dir / f"{s}.npy")
            tmp = key_dir / f"meta.{os.getpid()}.tmp"
            tmp.write_text(json.dumps({"n_docs": {s: len(docs[s]) for s in SPLITS}}))
            tmp.replace(meta_path)  # written last: a complete cache entry
        self.n_docs = json.loads(meta_path.read_text())["n_docs"]
        self.streams = {s: np.load(key_dir / f"{s}.npy", mmap_mode="r") for s in SPLITS}

    def setup(self, stage: str | None = None) -> None:
        if self.streams:
            return
        files, mode = self._locate()
        all_files = sorted({p for ps in files.values() for p in ps})
        self.fingerprint = fingerprint_files(all_files, cache_override=self.cache_override)
        key = fingerprint_params(corpus=self.corpus, standin=self.standin, mode=mode, roles=sorted(
            (s, p.name) for s, ps in files.items() for p in ps), split_percent=self.split_percent,
            seed=self.seed if mode == "seeded" else None, eos=EOS_ID)
        digest = tokenizer_digest(self.data_dir, self.cache_override)
        key_dir = cache_dir("bpe", self.cache_override) / f"{self.corpus}_{self.fingerprint}_{digest}_{key}"
        self._build(files, mode, key_dir)
        self.full_tokens = {s: len(v) for s, v in self.streams.items()}
        caps = {"train": self.max_train_tokens, "valid": self.max_eval_tokens, "test": self.max_eval_tokens}
        self.streams = {s: v if caps[s] is None else v[: caps[s]] for s, v in self.streams.items()}
        folders = sorted({p.parent for ps in files.values() for p in ps})
        self.source = self._describe(files, mode) + "".join(  # fall-throughs between the default roots are said
            fallthrough_note(f.name, f, self.data_dir) for f in folders)

    def _describe(self, files: dict[str, list[Path]], mode: str) -> str:
        toks = "/".join(f"{len(self.streams[s]):,}" for s in SPLITS)
        docs = "/".join(f"{self.n_docs[s]:,}" for s in SPLITS)
        names = ", ".join(f"{'' if s == 'all' else s + '='}{'+'.join(p.name for p in ps)}" for s, ps in files.items())
        where = sorted({str(p.parent) for ps in files.values() for p in ps})
        total = sum(self.full_tokens.values())
        pct = "/".join(map(str, self.split_percent))
        what = {
            "wikitext103": f"WikiText-103 ({names})",
            "wikitext2": f"stand-in for WikiText-103: WikiText-2 ({names}; the same source articles: its train "
                         f"articles are a subset of WikiText-103's 28,475, its valid/test articles the same)",
            "pubmed": f"PubMed abstracts ({names}, {sum(self.n_docs.values()):,} docs, {total:,} tokens)",
            "openwebtext": f"OpenWebText subset ({names}, {sum(self.n_docs.values()):,} docs, {total:,} tokens)",
        }[self.corpus]
        if self.standin == "wikitext2":
            what = (f"WikiText-103 valid/test ({files['valid'][0].name}, {files['test'][0].name}) with train "
                    f"stand-in: WikiText-2 train ({files['train'][0].name}, {self.n_docs['train']:,} articles, "
                    f"{self.full_tokens['train']:,} tokens; a subset of WikiText-103's train articles)")
        elif self.standin == "pubmed_abstracts":
            what = (f"stand-in: PubMed abstracts sample ({names}; {sum(self.n_docs.values()):,} docs/"
                    f"{total:,} tokens; the paper uses 100M tokens)")
        elif self.standin == "openwebtext_sample":
            what = (f"stand-in: OpenWebText sample ({names}; first 100 docs of Skylion007/openwebtext, {total:,} "
                    f"tokens; the paper uses a 100M-token subset)")
        how = {"articles": f"documents = articles (train/val/test {docs})",
               "seeded": f"seeded document-level split {pct} % (seed={self.seed}) into train/val/test ({docs} docs)",
               "contiguous": f"document boundaries not recoverable: contiguous {pct} % split at paragraph "
                             "boundaries into train/val/test"}[mode]
        if mode == "articles" and any(p.suffix in (".tokens", ".txt") for ps in files.values() for p in ps):
            how += "; WikiText tokens version (<unk>, split numbers) read as text"
        caps = [f"{n}={v:,}" for n, v in (("max_train_tokens", self.max_train_tokens),
                                          ("max_eval_tokens", self.max_eval_tokens)) if v is not None]
        subset = f"; subset: {', '.join(caps)}" if caps else ""
        eos = "each split" if mode == "contiguous" else "each document"
        return (f"{what}; {how}; GPT-2 BPE (50,257), <|endoftext|> after {eos}; train/val/test tokens "
                f"{toks}{subset}; from {', '.join(where)}")

    # --- loaders ------------------------------------------------------------------------------------------------
    LOADER_SPLITS = ("train", "valid", "test")

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(TokenChunks(self.streams[split], self.seq_len), batch_size=self.batch_size,
                          shuffle=shuffle, num_workers=self.num_workers, collate_fn=_whole_batch)
