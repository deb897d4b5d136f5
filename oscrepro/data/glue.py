"""GLUE sentence(-pair) classification: SST-2, QNLI, MNLI (coupledqk Sec. 3.4, Table 7).

Each 60M pretrained LM is fine-tuned with a linear head on these tasks, so the inputs use the LM's own GPT-2
byte-level BPE (vocab 50,257; :func:`oscrepro.data.bpe.gpt2_tokenizer`). Batches are ``(x, y, lengths)``:
``x`` LongTensor (B, T) token ids, right-padded to the longest example of the batch (T <= ``max_len``);
``y`` LongTensor (B,) labels; ``lengths`` LongTensor (B,) real tokens per row. Labels come before lengths so
that ``x, y = batch[:2]`` holds, as for every other data module. The classifier reads position ``lengths - 1``.

Choices where the paper is silent:
- A single sentence is encoded as it is (surrounding whitespace stripped; no BOS / trailing token). A pair
  (QNLI question + sentence, MNLI premise + hypothesis) is joined with the EOS token ``<|endoftext|>`` (id
  50256) between the two segments: ``a <|endoftext|> b``.
- ``max_len`` (default 128, BERT's GLUE default): a longer pair is cut longest-first (the longer segment loses
  tokens from its end until both fit, as BERT's tokenizer does), a single sentence loses its end.
- Padding uses the EOS id; it is never read: pooling takes ``lengths - 1`` and causal attention means earlier
  positions never see the padding.
- Splits: ``official`` = train file -> train, dev -> val, a second labelled evaluation file -> test when there
  is one (SST-2: the labelled SST test set; MNLI: dev_mismatched), else test = val (said in ``source``).
  ``dev_holdout`` = only the dev file: a seeded stratified split into fine-tune train and held-out eval
  (``holdout_fraction``, default 0.2) -> val; test as above. For a folder with dev only (the shared QNLI copy)
  ``official`` raises and ``dev_holdout`` must be asked for: dev is never silently trained on. The split seed is
  the data ``seed``, not the run seed, so the three fine-tuning seeds share one split.
- ``max_train_examples`` (budget knob) keeps a seeded random subset of the fine-tuning examples.

Files are GLUE TSVs read by header name, so the shared copies, the GLUE zip and hub exports all parse. With
``download=true`` a missing local copy is written from ``datasets.load_dataset("nyu-mll/glue", <task>)`` as such
TSVs into the data root. Token ids per file are cached under ``cache_dir`` keyed by file digest and tokenizer.
"""

from __future__ import annotations

import csv
import hashlib
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from oscrepro.data.base import DataModuleBase
from oscrepro.data.bpe import EOS_TOKEN, gpt2_tokenizer
from oscrepro.data.fingerprint import cached_file_digests, fingerprint_files
from oscrepro.data.paths import (
    cache_dir,
    candidate_dirs,
    download_root,
    fallthrough_note,
    find_dataset,
    missing_dataset_error,
)

LABEL_COLUMNS = ("gold_label", "label")  # MNLI files carry label1..5 and gold_label; the others label
PROTOCOLS = ("official", "dev_holdout")
HUB_NAME = "nyu-mll/glue"


@dataclass(frozen=True)
class GlueTask:
    """File layout, columns and labels of one GLUE task (data facts, not hyperparameters)."""

    title: str
    dir_name: str
    columns: tuple[tuple[str, ...], ...]  # per segment: accepted header names, first present wins
    label_names: tuple[str, ...]  # label id = index; files may hold the name or the id
    train: str
    dev: str
    extra_eval: str | None  # a second labelled evaluation file, used as the test split when present
    hub_splits: dict[str, str]  # file name -> hub split (hub config = the task key)
    hub_columns: tuple[str, ...]  # hub feature of each segment


TASKS: dict[str, GlueTask] = {
    "sst2": GlueTask("GLUE SST-2", "glue_sst2", (("sentence", "content"),), ("negative", "positive"),
                     "train.tsv", "dev.tsv", "test_labeled_sst2.tsv",
                     {"train.tsv": "train", "dev.tsv": "validation"}, ("sentence",)),
    "qnli": GlueTask("GLUE QNLI", "glue_qnli", (("question",), ("sentence",)), ("entailment", "not_entailment"),
                     "train.tsv", "dev.tsv", None,
                     {"train.tsv": "train", "dev.tsv": "validation"}, ("question", "sentence")),
    "mnli": GlueTask("GLUE MNLI", "glue_mnli", (("sentence1",), ("sentence2",)),
                     ("entailment", "neutral", "contradiction"), "train.tsv", "dev_matched.tsv", "dev_mismatched.tsv",
                     {"train.tsv": "train", "dev_matched.tsv": "validation_matched",
                      "dev_mismatched.tsv": "validation_mismatched"}, ("premise", "hypothesis")),
}


def read_tsv(path: Path, task: GlueTask) -> tuple[list[tuple[str, ...]], list[int]]:
    """(texts per example, one str per segment; label ids) of a GLUE TSV, columns found by header name."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))  # GLUE text holds bare quotes
    header = rows[0]

    def col(names: tuple[str, ...]) -> int:
        hit = next((n for n in names if n in header), None)
        if hit is None:
            raise ValueError(f"{path}: none of the columns {names} in header {header}")
        return header.index(hit)

    cols, lab = [col(names) for names in task.columns], col(LABEL_COLUMNS)
    texts, labels = [], []
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise ValueError(f"{path}:{i}: {len(row)} fields, header has {len(header)}")
        y = task.label_names.index(row[lab]) if row[lab] in task.label_names else int(row[lab])
        if not 0 <= y < len(task.label_names):
            raise ValueError(f"{path}:{i}: label {row[lab]!r} not in {task.label_names}")
        texts.append(tuple(row[c].strip() for c in cols))
        labels.append(y)
    return texts, labels


def join_segments(segments: list[list[int]], max_len: int, sep: int) -> list[int]:
    """One segment cut to ``max_len``; a pair ``a + [sep] + b`` cut longest-first to ``max_len`` tokens."""
    if len(segments) == 1:
        return segments[0][:max_len]
    a, b = segments
    budget = max_len - 1
    if len(a) + len(b) > budget:  # longest-first: the shorter keeps min(len, budget // 2), the longer the rest
        keep_short = min(min(len(a), len(b)), budget // 2)
        keep_a = keep_short if len(a) <= len(b) else budget - keep_short
        a, b = a[:keep_a], b[: budget - keep_a]
    return [*a, sep, *b]


def stratified_holdout(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of indices into (train, held-out), ``round(fraction * n_c)`` of each class held out."""
    rng = np.random.default_rng([seed, 0])  # split stream; the train subset draws from [seed, 1]
    train, held = [], []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        idx = idx[rng.permutation(len(idx))]
        n_held = int(round(fraction * len(idx)))
        held.append(idx[:n_held])
        train.append(idx[n_held:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(held))


class GlueSet(Dataset):
    """Encoded examples: item i = (ids (L_i,) long, label () long)."""

    def __init__(self, ids: list[Tensor], labels: Tensor) -> None:
        self.ids, self.labels = ids, labels

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.ids[i], self.labels[i]

    def subset(self, idx: np.ndarray) -> GlueSet:
        return GlueSet([self.ids[int(i)] for i in idx], self.labels[torch.as_tensor(idx, dtype=torch.long)])


def collate(items: list[tuple[Tensor, Tensor]], pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """Right-pad to the longest row -> (x (B, T), y (B,), lengths (B,))."""
    lengths = torch.tensor([len(ids) for ids, _ in items], dtype=torch.long)
    x = torch.full((len(items), int(lengths.max())), pad_id, dtype=torch.long)  # (B, T)
    for row, (ids, _) in enumerate(items):
        x[row, : len(ids)] = ids
    return x, torch.stack([y for _, y in items]), lengths


def fetch_from_hub(key: str, dest: Path) -> Path:
    """Write the hub copy of GLUE ``key`` as GLUE-style TSVs into ``dest``; offline -> DatasetNotFoundError."""
    task = TASKS[key]
    try:
        import datasets

        ds = datasets.load_dataset(HUB_NAME, key)
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds of errors when offline
        raise missing_dataset_error(task.dir_name, [dest], f"  - datasets.load_dataset({HUB_NAME!r}, {key!r}) "
                                    f"failed ({type(e).__name__}: {e}); run it once online") from e
    dest.mkdir(parents=True, exist_ok=True)
    header = [names[0] for names in task.columns] + ["label"]
    for name, split in task.hub_splits.items():
        tmp = dest / f"{name}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("\t".join(header) + "\n")
            for ex in ds[split]:
                texts = [" ".join(str(ex[c]).split()) for c in task.hub_columns]  # no tabs / newlines inside
                f.write("\t".join([*texts, str(ex["label"])]) + "\n")
        tmp.replace(dest / name)
    return dest


class GLUEDataModule(DataModuleBase):
    """GLUE SST-2 / QNLI / MNLI with GPT-2 BPE, for fine-tuning a pretrained causal LM (coupledqk Table 7)."""

    def __init__(self, task: str, batch_size: int = 32, max_len: int = 128, max_train_examples: int | None = None,
                 split_protocol: str = "official", holdout_fraction: float = 0.2, seed: int = 0,
                 data_dir: str | None = None, cache_dir: str | None = None, download: bool = False,
                 num_workers: int = 0) -> None:
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")
        if split_protocol not in PROTOCOLS:
            raise ValueError(f"split_protocol must be one of {PROTOCOLS}, got {split_protocol!r}")
        if not 0.0 < holdout_fraction < 1.0:
            raise ValueError(f"holdout_fraction must be in (0, 1), got {holdout_fraction}")
        if max_len < 3:
            raise ValueError(f"max_len must be >= 3 (a token of each segment and the separator), got {max_len}")
        self.key, self.task = task, TASKS[task]
        self.batch_size, self.max_len, self.max_train_examples = batch_size, max_len, max_train_examples
        self.split_protocol, self.holdout_fraction, self.seed = split_protocol, holdout_fraction, seed
        self.data_dir, self.cache_override, self.download = data_dir, cache_dir, download
        self.num_workers = num_workers
        self.sets: dict[str, GlueSet] = {}
        self.pad_id, self.n_truncated = -1, 0

    def _locate(self) -> tuple[Path, bool]:
        """(dataset folder, fetched from the hub?); the folder holds the files the protocol needs."""
        t = self.task
        need = t.train if self.split_protocol == "official" else t.dev
        root = find_dataset(t.dir_name, self.data_dir, marker=need)
        if root is not None and (root / t.dev).exists():
            return root, False
        if self.download:
            return fetch_from_hub(self.key, download_root(self.data_dir) / t.dir_name), True
        dev_only = find_dataset(t.dir_name, self.data_dir, marker=t.dev)
        if dev_only is not None:
            raise missing_dataset_error(t.dir_name, candidate_dirs(t.dir_name, self.data_dir), (
                f"  - {t.title}: split_protocol='official' needs {t.train}, but the first copy found, {dev_only}, "
                f"has only {t.dev}. Supply {t.train} (or data.download=true: {HUB_NAME} config {self.key}), or set "
                f"data.split_protocol=dev_holdout to fine-tune on a {1 - self.holdout_fraction:.0%} split of dev "
                f"and evaluate on the rest (not comparable to the paper's dev accuracy)."))
        raise missing_dataset_error(t.dir_name, candidate_dirs(t.dir_name, self.data_dir), (
            f"  - files: {t.train}, {t.dev}{', ' + t.extra_eval if t.extra_eval else ''} (GLUE TSV)\n"
            f"  - hub: datasets.load_dataset({HUB_NAME!r}, {self.key!r}) (set data.download=true when online)"))

    def _encode(self, path: Path, tok: Tokenizer, eos: int) -> GlueSet:
        """Encode a TSV (segment ids cached per file digest + tokenizer), then join and cut to ``max_len``."""
        digest = cached_file_digests([path], self.cache_override)[0][:16]
        tok_key = hashlib.sha256(tok.to_str().encode()).hexdigest()[:16]
        cached = cache_dir("glue", self.cache_override) / f"{self.key}_{path.stem}_{digest}_{tok_key}.pt"
        if cached.exists():
            segs, labels = torch.load(cached, weights_only=True)
        else:
            texts, labels = read_tsv(path, self.task)
            segs = [[e.ids for e in tok.encode_batch_fast(list(col), add_special_tokens=False)]
                    for col in zip(*texts, strict=True)]
            labels = torch.tensor(labels, dtype=torch.long)
            tmp = cached.with_suffix(f".{os.getpid()}.tmp")  # concurrent runs (a seed sweep) never share a tmp
            torch.save((segs, labels), tmp)
            tmp.replace(cached)
        examples = [list(s) for s in zip(*segs, strict=True)]  # per example: one id list per segment
        self.n_truncated += sum(sum(map(len, ex)) + len(ex) - 1 > self.max_len for ex in examples)
        return GlueSet([torch.tensor(join_segments(ex, self.max_len, eos), dtype=torch.long) for ex in examples],
                       labels)

    def setup(self, stage: str | None = None) -> None:
        if self.sets:
            return
        t = self.task
        root, fetched = self._locate()
        tok = gpt2_tokenizer(data_dir=self.data_dir)
        eos = tok.token_to_id(EOS_TOKEN)  # 50256: pair separator and padding
        if eos is None:
            raise ValueError(f"tokenizer has no {EOS_TOKEN!r}: not the GPT-2 BPE")
        self.n_truncated = 0
        files = {"dev": root / t.dev}
        if self.split_protocol == "official":
            files["train"] = root / t.train
        if t.extra_eval and (root / t.extra_eval).exists():
            files["extra"] = root / t.extra_eval
        enc = {k: self._encode(p, tok, eos) for k, p in files.items()}
        if self.split_protocol == "official":
            train, val = enc["train"], enc["dev"]
        else:
            tr, held = stratified_holdout(enc["dev"].labels.numpy(), self.holdout_fraction, self.seed)
            train, val = enc["dev"].subset(tr), enc["dev"].subset(held)
        n_train_all = len(train)
        if self.max_train_examples is not None and self.max_train_examples < len(train):
            keep = np.random.default_rng([self.seed, 1]).choice(len(train), self.max_train_examples, replace=False)
            train = train.subset(np.sort(keep))
        self.sets = {"train": train, "val": val, "test": enc.get("extra", val)}
        self.pad_id, self.vocab_size, self.n_classes = eos, tok.get_vocab_size(), len(t.label_names)
        self.seq_len = max(len(x) for s in self.sets.values() for x in s.ids)
        self.fingerprint = fingerprint_files(list(files.values()), root=root, cache_override=self.cache_override)
        self.source = self._describe(root, files, n_train_all, fetched)
        if not fetched:  # a fall-through between the default roots is said (oscrepro.data.paths)
            self.source += fallthrough_note(t.dir_name, root, self.data_dir)

    def _describe(self, root: Path, files: dict[str, Path], n_train_all: int, fetched: bool) -> str:
        t, n = self.task, {k: len(s) for k, s in self.sets.items()}
        unit = "pairs" if len(t.columns) == 2 else "sentences"
        if self.split_protocol == "official":
            what = f"{t.title}: train={t.train} ({n_train_all:,}), val={t.dev} ({n['val']:,})"
        else:
            n_dev, frac = n_train_all + n["val"], self.holdout_fraction
            what = (f"{t.title} dev only: {1 - frac:.0%}/{frac:.0%} seeded stratified split (seed {self.seed}) of "
                    f"the {n_dev:,} dev {unit} ({t.dev}) -> {n_train_all:,} fine-tune / {n['val']:,} held-out eval; "
                    f"not comparable to the paper's dev accuracy")
        test = f"test={files['extra'].name} ({n['test']:,})" if "extra" in files else "test = the val set"
        subset = (f"; subset: {n['train']:,} of {n_train_all:,} fine-tune examples (max_train_examples, seed "
                  f"{self.seed})" if n["train"] < n_train_all else "")
        joined = f", pairs joined as a {EOS_TOKEN} b" if len(t.columns) == 2 else ""
        return (f"{what}; {test}{subset}; GPT-2 BPE (vocab {self.vocab_size:,}){joined}, max_len {self.max_len} "
                f"({self.n_truncated:,} examples cut); from {'hub ' + HUB_NAME + ' -> ' if fetched else ''}{root}")

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(self.sets[split], batch_size=self.batch_size, shuffle=shuffle,
                          num_workers=self.num_workers, collate_fn=partial(collate, pad_id=self.pad_id))
