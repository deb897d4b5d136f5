"""Lightning data module for the synthetic SVA task (fqo Tables 2, 3, 7).

Sentences have 6-8 tokens. Instead of padding (the attention contract has no key-padding mask, and padding
would add oscillators the paper does not have) every batch holds sentences of one length: a seeded
length-bucket sampler groups them. Batches are ``(x, y, meta)`` with ``x`` (B, T) token ids whose last
position is ``<verb>``, ``y`` (B,) the subject number, and ``meta`` the analysis indices and the hard flag.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from oscrepro.data import sva
from oscrepro.data.base import FINGERPRINT_HEX, DataModuleBase
from oscrepro.data.paths import cache_dir
from oscrepro.data.sva import N_CLASSES, VOCAB, SVAExample, generate


class SVADataset(Dataset):
    """Tensors of one split; item = (ids, label, meta). Batches are fetched whole (``__getitems__``): one tensor
    index per field instead of a tensor per sentence and a collate, the same tensors as before."""

    META = ("subject_idx", "distractor_idx", "hard", "invariant_subject")

    def __init__(self, examples: list[SVAExample], order_seed: int = 0) -> None:
        self.examples = examples
        self.order_seed = order_seed  # the batch order's seed (data_seed), for LengthBucketSampler under DDP
        self.lengths = np.array([len(e.ids) for e in examples])
        t_max = int(self.lengths.max()) if len(examples) else 0
        padded = [list(e.ids) + [0] * (t_max - len(e.ids)) for e in examples]
        self.ids = torch.tensor(padded, dtype=torch.long).reshape(len(examples), t_max)  # (N, T_max), 0-padded
        self.labels = torch.tensor([e.label for e in examples], dtype=torch.long)  # (N,)
        self.meta = {k: torch.tensor([getattr(e, k) for e in examples]) for k in self.META}  # long / bool (N,)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, dict[str, int | bool]]:
        e = self.examples[i]
        return torch.tensor(e.ids), e.label, {k: getattr(e, k) for k in self.META}

    def __getitems__(self, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """A batch of equal-length sentences (LengthBucketSampler): x (B, T), y (B,), meta {k: (B,)}."""
        index = torch.from_numpy(np.asarray(idx, dtype=np.int64))  # as_tensor(list) parses ints one by one: 4x slower
        t = int(self.lengths[idx[0]])
        return self.ids[index, :t], self.labels[index], {k: v[index] for k, v in self.meta.items()}


def _whole_batch(batch: tuple) -> tuple:
    """collate_fn for datasets that fetch whole batches: the batch as fetched."""
    return batch


class LengthBucketSampler(Sampler[list[int]]):
    """Batches of equal-length items; order reshuffled each epoch from (seed, epoch) when ``shuffle``.

    Multi-process training (``trainer=ddp``): Lightning rebuilds a loader's batch sampler around a
    ``DistributedSampler`` as ``cls(sampler, batch_size=..., drop_last=...)`` (the ``BatchSampler`` API, which
    :meth:`__init__` also accepts). Then every rank builds the same global batches of ``batch_size x world`` items
    from ``(seed, epoch)`` (the batches a single process with that batch size gets) and takes its slice of each
    when training (``np.array_split``: sizes differ by at most one; BaseTask.shard_weight makes the gradient the
    global batch's); evaluation takes whole batches round-robin (its metrics gather every rank's samples). A global
    training batch smaller than the world (one sentence left in a bucket, 2 ranks) is skipped: a rank cannot step
    on nothing while the others wait for it.
    """

    def __init__(self, lengths: np.ndarray | Sampler, batch_size: int, shuffle: bool = False, seed: int = 0,
                 epoch_source: Callable[[], int | None] | None = None, drop_last: bool = False) -> None:
        self.shard: tuple[int, int] | None = None  # (rank, world) in multi-process training
        self.sampler = lengths if isinstance(lengths, DistributedSampler) else None
        if self.sampler is not None:  # rebuilt by Lightning for DDP (class docstring)
            ds = self.sampler.dataset
            lengths, shuffle, seed = ds.lengths, self.sampler.shuffle, ds.order_seed
            self.shard = (self.sampler.rank, self.sampler.num_replicas)
        self.lengths, self.batch_size, self.shuffle, self.seed = lengths, batch_size, shuffle, seed
        self.drop_last = drop_last  # the BatchSampler API's; never drops
        self.epoch = 0
        # the trainer's epoch, when training: a resumed run then replays the uninterrupted run's order (a count of
        # iterations restarts at 0 in the resumed process; oscrepro.runs.resume)
        self.epoch_source = epoch_source

    def _global_batches(self) -> list[list[int]]:
        size = self.batch_size * (self.shard[1] if self.shard else 1)
        rng = np.random.default_rng([self.seed, self.epoch])
        batches: list[list[int]] = []
        for length in np.unique(self.lengths):
            idx = np.flatnonzero(self.lengths == length)
            if self.shuffle:
                idx = rng.permutation(idx)
            batches += [idx[k : k + size].tolist() for k in range(0, len(idx), size)]
        if self.shuffle:
            batches = [batches[k] for k in rng.permutation(len(batches))]
        return batches

    def _batches(self) -> list[list[int]]:
        batches = self._global_batches()
        if self.shard is None:
            return batches
        rank, world = self.shard
        if not self.shuffle:  # evaluation: whole batches, round-robin
            return batches[rank::world]
        return [np.array_split(np.asarray(b), world)[rank].tolist() for b in batches if len(b) >= world]

    def __iter__(self) -> Iterator[list[int]]:
        epoch = self.epoch_source() if self.epoch_source is not None else None
        if self.sampler is not None:  # Lightning sets the DistributedSampler's epoch
            epoch = self.sampler.epoch
        if epoch is not None:
            self.epoch = epoch
        batches = self._batches()
        self.epoch += 1  # without an epoch source (outside training): the next iteration is the next epoch
        return iter(batches)

    def __len__(self) -> int:
        return len(self._batches())


def collate(items: list[tuple[torch.Tensor, int, dict]]) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Per-item collation (the reference for :meth:`SVADataset.__getitems__`, compared in the tests)."""
    x = torch.stack([it[0] for it in items])  # (B, T)
    y = torch.tensor([it[1] for it in items])  # (B,)
    meta = {k: torch.tensor([it[2][k] for it in items]) for k in items[0][2]}
    return x, y, meta


def generate_cached(n: int, seed: int) -> list[SVAExample]:
    """:func:`~oscrepro.data.sva.generate`, cached on disk (keyed by n, seed and the generator's source code):
    40K sentences take ~0.6 s to generate, once per run otherwise. JSON, not pickle: loading the cache runs no code."""
    code = hashlib.sha256(Path(sva.__file__).read_bytes()).hexdigest()[:12]
    path = cache_dir("sva") / f"sva_{n}_{seed}_{code}.json"
    if path.exists():
        return [SVAExample(**{k: tuple(v) if isinstance(v, list) else v for k, v in row.items()})
                for row in json.loads(path.read_text())]
    examples = generate(n, seed)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps([dataclasses.asdict(e) for e in examples]))
    tmp.replace(path)  # atomic: parallel workers never read a half-written cache
    return examples


class SVADataModule(DataModuleBase):
    """40K/4K/4K synthetic agreement sentences (App. B), generated from ``data_seed``."""

    def __init__(self, n_train: int = 40_000, n_val: int = 4_000, n_test: int = 4_000, data_seed: int = 0,
                 batch_size: int = 64) -> None:
        super().__init__()
        self.n_train, self.n_val, self.n_test = n_train, n_val, n_test
        self.data_seed, self.batch_size = data_seed, batch_size
        self.vocab_size, self.n_classes = len(VOCAB), N_CLASSES
        self.source = f"synthetic SVA (oscrepro.data.sva), {n_train}/{n_val}/{n_test}, data_seed={data_seed}"
        self.splits: dict[str, SVADataset] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        sizes = {"train": self.n_train, "val": self.n_val, "test": self.n_test}
        for k, (name, n) in enumerate(sizes.items()):  # disjoint seed streams per split
            seed = int(np.random.SeedSequence([self.data_seed, k]).generate_state(1)[0])
            self.splits[name] = SVADataset(generate_cached(n, seed), order_seed=self.data_seed)
        digest = hashlib.sha256()
        for ds in self.splits.values():
            digest.update(repr([e.ids + (e.label,) for e in ds.examples]).encode())
        self.fingerprint = digest.hexdigest()[:FINGERPRINT_HEX]
        self.seq_len = max((int(ds.lengths.max()) for ds in self.splits.values() if len(ds)), default=None)  # T <= 8

    def _trainer_epoch(self) -> int | None:
        """The epoch whose batches the training loader is about to give. Not ``trainer.current_epoch``: a resumed
        process creates its first iterator before Lightning counts the checkpoint's epoch as completed; the
        processed-epochs count (what Lightning hands ``set_epoch``) is right in both cases."""
        trainer = self.trainer  # set by Lightning while this module is attached to a Trainer
        return None if trainer is None else int(trainer.fit_loop.epoch_progress.current.processed)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        ds = self.splits[split]
        sampler = LengthBucketSampler(ds.lengths, self.batch_size, shuffle, self.data_seed, self._trainer_epoch)
        return DataLoader(ds, batch_sampler=sampler, collate_fn=_whole_batch)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
