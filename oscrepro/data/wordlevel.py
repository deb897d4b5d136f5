"""Word-level causal-LM data: WikiText-2 and TinyStories (fqo Sec. 4.2, Table 4, Table 5; App. B).

One ``WordLMDataModule`` configured per corpus (``conf/data/wikitext2.yaml``, ``conf/data/tinystories.yaml``).
Batches are ``(x, y)`` with ``x``, ``y`` LongTensor (B, T), ``y`` the next token of ``x``: the split's token ids
form one contiguous stream and window ``i`` is ``x = ids[iT : iT+T]``, ``y = ids[iT+1 : iT+T+1]``
(non-overlapping, last incomplete window dropped; T = ``seq_len`` = 50 in the paper).

Tokenisation (App. B: "word-level tokenization with vocabulary size 10K / 8K"): a ``tokenizers`` WordLevel model
behind a WhitespaceSplit pre-tokenizer (optionally + isolated punctuation, knob ``pretokenizer``) and, for
TinyStories, a Lowercase normaliser. The vocabulary is built from *train* counts only: ``<unk>`` (id 0) and
``<eos>`` (id 1) first, then the most frequent train words, ties broken alphabetically, until ``vocab_size``
entries; every other word maps to ``<unk>`` (WikiText-2's literal ``<unk>`` token maps to the same id). One
``<eos>`` is appended per text line (pytorch/examples ``data.py`` convention, which gives WikiText-2's
2,088,628 train tokens); with ``skip_blank_lines`` blank lines add nothing (used for TinyStories, where blank lines
only separate paragraphs). The tokenizer.json and the encoded id streams are cached under ``cache_dir`` keyed by
the corpus fingerprint and the tokenisation parameters. Building runs the tokenizers normaliser in Rust and then,
when the pre-tokenizer is plain WhitespaceSplit, a Python ``str.split`` + dict fast path (``count_words_fast``,
``encode_lines_fast``); ``count_words`` / ``encode_lines`` are the plain tokenizers-library references that the
tests compare it with (and that are used whenever the fast path does not apply).

Choices where the paper is silent:
- TinyStories has no test split; the validation text is cut at the line boundary nearest to half its tokens:
  first half -> val, second half -> test (for both the shared subset and the full hub data).
- The shared TinyStories copy is a subset: a lower-cased train-split prefix (train) and a validation-split prefix
  (val/test); both are lower-cased. ``source`` names the subset.
- WhitespaceSplit is the default for TinyStories as for WikiText-2 (so "said," and "said" are different words;
  the 4.2 MB train prefix has 21,354 such types, enough for exactly 8,000). ``pretokenizer: whitespace_punct``
  splits punctuation off instead, but then the prefix has only 7,877 types (< 8K), and the vocabulary is smaller.
- ``max_train_tokens`` truncates the *train* stream after the vocabulary was built on the full train file, so the
  vocabulary (and val/test ids) do not depend on the budget.

Locating follows :mod:`oscrepro.data.paths`: an explicit ``data_dir`` is the only root searched (an empty, partial or
missing one is an error naming the missing files and the place looked); a copy with a split missing is an error,
not passed over; a fall-through between the default roots is logged and appended to ``source``. The files are
verified (digest, and that each is a regular file: a directory named ``train.txt`` is named as such) before they are
read.

With ``download=true`` a missing local copy is fetched with ``datasets.load_dataset`` (``wikitext``/
``wikitext-2-v1``, ``roneneldan/TinyStories``) and written as text files into the data root (found there next
time); offline, or with ``download=false`` (the config default), setup raises ``DatasetNotFoundError``.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import WordLevel
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from oscrepro.data.base import DataModuleBase
from oscrepro.data.fingerprint import fingerprint_files, fingerprint_params
from oscrepro.data.paths import cache_dir, candidate_dirs, download_root, fallthrough_note, missing_dataset_error

UNK, EOS = "<unk>", "<eos>"
SPECIALS: tuple[str, ...] = (UNK, EOS)
STORY_SEPARATOR = "<|endoftext|>"  # raw TinyStories files separate stories by this line; treated as blank
_PY_ONLY_WS = re.compile("[\x1c-\x1f]")
_LINE_CHUNK = 20_000  # lines encoded per step


@dataclass(frozen=True)
class CorpusSpec:
    """On-disk layout and hub name of one corpus (data facts, not hyperparameters)."""

    title: str
    dir_name: str
    files: dict[str, tuple[str, ...]]  # split -> candidate file names, first existing wins
    hub: tuple[str, str | None]  # (datasets name, config)
    hub_splits: dict[str, str]  # our split -> hub split
    halve_valid: bool  # no test split: cut valid into val / test halves


CORPORA: dict[str, CorpusSpec] = {
    "wikitext2": CorpusSpec(
        "WikiText-2 (wikitext-2-v1, tokens version)",
        "wikitext-2",
        {
            "train": ("train.txt", "wiki.train.tokens"),
            "valid": ("valid.txt", "wiki.valid.tokens"),
            "test": ("test.txt", "wiki.test.tokens"),
        },
        ("wikitext", "wikitext-2-v1"),
        {"train": "train", "valid": "validation", "test": "test"},
        False,
    ),
    "tinystories": CorpusSpec(
        "TinyStories",
        "tinystories",
        {
            "train": ("TinyStories-train.txt", "TinyStories-train-prefix-lowercased.txt"),
            "valid": ("TinyStories-valid.txt", "TinyStories-valid-prefix.txt"),
        },
        ("roneneldan/TinyStories", None),
        {"train": "train", "valid": "validation"},
        True,
    ),
}


def build_tokenizer(vocab: dict[str, int], lowercase: bool, pretokenizer: str) -> Tokenizer:
    """WordLevel tokenizer over ``vocab`` (unknown words -> ``<unk>``) with the configured pre-processing."""
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token=UNK))
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    if pretokenizer == "whitespace":
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    elif pretokenizer == "whitespace_punct":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation("isolated")]
        )
    else:
        raise ValueError(f"pretokenizer must be 'whitespace' or 'whitespace_punct', got {pretokenizer!r}")
    return tok


def count_words(lines: list[str], tok: Tokenizer, chunk: int = 2000) -> Counter[str]:
    """Reference: word counts exactly as ``tok`` normalises and pre-tokenises them (Rust pre-tokenizer)."""
    counts: Counter[str] = Counter()
    for i in range(0, len(lines), chunk):
        text = "\n".join(lines[i : i + chunk])
        if tok.normalizer is not None:
            text = tok.normalizer.normalize_str(text)
        counts.update(w for w, _ in tok.pre_tokenizer.pre_tokenize_str(text))
    return counts


def fast_path_applies(lines: list[str], pretokenizer: str) -> bool:
    """Python ``str.split`` equals WhitespaceSplit except on U+001C..U+001F (whitespace only for Python)."""
    return pretokenizer == "whitespace" and not any(_PY_ONLY_WS.search(line) for line in lines)


def normalized_lines(lines: list[str], tok: Tokenizer) -> list[str]:
    """Lines after ``tok``'s normaliser (one Rust call over the joined text; normalisers keep '\n')."""
    if tok.normalizer is None:
        return lines
    return tok.normalizer.normalize_str("\n".join(lines)).split("\n")


def count_words_fast(lines: list[str], tok: Tokenizer) -> Counter[str]:
    """Fast path of :func:`count_words` (valid when :func:`fast_path_applies`): Rust normaliser + str.split."""
    return Counter(w for line in normalized_lines(lines, tok) for w in line.split())


def train_vocab(counts: Counter[str], vocab_size: int) -> dict[str, int]:
    """Specials first, then most frequent words (ties alphabetical) up to ``vocab_size`` entries."""
    ranked = sorted((w for w in counts if w not in SPECIALS), key=lambda w: (-counts[w], w))
    words = list(SPECIALS) + ranked[: max(vocab_size - len(SPECIALS), 0)]
    return {w: i for i, w in enumerate(words)}


def read_lines(path: Path) -> list[str]:
    """Text lines split on '\\n' only (like iterating a file), story separators blanked."""
    parts = path.read_text(encoding="utf-8").split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    return ["" if p.strip() == STORY_SEPARATOR else p for p in parts]


def _stream(
    lines: list[str], encode_chunk: Callable[[list[str]], list[list[int]]], eos: int, skip_blank_lines: bool
) -> tuple[Tensor, Tensor]:
    """Concatenate per-line ids + ``<eos>``, a chunk of lines at a time (int32 tensors, not Python int lists,
    so the full TinyStories train split (~0.5 G tokens) stays at 4 bytes per token)."""
    id_parts: list[Tensor] = []
    end_parts: list[Tensor] = []
    offset = 0
    for i in range(0, len(lines), _LINE_CHUNK):
        ids: list[int] = []
        ends: list[int] = []
        for line_ids in encode_chunk(lines[i : i + _LINE_CHUNK]):
            if skip_blank_lines and not line_ids:
                continue
            ids.extend(line_ids)
            ids.append(eos)
            ends.append(offset + len(ids))
        id_parts.append(torch.tensor(ids, dtype=torch.int32))
        end_parts.append(torch.tensor(ends, dtype=torch.int64))
        offset += len(ids)
    if not id_parts:
        return torch.zeros(0, dtype=torch.int32), torch.zeros(0, dtype=torch.int64)
    return torch.cat(id_parts), torch.cat(end_parts)


def encode_lines(lines: list[str], tok: Tokenizer, skip_blank_lines: bool) -> tuple[Tensor, Tensor]:
    """Reference: token stream with one ``<eos>`` per line -> (ids (N,) int32, line end offsets (L,) int64)."""

    def chunk(part: list[str]) -> list[list[int]]:
        return [enc.ids for enc in tok.encode_batch_fast(part, add_special_tokens=False)]

    return _stream(lines, chunk, tok.token_to_id(EOS), skip_blank_lines)


def encode_lines_fast(lines: list[str], tok: Tokenizer, skip_blank_lines: bool) -> tuple[Tensor, Tensor]:
    """Fast path of :func:`encode_lines` (valid when :func:`fast_path_applies`): str.split + dict lookup."""
    vocab, unk = tok.get_vocab(), tok.token_to_id(UNK)

    def chunk(part: list[str]) -> list[list[int]]:
        return [[vocab.get(w, unk) for w in line.split()] for line in normalized_lines(part, tok)]

    return _stream(lines, chunk, tok.token_to_id(EOS), skip_blank_lines)


def halve_at_line(ids: Tensor, ends: Tensor) -> tuple[Tensor, Tensor]:
    """Cut a stream at the line end nearest to half its tokens -> (first half, second half)."""
    cut = int(ends[(ends - ids.numel() / 2).abs().argmin()]) if ends.numel() else ids.numel() // 2
    return ids[:cut], ids[cut:]


class LMWindows(Dataset):
    """Non-overlapping next-token windows over one id stream: item i = (ids[iT:iT+T], ids[iT+1:iT+T+1])."""

    def __init__(self, ids: Tensor, seq_len: int) -> None:
        self.ids, self.seq_len = ids, seq_len

    def __len__(self) -> int:
        return max((self.ids.numel() - 1) // self.seq_len, 0)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        s = i * self.seq_len
        chunk = self.ids[s : s + self.seq_len + 1].long()  # (T + 1,)
        return chunk[:-1], chunk[1:]  # (T,), (T,)


def fetch_from_hub(spec: CorpusSpec, dest: Path) -> Path:
    """Write the hub copy of ``spec`` as text files into ``dest``; offline -> DatasetNotFoundError."""
    name, config = spec.hub
    try:
        import datasets

        ds = datasets.load_dataset(name, config)
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds of errors when offline
        raise missing_dataset_error(
            spec.dir_name,
            [dest],
            f"  - datasets.load_dataset({name!r}, {config!r}) "
            f"failed ({type(e).__name__}: {e}); run it once online or copy the "
            f"files {[f[0] for f in spec.files.values()]} into {dest}",
        ) from e
    dest.mkdir(parents=True, exist_ok=True)
    for split, hub_split in spec.hub_splits.items():
        path = dest / spec.files[split][0]
        with open(path.with_suffix(".tmp"), "w", encoding="utf-8") as f:
            for text in ds[hub_split]["text"]:
                f.write(text if text.endswith("\n") else text + "\n")
        path.with_suffix(".tmp").replace(path)
    return dest


class WordLMDataModule(DataModuleBase):
    """Word-level LM streams for WikiText-2 (vocab 10K) or TinyStories (vocab 8K), T=50 windows (fqo App. B)."""

    def __init__(
        self,
        corpus: str,
        data_dir: str | None = None,
        batch_size: int = 64,
        seq_len: int = 50,
        vocab_size: int = 10_000,
        lowercase: bool = False,
        pretokenizer: str = "whitespace",
        skip_blank_lines: bool = False,
        max_train_tokens: int | None = None,
        download: bool = False,
        cache_dir: str | None = None,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if corpus not in CORPORA:
            raise ValueError(f"corpus must be one of {sorted(CORPORA)}, got {corpus!r}")
        self.corpus, self.spec = corpus, CORPORA[corpus]
        self.data_dir, self.batch_size, self.seq_len = data_dir, batch_size, seq_len
        self.requested_vocab = vocab_size
        self.lowercase, self.pretokenizer, self.skip_blank_lines = lowercase, pretokenizer, skip_blank_lines
        self.max_train_tokens, self.download = max_train_tokens, download
        self.cache_override, self.num_workers = cache_dir, num_workers
        self.tokenizer: Tokenizer | None = None
        self.streams: dict[str, Tensor] = {}
        self._note = ""  # fall-through between the default roots, for ``source`` (oscrepro.data.paths)

    def _files(self, root: Path) -> dict[str, Path] | None:
        out = {}
        for split, names in self.spec.files.items():
            hit = next((root / n for n in names if (root / n).exists()), None)
            if hit is None:
                return None
            out[split] = hit
        return out

    def _locate(self) -> tuple[Path, dict[str, Path], bool]:
        """(dataset dir, split -> file, fetched from hub?)."""
        # Same root order as find_dataset; a root counts only if every split has one of its candidate files.
        for cand in candidate_dirs(self.spec.dir_name, self.data_dir):
            files = self._files(cand) if cand.is_dir() else None
            if files is not None:
                return cand, files, False
            partial = {s: n for s, n in self.spec.files.items() if not any((cand / x).exists() for x in n)}
            if cand.is_dir() and len(partial) < len(self.spec.files):  # a copy with a split missing: not skipped
                missing = "; ".join(f"{s} split (one of {', '.join(n)})" for s, n in partial.items())
                raise missing_dataset_error(
                    self.spec.dir_name, [cand],
                    f"  - {cand} has the other splits but no {missing}: copy the whole dataset again (the copy "
                    "found first is used, so a damaged copy is not passed over for another one)")
        name, config = self.spec.hub
        how = (
            f"  - files: {dict((s, list(n)) for s, n in self.spec.files.items())}\n"
            f"  - hub: datasets.load_dataset({name!r}, {config!r}) (set data.download=true when online)"
        )
        if not self.download:
            raise missing_dataset_error(self.spec.dir_name, candidate_dirs(self.spec.dir_name, self.data_dir), how)
        root = fetch_from_hub(self.spec, download_root(self.data_dir) / self.spec.dir_name)
        return root, self._files(root) or {}, True

    def _build(self, files: dict[str, Path], key_dir: Path) -> tuple[Tokenizer, dict[str, Tensor]]:
        tok_path, ids_path = key_dir / "tokenizer.json", key_dir / "ids.pt"
        if tok_path.exists() and ids_path.exists():
            return Tokenizer.from_file(str(tok_path)), torch.load(ids_path, weights_only=True)
        lines = {s: read_lines(p) for s, p in files.items()}
        fast = all(fast_path_applies(ls, self.pretokenizer) for ls in lines.values())
        count, encode = (count_words_fast, encode_lines_fast) if fast else (count_words, encode_lines)
        probe = build_tokenizer({UNK: 0}, self.lowercase, self.pretokenizer)
        vocab = train_vocab(count(lines["train"], probe), self.requested_vocab)
        tok = build_tokenizer(vocab, self.lowercase, self.pretokenizer)
        streams = {s: encode(ls, tok, self.skip_blank_lines) for s, ls in lines.items()}
        ids = {s: st[0] for s, st in streams.items()}
        if self.spec.halve_valid:
            ids["valid"], ids["test"] = halve_at_line(*streams["valid"])
        key_dir.mkdir(parents=True, exist_ok=True)
        torch.save(ids, key_dir / "ids.tmp")
        tok.save(str(key_dir / "tokenizer.tmp"))
        (key_dir / "ids.tmp").replace(ids_path)
        (key_dir / "tokenizer.tmp").replace(tok_path)
        return tok, ids

    def setup(self, stage: str | None = None) -> None:
        if self.streams:
            return
        root, files, fetched = self._locate()
        # verified (published digests; regular files) before anything reads them
        self.fingerprint = fingerprint_files(list(files.values()), root=root, cache_override=self.cache_override)
        self._note = "" if fetched else fallthrough_note(self.spec.dir_name, root, self.data_dir)
        key = fingerprint_params(
            vocab_size=self.requested_vocab,
            lowercase=self.lowercase,
            specials=SPECIALS,
            pretokenizer=self.pretokenizer,
            skip_blank_lines=self.skip_blank_lines,
            halve_valid=self.spec.halve_valid,
        )
        key_dir = cache_dir("wordlevel", self.cache_override) / f"{self.corpus}_{self.fingerprint}_{key}"
        self.tokenizer, ids = self._build(files, key_dir)
        self.vocab_size = self.tokenizer.get_vocab_size()
        if self.vocab_size < self.requested_vocab:
            warnings.warn(
                f"{self.corpus}: train text has only {self.vocab_size - len(SPECIALS)} word types; "
                f"vocabulary is {self.vocab_size}, not the requested {self.requested_vocab}",
                stacklevel=2,
            )
        train = ids["train"]
        if self.max_train_tokens is not None:
            train = train[: self.max_train_tokens]
        self.streams = {"train": train, "val": ids["valid"], "test": ids["test"]}
        self.source = self._describe(root, files, fetched)

    def _describe(self, root: Path, files: dict[str, Path], fetched: bool) -> str:
        subset = any("prefix" in p.name for p in files.values())
        what = f"{self.spec.title} {'subset' if subset else ''}".strip()
        parts = [f"{s}={files[s].name}" for s in files]
        val_note = " (valid file halved into val/test)" if self.spec.halve_valid else ""
        toks = "/".join(f"{self.streams[s].numel():,}" for s in ("train", "val", "test"))
        budget = f", train capped at max_train_tokens={self.max_train_tokens:,}" if self.max_train_tokens else ""
        vocab = f"vocab {self.vocab_size:,}" + (
            "" if self.vocab_size == self.requested_vocab else f" (requested {self.requested_vocab:,})"
        )
        return (
            f"{what}: {', '.join(parts)}{val_note}; word-level ({self.pretokenizer}"
            f"{', lowercased' if self.lowercase else ''}), {vocab}, train/val/test tokens {toks}{budget}; "
            f"from {'hub ' + str(self.spec.hub) + ' -> ' if fetched else ''}{root}{self._note}"
        )

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(
            LMWindows(self.streams[split], self.seq_len),
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False)
