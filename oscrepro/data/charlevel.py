"""Character-level LM data for the fsn paper: enwik8 and codeparrot, plus offline stand-ins (fsn App. A, Table 3).

Batches are ``(x, y)``, LongTensor (B, T) each, ``y`` the next character of ``x``. A split is one contiguous id
stream; window k is the chunk ``c = ids[k*stride : k*stride + T + 1]``, ``x = c[:-1]``, ``y = c[1:]``, with
T = ``seq_len`` = 256 (512 in the long-context arm), training stride 64 and evaluation stride 128 (Table 3:
"training stride 64, evaluation stride 128"); val/test windows therefore overlap by T - 128 characters and every
window is scored on all T targets (what the copy-depth token counts of App. C imply). ``eval_chunks`` gives the
(N, T+1) chunks that :func:`oscrepro.papers.fsn.copy_depth.target_depths` labels.

Corpora and choices (the paper states only "character-level; 205 symbols (enwik8), 97 symbols (code)"):
  * enwik8: the 100,000,000-byte file from http://mattmahoney.net/dc/enwik8.zip (member ``enwik8``), sha256
    checked against the published digest (``expected_sha256``; null skips it, for fixtures). Symbols are *bytes*;
    the vocabulary is the sorted set of distinct byte values of the whole file (all splits), which is the
    "205-symbol" vocabulary and needs no unknown symbol. Split 90M/5M/5M (``split_percent`` 90/5/5, in order).
  * codeparrot: ``codeparrot/codeparrot-clean`` streamed with ``datasets`` (train split, stream order), the first
    ``n_chars`` (100M) characters after normalisation, cached once as a text file under the data root, then split
    90/5/5 like enwik8. Vocabulary (97): the 95 printable ASCII characters plus ``\\t`` and ``\\n``; ``\\r\\n`` ->
    ``\\n``; every other character (non-ASCII, ``\\r``, form feed, ...) is dropped (``oov: drop``, default) or
    replaced by ``?`` (``oov: replace``). Files are joined with one extra ``\\n`` after each file.
  * stand-ins (offline, labelled in ``source``): enwik8 <- WikiText-2 ``train/valid/test.txt`` read as raw UTF-8
    bytes (the word-level *tokens* files; raw WikiText-2 is not available offline); codeparrot <- the CPython
    3.11.7 stdlib JSONL.gz in ``python_code`` (train file -> train; valid file's documents: first half -> val,
    second half -> test, since it has no test split), with the codeparrot vocabulary and normalisation.
  * ``max_chars`` (budget knob): every split keeps only its first ``max_chars`` characters; vocabularies are built
    before the cut, so ids and ``vocab_size`` never depend on the budget.

Every module verifies its files (:func:`oscrepro.data.fingerprint.verify_files`: present, regular files, equal to
the published ones when they are listed) before reading them, so a damaged copy is refused as such rather than
reported by the zip / gzip / JSON reader; an explicit ``data_dir`` is the only root searched, and a fall-through
between the default roots is logged and appended to ``source`` (:mod:`oscrepro.data.paths`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import warnings
import zipfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from oscrepro.data.base import DataModuleBase
from oscrepro.data.fingerprint import fingerprint_files, verify_files
from oscrepro.data.paths import candidate_dirs, download_root, fallthrough_note, find_dataset, missing_dataset_error

ENWIK8_URL = "http://mattmahoney.net/dc/enwik8.zip"
ENWIK8_SHA256 = "2b49720ec4d78c3c9fabaee6e4179a5e997302b3a70029f30f2d582218c024a8"
CODE_SYMBOLS: str = "\t\n" + "".join(chr(c) for c in range(32, 127))  # 97 symbols, by code point
_CODE_LUT = np.full(256, -1, dtype=np.int16)  # byte -> code id, -1 = out of vocabulary
_CODE_LUT[np.frombuffer(CODE_SYMBOLS.encode("ascii"), dtype=np.uint8)] = np.arange(len(CODE_SYMBOLS))


class CharWindows(Dataset):
    """Windows of an id stream: item k = (x, y), both LongTensor (T,), from chunk ids[k*stride : k*stride+T+1]."""

    def __init__(self, ids: np.ndarray, seq_len: int, stride: int) -> None:
        self.ids, self.seq_len = ids, seq_len
        self.starts = np.arange(0, max(ids.size - seq_len, 0), stride, dtype=np.int64)  # start <= n - T - 1

    def __len__(self) -> int:
        return int(self.starts.size)

    def __getitem__(self, k: int) -> tuple[Tensor, Tensor]:
        s = int(self.starts[k])
        c = torch.from_numpy(self.ids[s : s + self.seq_len + 1].astype(np.int64))  # (T+1,)
        return c[:-1], c[1:]


def encode_code(text: str, oov: str = "drop") -> np.ndarray:
    """Code text -> uint8 ids over :data:`CODE_SYMBOLS` (normalisation and OOV policy in the module docstring)."""
    if oov not in ("drop", "replace"):
        raise ValueError(f"oov must be 'drop' or 'replace', got {oov!r}")
    raw = text.replace("\r\n", "\n").encode("ascii", errors="ignore" if oov == "drop" else "replace")
    ids = _CODE_LUT[np.frombuffer(raw, dtype=np.uint8)]
    if oov == "drop":
        ids = ids[ids >= 0]
    else:
        ids[ids < 0] = CODE_SYMBOLS.index("?")
    return ids.astype(np.uint8)


def build_code_subset(records: Iterable[dict], n_chars: int, out: Path, oov: str = "drop") -> int:
    """Concatenate ``record['content']`` (+ one ``\\n`` each) in order until ``n_chars`` in-vocabulary characters;
    write them to ``out`` (ASCII text) and return the number of files used. Used for the hub stream."""
    parts, total, n_files = [], 0, 0
    for rec in records:
        ids = encode_code(rec["content"] + "\n", oov)
        parts.append(ids[: n_chars - total])
        total += parts[-1].size
        n_files += 1
        if total >= n_chars:
            break
    if total < n_chars:
        raise ValueError(f"stream ended after {total:,} characters, fewer than the requested {n_chars:,}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(np.frombuffer(CODE_SYMBOLS.encode("ascii"), dtype=np.uint8)[np.concatenate(parts)].tobytes())
    tmp.replace(out)
    return n_files


def split_by_percent(ids: np.ndarray, percent: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Contiguous train/val/test split in order; 90/5/5 of 100,000,000 bytes is exactly 90M/5M/5M."""
    if len(percent) != 3 or sum(percent) != 100:
        raise ValueError(f"split_percent must be three integers summing to 100, got {percent}")
    a = ids.size * percent[0] // 100
    b = a + ids.size * percent[1] // 100
    return {"train": ids[:a], "val": ids[a:b], "test": ids[b:]}


class CharLevelDataModule(DataModuleBase):
    """Shared windowing, loaders and attributes; subclasses implement :meth:`_load`."""

    def __init__(self, data_dir: str | None = None, seq_len: int = 256, train_stride: int = 64,
                 eval_stride: int = 128, batch_size: int = 64, num_workers: int = 0,
                 max_chars: int | None = None) -> None:
        super().__init__()
        self.data_dir, self.seq_len, self.batch_size, self.num_workers = data_dir, seq_len, batch_size, num_workers
        self.train_stride, self.eval_stride, self.max_chars = train_stride, eval_stride, max_chars
        self.symbols: list[bytes] = []  # id -> symbol (one byte each)
        self.splits: dict[str, np.ndarray] = {}

    def _load(self) -> tuple[dict[str, np.ndarray], list[bytes], str, list[Path]]:
        """-> (split ids, symbols, source text, source files for the fingerprint)."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        splits, self.symbols, source, files = self._load()
        if self.max_chars is not None:
            splits = {k: v[: self.max_chars] for k, v in splits.items()}
            source += f"; subset: first {self.max_chars:,} characters of each split (max_chars)"
        self.splits, self.vocab_size = splits, len(self.symbols)
        sizes = ", ".join(f"{k} {v.size:,}" for k, v in splits.items())
        self.source = f"{source}; characters: {sizes}; vocab {self.vocab_size}"
        self.fingerprint = fingerprint_files(files)

    def decode(self, ids: Iterable[int]) -> str:
        return b"".join(self.symbols[int(i)] for i in ids).decode("utf-8", errors="replace")

    def dataset(self, split: str) -> CharWindows:
        return CharWindows(self.splits[split], self.seq_len, self.train_stride if split == "train" else
                           self.eval_stride)

    def eval_chunks(self, split: str = "val", n_windows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(starts (N,), chunks (N, T+1)) of the evaluation windows, in loader order (copy-depth labels)."""
        ds = self.dataset(split)
        starts = ds.starts[:n_windows]
        idx = starts[:, None] + np.arange(self.seq_len + 1)  # (N, T+1)
        return starts, ds.ids[idx]

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(self.dataset(split), batch_size=self.batch_size, shuffle=shuffle,
                          num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)


def _bytes_vocab(*streams: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    """Sorted distinct byte values over all streams -> (lookup table byte -> id, symbols)."""
    present = np.zeros(256, dtype=bool)
    for s in streams:
        present |= np.bincount(s, minlength=256) > 0
    values = np.flatnonzero(present)
    lut = np.zeros(256, dtype=np.uint8)
    lut[values] = np.arange(values.size)
    return lut, [bytes([int(v)]) for v in values]


class Enwik8DataModule(CharLevelDataModule):
    """enwik8 bytes (Mahoney), 90/5/5 split, distinct-byte vocabulary (205 on the real file)."""

    def __init__(self, expected_sha256: str | None = ENWIK8_SHA256, expected_vocab_size: int | None = 205,
                 split_percent: tuple[int, int, int] = (90, 5, 5), download: bool = False,
                 url: str = ENWIK8_URL, **kw: object) -> None:
        super().__init__(**kw)
        self.expected_sha256, self.expected_vocab_size = expected_sha256, expected_vocab_size
        self.split_percent, self.download, self.url = tuple(split_percent), download, url

    def _locate(self) -> Path:
        for marker in ("enwik8.zip", "enwik8"):  # the published zip, else the unzipped 100M-byte file
            root = find_dataset("enwik8", self.data_dir, marker=marker)
            if root is not None:
                return root / marker
        if self.download:
            dest = download_root(self.data_dir) / "enwik8" / "enwik8.zip"
            dest.parent.mkdir(parents=True, exist_ok=True)
            import urllib.request

            try:
                urllib.request.urlretrieve(self.url, dest.with_suffix(".part"))
            except OSError as err:
                raise missing_dataset_error("enwik8", candidate_dirs("enwik8", self.data_dir),
                                            f"  - download failed ({err}); fetch {self.url} by hand") from err
            dest.with_suffix(".part").replace(dest)
            return dest
        raise missing_dataset_error(
            "enwik8", candidate_dirs("enwik8", self.data_dir),
            f"  - download {self.url} (the zip, 36 MB; member 'enwik8' = 100,000,000 bytes, sha256 "
            f"{ENWIK8_SHA256}) into <root>/enwik8/enwik8.zip,\n  - or set data.download=true (needs network),\n"
            f"  - or train on the offline stand-in: data=standin/enwik8 (WikiText-2 as characters).")

    def _load(self) -> tuple[dict[str, np.ndarray], list[bytes], str, list[Path]]:
        path = self._locate()
        verify_files([path])  # before the zip reader sees it
        where = fallthrough_note("enwik8", path.parent, self.data_dir)
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as zf:
                raw = zf.read("enwik8")
        else:
            raw = path.read_bytes()
        digest = hashlib.sha256(raw).hexdigest()
        if self.expected_sha256 is not None and digest != self.expected_sha256:
            raise ValueError(f"{path}: member 'enwik8' has sha256 {digest}, expected {self.expected_sha256} "
                             "(set expected_sha256=null to skip the check)")
        data = np.frombuffer(raw, dtype=np.uint8)
        lut, symbols = _bytes_vocab(data)
        if self.expected_vocab_size is not None and len(symbols) != self.expected_vocab_size:
            warnings.warn(f"enwik8 vocabulary has {len(symbols)} symbols, the paper reports "
                          f"{self.expected_vocab_size}", stacklevel=2)
        check = "sha256 verified" if self.expected_sha256 is not None else "sha256 NOT checked"
        src = (f"enwik8 ({path}, {data.size:,} bytes, {check}); byte-level, "
               f"split {'/'.join(map(str, self.split_percent))} %{where}")
        return split_by_percent(lut[data], self.split_percent), symbols, src, [path]


class WikiTextCharDataModule(CharLevelDataModule):
    """Offline stand-in for enwik8: WikiText-2 train/valid/test token files read as raw bytes."""

    FILES = {"train": "train.txt", "val": "valid.txt", "test": "test.txt"}

    def _load(self) -> tuple[dict[str, np.ndarray], list[bytes], str, list[Path]]:
        root = find_dataset("wikitext-2", self.data_dir, marker="train.txt")
        how = ("  - copy the WikiText-2 tokens files train.txt/valid.txt/test.txt there "
               "(pytorch/examples word_language_model/data/wikitext-2).")
        if root is None:
            raise missing_dataset_error("wikitext-2", candidate_dirs("wikitext-2", self.data_dir), how)
        missing = [f for f in self.FILES.values() if not (root / f).exists()]
        if missing:  # the copy found first is used: a damaged one is not passed over for another
            raise missing_dataset_error("wikitext-2", [root], f"  - {root} lacks {', '.join(missing)}\n{how}")
        files = [root / f for f in self.FILES.values()]
        verify_files(files)  # present, regular files, the published content: before they are read
        raw = {k: np.frombuffer((root / f).read_bytes(), dtype=np.uint8) for k, f in self.FILES.items()}
        lut, symbols = _bytes_vocab(*raw.values())
        src = (f"stand-in for enwik8: WikiText-2 word-level tokens files read as raw UTF-8 bytes ({root}); "
               f"not comparable to enwik8 numbers{fallthrough_note('wikitext-2', root, self.data_dir)}")
        return {k: lut[v] for k, v in raw.items()}, symbols, src, files


def _code_symbols() -> list[bytes]:
    return [c.encode("ascii") for c in CODE_SYMBOLS]


class CodeParrotDataModule(CharLevelDataModule):
    """codeparrot-clean, a fixed ``n_chars`` prefix of the hub stream, 97-symbol ASCII vocabulary, 90/5/5."""

    def __init__(self, hub_name: str = "codeparrot/codeparrot-clean", n_chars: int = 100_000_000,
                 oov: str = "drop", split_percent: tuple[int, int, int] = (90, 5, 5), download: bool = False,
                 **kw: object) -> None:
        super().__init__(**kw)
        self.hub_name, self.n_chars, self.oov = hub_name, n_chars, oov
        self.split_percent, self.download = tuple(split_percent), download

    @property
    def file_name(self) -> str:
        return f"codeparrot-clean_{self.n_chars}chars_oov-{self.oov}.txt"

    def _locate(self) -> Path:
        root = find_dataset("codeparrot", self.data_dir, marker=self.file_name)
        if root is not None:
            return root / self.file_name
        how = (f"  - run once with network and data.download=true: streams {self.hub_name} (train split) with "
               f"datasets and writes the first {self.n_chars:,} characters to <root>/codeparrot/{self.file_name},\n"
               "  - or train on the offline stand-in: data=standin/codeparrot (CPython stdlib).")
        if not self.download:
            raise missing_dataset_error("codeparrot", candidate_dirs("codeparrot", self.data_dir), how)
        dest = download_root(self.data_dir) / "codeparrot" / self.file_name
        try:
            import datasets

            stream = datasets.load_dataset(self.hub_name, split="train", streaming=True)
            n_files = build_code_subset(stream, self.n_chars, dest, self.oov)
        except Exception as err:  # offline / hub errors come in many types; all mean 'not obtainable now'
            raise missing_dataset_error("codeparrot", candidate_dirs("codeparrot", self.data_dir),
                                        f"  - streaming {self.hub_name} failed: {err}\n{how}") from err
        dest.with_name(dest.name + ".json").write_text(json.dumps(
            {"hub": self.hub_name, "split": "train", "n_chars": self.n_chars, "n_files": n_files, "oov": self.oov}))
        return dest

    def _load(self) -> tuple[dict[str, np.ndarray], list[bytes], str, list[Path]]:
        path = self._locate()
        verify_files([path])
        ids = encode_code(path.read_text(encoding="ascii"), self.oov)
        src = (f"codeparrot ({self.hub_name}, first {ids.size:,} characters of the train stream, {path}); "
               f"97-symbol ASCII, split {'/'.join(map(str, self.split_percent))} %"
               f"{fallthrough_note('codeparrot', path.parent, self.data_dir)}")
        return split_by_percent(ids, self.split_percent), _code_symbols(), src, [path]


class PythonCodeCharDataModule(CharLevelDataModule):
    """Offline stand-in for codeparrot: CPython 3.11.7 stdlib JSONL.gz (shared ``python_code``)."""

    def __init__(self, oov: str = "drop", **kw: object) -> None:
        super().__init__(**kw)
        self.oov = oov

    def _load(self) -> tuple[dict[str, np.ndarray], list[bytes], str, list[Path]]:
        names = {"train": "cpython311_stdlib_train.jsonl.gz", "valid": "cpython311_stdlib_valid.jsonl.gz"}
        root = find_dataset("python_code", self.data_dir, marker=names["train"])
        if root is None:
            raise missing_dataset_error("python_code", candidate_dirs("python_code", self.data_dir),
                                        f"  - provide {names['train']} and {names['valid']} (JSON lines with a "
                                        "'content' field, gzip) in that folder.")
        verify_files([root / f for f in names.values()])  # before gzip / JSON read them
        docs: dict[str, list[str]] = {}
        for k, f in names.items():
            with gzip.open(root / f, "rt", encoding="utf-8") as fh:
                docs[k] = [json.loads(line)["content"] for line in fh]
        half = len(docs["valid"]) // 2
        texts = {"train": docs["train"], "val": docs["valid"][:half], "test": docs["valid"][half:]}
        splits = {k: encode_code("".join(d + "\n" for d in v), self.oov) for k, v in texts.items()}
        src = (f"stand-in for codeparrot: CPython 3.11.7 stdlib ({root}); train file -> train, valid file "
               f"documents {half} -> val / {len(docs['valid']) - half} -> test; 97-symbol ASCII (oov {self.oov})"
               f"{fallthrough_note('python_code', root, self.data_dir)}")
        return splits, _code_symbols(), src, [root / f for f in names.values()]
