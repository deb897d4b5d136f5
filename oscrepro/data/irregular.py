"""Irregularly sampled time series: the shared batch format, padding, observation drop and data-module base.

The OsciFormer tasks (bit-stream XOR, 2-D spirals, the resonance tasks, UEA with dropped observations; osciformer
Sec. 7, App. E.2, E.3) all hand the model a set of observations at real-valued times. One batch format serves them:

    x, y, meta = batch
    x                   (B, T, C) float32   features, right-padded with 0
    meta["times"]       (B, T) float32      absolute times, non-decreasing per row; padding repeats the last real time
    meta["mask"]        (B, T) bool         True on real observations (always a prefix of the row)
    classification:     y (B,) long
    regression:         y (B, T_out, C_out) float32 at meta["target_times"] (B, T_out) float32, meta["target_mask"]
                        (B, T_out) bool (True on real targets; the same padding rules as the inputs)

T is the longest real length *in the batch* (rows are trimmed per batch), so ``T <= dm.seq_len``.

Per split the arrays live in one :class:`IrregularArrays` (padded to the split's longest row, validated once).
:func:`random_drop` removes ``floor(rate * n)`` of a row's ``n`` real observations uniformly at random (seeded,
never all of them; the rule of Kidger et al. 2020's irregular UEA: ``randperm(T)[:int(T * rate)]``) and compacts
the survivors to the left, keeping their original times. :class:`IrregularDataModule` runs it per split from its
own seed stream, then sets ``n_features`` / ``seq_len`` and the fingerprint.

Where the sources are silent we chose:
* dropped points are removed (compacted), not kept as NaN: the attention contract takes times, not a grid;
* the drop is drawn once per split at ``setup`` (a fixed irregular data set, as Kidger et al. and Log-NCDE do),
  from ``SeedSequence([seed, 1000 + k])`` for split k, disjoint from the generators' streams ``[seed, k]``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields, replace

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from oscrepro.data.base import FINGERPRINT_HEX, DataModuleBase

Batch = tuple[Tensor, Tensor, dict[str, Tensor]]
DROP_STREAM = 1000  # SeedSequence([seed, DROP_STREAM + k]): the drop of split k


@dataclass
class IrregularArrays:
    """One split, padded: x (N, T, C) float32, t (N, T) float32, mask (N, T) bool (a prefix per row), y (N,) int64
    or (N, T_out, C_out) float32 with target_times (N, T_out) float32 and target_mask (N, T_out) bool."""

    x: np.ndarray
    t: np.ndarray
    mask: np.ndarray
    y: np.ndarray
    target_times: np.ndarray | None = None
    target_mask: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.x, self.t = self.x.astype(np.float32, copy=False), self.t.astype(np.float32, copy=False)
        self.mask = self.mask.astype(bool, copy=False)
        regression = self.target_times is not None
        self.y = self.y.astype(np.float32 if regression else np.int64, copy=False)
        n, length = self.mask.shape
        if self.x.shape[:2] != (n, length) or self.t.shape != (n, length) or len(self.y) != n:
            raise ValueError(f"shapes disagree: x {self.x.shape}, t {self.t.shape}, mask {self.mask.shape}, "
                             f"y {self.y.shape}")
        check_rows(self.t, self.mask)
        if regression:
            if self.target_mask is None:
                self.target_mask = np.ones(self.target_times.shape, dtype=bool)
            self.target_times = self.target_times.astype(np.float32, copy=False)
            self.target_mask = self.target_mask.astype(bool, copy=False)
            if self.y.shape[:2] != self.target_times.shape or self.y.ndim != 3:
                raise ValueError(f"targets {self.y.shape} do not match target_times {self.target_times.shape}")
            check_rows(self.target_times, self.target_mask)

    def __len__(self) -> int:
        return len(self.mask)

    @property
    def lengths(self) -> np.ndarray:
        """Real observations per row, (N,)."""
        return self.mask.sum(axis=1)

    def subset(self, index: np.ndarray) -> IrregularArrays:
        """The rows ``index`` (a split of a pooled set)."""
        return replace(self, **{f.name: getattr(self, f.name)[index] for f in fields(self)
                                if getattr(self, f.name) is not None})


def check_rows(t: np.ndarray, mask: np.ndarray) -> None:
    """Raise unless every row has >= 1 real point, the mask is a prefix and the times never decrease."""
    if not mask[:, 0].all() or (mask[:, 1:] & ~mask[:, :-1]).any():
        raise ValueError("every row needs a first real observation and a prefix mask (right padding)")
    if (np.diff(t, axis=1) < 0).any():
        raise ValueError("times must be non-decreasing along each row (padding repeats the last real time)")


def compact(x: np.ndarray, t: np.ndarray, keep: np.ndarray, width: int | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Move the kept points of each row to the front in order and right-pad: (x, t, mask) of width ``width``.

    x (N, L, C), t (N, L), keep (N, L) bool -> x (N, W, C) with 0 padding, t (N, W) repeating each row's last kept
    time, mask (N, W). ``width`` defaults to the longest kept row.
    """
    n_keep = keep.sum(axis=1)  # (N,)
    if (n_keep == 0).any():
        raise ValueError("a row keeps no observation")
    width = int(n_keep.max()) if width is None else width
    if width < n_keep.max():
        raise ValueError(f"width {width} < longest kept row {n_keep.max()}")
    order = np.argsort(~keep, axis=1, kind="stable")  # kept positions first, in time order, (N, L)
    pad = max(0, width - keep.shape[1])
    order = np.pad(order, ((0, 0), (0, pad)), mode="edge")[:, :width]  # (N, W)
    mask = np.arange(width)[None, :] < n_keep[:, None]  # (N, W)
    last = np.take_along_axis(order, (n_keep - 1)[:, None], axis=1)  # index of each row's last kept point
    order = np.where(mask, order, last)  # padding points at the last real observation
    x_out = np.take_along_axis(x, order[..., None], axis=1) * mask[..., None]  # (N, W, C)
    t_out = np.take_along_axis(t, order, axis=1)  # (N, W)
    return x_out.astype(np.float32), t_out.astype(np.float32), mask


def random_drop(arrays: IrregularArrays, rate: float, rng: np.random.Generator) -> IrregularArrays:
    """Remove ``floor(rate * n)`` of each row's ``n`` real observations, uniformly, but never all (osciformer
    Sec. 7: "randomly dropping observations at ratios of 30%, 50%, and 70% per sample"). Targets are untouched."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"drop rate must be in [0, 1), got {rate}")
    n = arrays.lengths  # (N,)
    n_drop = np.minimum(np.floor(rate * n + 1e-9).astype(np.int64), n - 1)  # (N,)
    keys = np.where(arrays.mask, rng.random(arrays.mask.shape), np.inf)  # padding never ranks among the drops
    rank = np.argsort(np.argsort(keys, axis=1), axis=1)  # (N, T): rank of each point's key in its row
    keep = arrays.mask & (rank >= n_drop[:, None])
    x, t, mask = compact(arrays.x, arrays.t, keep)
    return replace(arrays, x=x, t=t, mask=mask)


def _trim(a: Tensor, n: int) -> Tensor:
    return a[:, :n]


class IrregularDataset(Dataset):
    """A split's :class:`IrregularArrays` as tensors. ``__getitems__`` gathers a batch in one indexing step and trims
    it to the batch's longest row (so the loader's ``collate_fn`` is the identity); ``__getitem__`` gives one row
    trimmed to its own length, for :func:`pad_collate`."""

    def __init__(self, arrays: IrregularArrays) -> None:
        self.arrays = arrays
        self.x, self.t = torch.from_numpy(arrays.x), torch.from_numpy(arrays.t)
        self.mask, self.y = torch.from_numpy(arrays.mask), torch.from_numpy(arrays.y)
        self.lengths = self.mask.sum(dim=1)  # (N,)
        self.regression = arrays.target_times is not None
        if self.regression:
            self.target_times = torch.from_numpy(arrays.target_times)
            self.target_mask = torch.from_numpy(arrays.target_mask)
            self.target_lengths = self.target_mask.sum(dim=1)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> Batch:
        n = int(self.lengths[i])
        meta = {"times": self.t[i, :n], "mask": self.mask[i, :n]}
        y = self.y[i]
        if self.regression:
            m = int(self.target_lengths[i])
            y = y[:m]
            meta |= {"target_times": self.target_times[i, :m], "target_mask": self.target_mask[i, :m]}
        return self.x[i, :n], y, meta

    def __getitems__(self, idx: list[int]) -> Batch:
        index = torch.as_tensor(idx)
        n = int(self.lengths[index].max())
        meta = {"times": _trim(self.t[index], n), "mask": _trim(self.mask[index], n)}  # (B, T)
        y = self.y[index]
        if self.regression:
            m = int(self.target_lengths[index].max())
            y = _trim(y, m)  # (B, T_out, C_out)
            meta |= {"target_times": _trim(self.target_times[index], m),
                     "target_mask": _trim(self.target_mask[index], m)}
        return _trim(self.x[index], n), y, meta  # x (B, T, C)


def _pad_rows(rows: list[Tensor], fill_last: bool) -> Tensor:
    """Right-pad 1-D+ tensors along dim 0 to the longest: zeros, or (``fill_last``) the row's last value."""
    n = max(len(r) for r in rows)
    out = []
    for r in rows:
        tail = r[-1:].expand(n - len(r), *r.shape[1:]) if fill_last else r.new_zeros(n - len(r), *r.shape[1:])
        out.append(torch.cat([r, tail]))
    return torch.stack(out)


def pad_collate(samples: list[Batch]) -> Batch:
    """Pad a list of single rows ``(x (n, C), y, meta)`` of different lengths into one batch of the module format:
    x with 0, times with the row's last time, masks with False (the same result as ``__getitems__``)."""
    xs, ys, metas = zip(*samples, strict=True)
    meta = {"times": _pad_rows([m["times"] for m in metas], True), "mask": _pad_rows([m["mask"] for m in metas], False)}
    if "target_times" in metas[0]:
        y = _pad_rows(list(ys), False)  # (B, T_out, C_out)
        meta |= {"target_times": _pad_rows([m["target_times"] for m in metas], True),
                 "target_mask": _pad_rows([m["target_mask"] for m in metas], False)}
    else:
        y = torch.stack(list(ys))  # (B,)
    return _pad_rows(list(xs), False), y, meta


def _identity(batch: Batch) -> Batch:
    return batch


class IrregularDataModule(DataModuleBase):
    """Base of the irregular-time-series modules: a subclass implements :meth:`build_splits` (and sets ``source``,
    ``n_classes``); ``setup`` applies the per-sample drop, the :meth:`transform` hook (e.g. standardisation from
    the training split), sets ``n_features`` / ``seq_len`` and fingerprints the arrays."""

    def __init__(self, batch_size: int = 64, seed: int = 0, drop_rate: float = 0.0, num_workers: int = 0) -> None:
        super().__init__()
        if not 0.0 <= drop_rate < 1.0:
            raise ValueError(f"drop_rate must be in [0, 1), got {drop_rate}")
        self.batch_size, self.seed, self.drop_rate, self.num_workers = batch_size, seed, drop_rate, num_workers
        self.splits: dict[str, IrregularDataset] = {}

    def build_splits(self) -> dict[str, IrregularArrays]:
        """The ``train`` / ``val`` / ``test`` arrays before the drop."""
        raise NotImplementedError

    def transform(self, splits: dict[str, IrregularArrays]) -> dict[str, IrregularArrays]:
        """Hook after the drop (identity here)."""
        return splits

    def data_fingerprint(self, splits: dict[str, IrregularArrays]) -> str:
        """sha256 of the source text and the arrays (generated data); file-based modules override it."""
        digest = hashlib.sha256(self.source.encode())
        for name in sorted(splits):
            for f in fields(splits[name]):
                value = getattr(splits[name], f.name)
                if value is not None:
                    digest.update(np.ascontiguousarray(value).tobytes())
        return digest.hexdigest()[:FINGERPRINT_HEX]

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        splits = self.build_splits()
        if self.drop_rate > 0:
            splits = {name: random_drop(a, self.drop_rate,
                                        np.random.default_rng(np.random.SeedSequence([self.seed, DROP_STREAM + k])))
                      for k, (name, a) in enumerate(splits.items())}
            self.source += f"; {self.drop_rate:.0%} of each sample's observations dropped (seeded per split)"
        splits = self.transform(splits)
        self.n_features = int(splits["train"].x.shape[-1])
        self.seq_len = int(max(a.lengths.max() for a in splits.values()))
        self.fingerprint = self.data_fingerprint(splits)
        self.splits = {name: IrregularDataset(a) for name, a in splits.items()}

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(self.splits[split], batch_size=self.batch_size, shuffle=shuffle,
                          num_workers=self.num_workers, collate_fn=_identity)
