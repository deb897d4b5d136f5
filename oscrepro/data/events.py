"""Event sequences for temporal point processes (osciformer Table 1: next event type / time, log-likelihood).

One data module, :class:`EventDataModule`, serves every event set by ``name``:

* ``bookorder``: RMTPP BookOrder (Du et al. 2016), 2 types, complete; fold K: train/dev = first 90 / last 10 of the
  100 RMTPP-train streams (NHP's ceil(0.9 n) rule), test = the 100 RMTPP-test streams. Unit: RMTPP's, consistent
  with minutes at millisecond resolution (every gap is a multiple of 1/60,000; undocumented).
* ``stackoverflow``: RMTPP StackOverflow, 22 types, times / 1e6 (NHP's unit, 10^6 s). Test = RMTPP test K,
  complete (1,326 sequences). ``time-K-train.txt`` is missing from the shared copy, so train/dev (the first 4,777 /
  last 530 of the 5,307 RMTPP-train sequences) keep only the sequences whose timestamps are recoverable from the
  other folds' test files: 3,142 of 5,307 for fold 1 (the folds are independent random splits, so which ones are
  recoverable does not depend on their content). The source says "subset". A complete ``time-K-train.txt`` on a
  data root is used instead when present.
* ``stackoverflow_nhp``: the NHP-format SO fold-1 subset (300 / 100 / 100 sequences, same unit).
* ``hawkes``: synthetic multivariate Hawkes sequences simulated by tick (:class:`~.events_sources.HawkesSpec`
  from the ``hawkes`` config node; seeded; true parameters in :meth:`EventDataModule.hawkes_params`), a stand-in
  for the paper's "Synthetic" set, whose generator the paper does not describe.
* ``synthetic``, ``neonate``, ``traffic``, ``mimic``: the paper's other sets, not obtainable here; they load from
  user-supplied NHP/THP pickles at ``<root>/event_seq_tpp/nhp_format/<name>/fold<K>/{train,dev,test}.pkl`` and
  otherwise raise the data path's missing-data error.

Rows and batches. Times are measured from the sequence's start: the simulation start (0) for Hawkes, the first
event for recorded sequences (their start is not recorded; SO's times are calendar times). Sequences longer than
``max_len`` are cut into consecutive non-overlapping windows (``crop="window"``, the default: no event is lost;
BookOrder's 3,319-event streams become 26 rows of <= 128) or cut to their first ``max_len`` events
(``crop="truncate"``, PhysioPro's ``max_len`` for ContiFormer). A later window's times are measured from the
event just before it, so its first time is a true inter-event gap; the history before a window is not seen.
Rows with fewer than ``min_len`` events are dropped (PhysioPro drops length-1 sequences). Times are divided by
``time_scale``: a number, or ``"auto"`` = the mean inter-event gap of the training rows (then the mean gap is 1).
``max_rows`` (``{train: N, val: N, test: N}``, null = all) keeps a seeded subset of each split's rows, the same for
every model seed, for budgets below the paper's (ContiFormer's cost grows with rows x T^2); ``source`` says so.
Batches (the format of :mod:`oscrepro.data.irregular`, with per-event types)::

    x, y, meta = batch
    x              (B, T, K) float32   one-hot event types, right-padded with 0
    y              (B, T)    int64     event types 0..K-1, padded with 0
    meta["times"]  (B, T)    float32   times since the row's start, non-decreasing; padding repeats the last time
    meta["mask"]   (B, T)    bool      True on real events (a prefix of each row)

T is the longest row of the batch, <= ``seq_len``. ``n_features = num_types = K``; no ``n_classes`` is set (the
event head's width is ``num_types``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from oscrepro.data.base import FINGERPRINT_HEX, DataModuleBase
from oscrepro.data.events_sources import (
    EventSeq,
    HawkesSpec,
    load_nhp_pickle,
    nhp_sequences,
    nhp_train_count,
    parse_rmtpp,
    read_lines,
    recover_times,
    simulate_hawkes,
)
from oscrepro.data.fingerprint import fingerprint_files
from oscrepro.data.irregular import check_rows
from oscrepro.data.paths import candidate_dirs, fallthrough_note, missing_dataset_error

__all__ = ["EventArrays", "EventDataModule", "EventDataset", "load_nhp_pickle"]

Batch = tuple[Tensor, Tensor, dict[str, Tensor]]
ROOT = "event_seq_tpp"  # dataset folder under every data root (shared/data/event_seq_tpp)
RMTPP = {"bookorder": ("book_order", 1.0, "RMTPP's unit (consistent with minutes)", 2),
         "stackoverflow": ("so", 1e6, "10^6 s (NHP's unit: Unix seconds / 1e6)", 22)}  # (folder, divisor, unit, K)
NHP_SUBSETS = {"stackoverflow_nhp": "data_so_nhp_subset"}
PAPER_ONLY = ("synthetic", "neonate", "traffic", "mimic")  # osciformer Table 1 sets not obtainable here
NAMES = (*RMTPP, *NHP_SUBSETS, "hawkes", *PAPER_ONLY)
CROPS = ("window", "truncate")
SPLITS = ("train", "val", "test")
RMTPP_URL = "https://github.com/dunan/NeuralPointProcess (data/real/{folder}/)"
PICKLE_FORMAT = ("NHP/THP pickles: train.pkl / dev.pkl (optional: else the last 10% of train) / test.pkl, each a dict "
                 "with 'dim_process' (K) and the split's list of sequences, each a list of dicts 'time_since_start', "
                 "'time_since_last_event', 'type_event' (0-based); read with a restricted unpickler (numpy scalars "
                 "only)")


@dataclass
class EventArrays:
    """One split, padded: types (N, T) int64 (0 on padding), times (N, T) float32, mask (N, T) bool (prefix)."""

    types: np.ndarray
    times: np.ndarray
    mask: np.ndarray

    def __post_init__(self) -> None:
        self.types = self.types.astype(np.int64, copy=False)
        self.times, self.mask = self.times.astype(np.float32, copy=False), self.mask.astype(bool, copy=False)
        check_rows(self.times, self.mask)  # the irregular format's rules: prefix mask, non-decreasing times

    def __len__(self) -> int:
        return len(self.mask)

    @property
    def lengths(self) -> np.ndarray:
        return self.mask.sum(axis=1)

    @classmethod
    def pack(cls, rows: list[EventSeq], time_scale: float) -> EventArrays:
        """Right-pad rows (times already relative to the row start) and divide the times by ``time_scale``."""
        width = max(len(r.types) for r in rows)
        types = np.zeros((len(rows), width), dtype=np.int64)
        times = np.zeros((len(rows), width))
        mask = np.arange(width)[None, :] < np.array([len(r.types) for r in rows])[:, None]  # (N, T)
        for i, r in enumerate(rows):
            types[i, : len(r.types)] = r.types
            times[i] = np.pad(r.times, (0, width - len(r.times)), mode="edge")  # padding repeats the last time
        return cls(types, times / time_scale, mask)


def crop(seq: EventSeq, max_len: int | None, mode: str, from_zero: bool) -> list[EventSeq]:
    """One sequence -> rows with times relative to the row's start (module docstring): the first event (or 0 when
    ``from_zero``, i.e. the times already count from the process start) for the first row, the preceding event
    for a later window."""
    n = len(seq.types)
    step = n if max_len is None or n <= max_len else max_len
    starts = range(0, n, step) if mode == "window" else range(0, min(n, 1))
    rows = []
    for s in starts:
        origin = seq.times[s - 1] if s > 0 else (0.0 if from_zero else seq.times[0])
        rows.append(EventSeq(seq.types[s : s + step], seq.times[s : s + step] - origin))
    return rows


class EventDataset(Dataset):
    """A split as tensors; ``__getitems__`` gathers a batch, trims it to its longest row and one-hot encodes x."""

    def __init__(self, arrays: EventArrays, num_types: int) -> None:
        self.arrays, self.num_types = arrays, num_types
        self.types, self.times = torch.from_numpy(arrays.types), torch.from_numpy(arrays.times)
        self.mask = torch.from_numpy(arrays.mask)
        self.lengths = self.mask.sum(dim=1)  # (N,)

    def __len__(self) -> int:
        return len(self.mask)

    def _batch(self, types: Tensor, times: Tensor, mask: Tensor) -> Batch:
        x = F.one_hot(types, self.num_types).float() * mask[..., None]  # (B, T, K), padding rows all 0
        return x, types, {"times": times, "mask": mask}

    def __getitem__(self, i: int) -> Batch:
        n = int(self.lengths[i])
        return self._batch(self.types[i, :n], self.times[i, :n], self.mask[i, :n])

    def __getitems__(self, idx: list[int]) -> Batch:
        index = torch.as_tensor(idx)
        n = int(self.lengths[index].max())
        return self._batch(self.types[index, :n], self.times[index, :n], self.mask[index, :n])  # (B, T)


def _identity(batch: Batch) -> Batch:
    return batch


def locate_rmtpp(folder: str, fold: int, data_dir: str | None) -> Path:
    """``<root>/event_seq_tpp/rmtpp_raw/<folder>`` holding fold ``fold``'s event files, first root that has it."""
    looked = candidate_dirs(f"{ROOT}/rmtpp_raw/{folder}", data_dir)
    for place in looked:
        if all((place / f"event-{fold}-{s}.txt").is_file() for s in ("train", "test")):
            return place
    how = (f"  - the RMTPP text files event-{fold}-{{train,test}}.txt and time-{fold}-{{train,test}}.txt from "
           f"{RMTPP_URL.format(folder=folder)} in <D>/{ROOT}/rmtpp_raw/{folder}/")
    raise missing_dataset_error(f"{ROOT}/rmtpp_raw/{folder} (fold {fold})", looked, how)


def locate_nhp(name: str, fold: int, data_dir: str | None) -> Path:
    """The folder of NHP/THP pickles for ``name``: ``<root>/event_seq_tpp/nhp_format/<alias>/<fold dir>`` with
    aliases name, data_<name> (THP's), Name, NAME and fold dirs fold<K>, folder<K> (PhysioPro's) or none."""
    aliases = dict.fromkeys([NHP_SUBSETS.get(name, name), f"data_{name}", name.capitalize(), name.upper()])
    looked = []
    for alias in aliases:
        for base in candidate_dirs(f"{ROOT}/nhp_format/{alias}", data_dir):
            for place in (base / f"fold{fold}", base / f"folder{fold}", base):
                looked.append(place)
                if (place / "train.pkl").is_file() and (place / "test.pkl").is_file():
                    return place
    standin = "; the stand-in here is data=tpp_hawkes (name=hawkes)" if name == "synthetic" else ""
    access = "; MIMIC-II needs credentialed PhysioNet access" if name == "mimic" else ""
    how = (f"  - {PICKLE_FORMAT}, in <D>/{ROOT}/nhp_format/{name}/fold{fold}/ (the authors' preprocessed files: "
           f"THP, Zuo et al. 2020, and ContiFormer / PhysioPro, Chen et al. 2023){access}{standin}")
    raise missing_dataset_error(f"{ROOT}/nhp_format/{name} (fold {fold})", looked, how)


class EventDataModule(DataModuleBase):
    """Event sequences of one named set, as rows of <= ``max_len`` events (module docstring)."""

    def __init__(self, name: str, fold: int = 1, data_dir: str | None = None, max_len: int | None = 128,
                 crop: str = "window", min_len: int = 2, time_scale: float | str = 1.0, train_fraction: float = 0.9,
                 hawkes: Mapping[str, Any] | None = None, batch_size: int = 32, seed: int = 0,
                 num_workers: int = 0, max_rows: Mapping[str, int | None] | None = None) -> None:
        super().__init__()
        unknown = sorted(set(max_rows or {}) - set(SPLITS))
        bad = {s: n for s, n in (max_rows or {}).items() if n is not None and (isinstance(n, bool) or int(n) < 1)}
        if unknown or bad:
            raise ValueError(f"max_rows={dict(max_rows or {})}: keys must be {'/'.join(SPLITS)} and values >= 1 or "
                             f"null (unknown {unknown}, bad {bad})")
        self.max_rows = {s: (None if (max_rows or {}).get(s) is None else int(max_rows[s])) for s in SPLITS}
        if name not in NAMES:
            raise ValueError(f"name={name!r}; valid: {', '.join(NAMES)}")
        if crop not in CROPS:
            raise ValueError(f"crop={crop!r}; valid: {', '.join(CROPS)}")
        if isinstance(time_scale, str) and time_scale != "auto":
            raise ValueError(f"time_scale must be a positive number or 'auto', got {time_scale!r}")
        self.name, self.fold, self.data_dir, self.max_len, self.crop = name, fold, data_dir, max_len, crop
        self.min_len, self.requested_scale, self.train_fraction = max(1, min_len), time_scale, train_fraction
        if name == "hawkes" and hawkes is None:
            raise ValueError("name='hawkes' needs the `hawkes` parameters (conf/data/tpp_hawkes.yaml)")
        self.spec = HawkesSpec.from_config(hawkes) if name == "hawkes" else None
        self.batch_size, self.seed, self.num_workers = batch_size, seed, num_workers
        self.num_types: int | None = None
        self.time_scale: float | None = None  # batch time = source time / time_scale
        self.files: list[Path] = []
        self._source_fingerprint = ""  # of self.files, set (after verification) before they are parsed
        self.splits: dict[str, EventDataset] = {}

    # ------------------------------------------------------------------------------------------------- loading

    def _load(self) -> tuple[dict[str, list[EventSeq]], str]:
        """Sequences per split in the source unit, and the source's description."""
        if self.spec is not None:
            sizes = (self.spec.n_train, self.spec.n_val, self.spec.n_test)
            splits = {s: simulate_hawkes(self.spec, n, np.random.SeedSequence([self.seed, k]))
                      for k, (s, n) in enumerate(zip(SPLITS, sizes, strict=True))}
            self.num_types = self.spec.n_types
            stop = " or ".join(([f"t={self.spec.end_time:g}"] if self.spec.end_time is not None else [])
                               + ([f"{self.spec.max_events} events"] if self.spec.max_events is not None else []))
            return splits, (f"synthetic {self.num_types}-type exponential-kernel Hawkes sequences simulated by tick "
                            f"(stand-in for the paper's Synthetic set; oscrepro.data.events), from t=0 until {stop}, "
                            f"spectral radius {self.spec.spectral_radius():.3f}, seed={self.seed}; unit: simulation "
                            f"time")
        if self.name in RMTPP:
            return self._load_rmtpp()
        return self._load_nhp()

    def _load_rmtpp(self) -> tuple[dict[str, list[EventSeq]], str]:
        folder_name, divisor, unit, self.num_types = RMTPP[self.name]  # K of the whole set (SOURCE.md), not one fold
        folder, k = locate_rmtpp(folder_name, self.fold, self.data_dir), self.fold
        complete = (folder / f"time-{k}-train.txt").exists()
        donors = [] if complete else [j for j in range(1, 10) if j != k and (folder / f"time-{j}-test.txt").is_file()]
        self.files = [folder / f"event-{k}-train.txt", folder / f"event-{k}-test.txt", folder / f"time-{k}-test.txt"]
        self.files += ([folder / f"time-{k}-train.txt"] if complete else
                       [folder / f"{kind}-{j}-test.txt" for j in donors for kind in ("event", "time")])
        self._source_fingerprint = fingerprint_files(self.files)  # verified before any of them is parsed
        note = fallthrough_note(f"{ROOT}/rmtpp_raw/{folder_name}", folder, self.data_dir)
        events = read_lines(folder / f"event-{k}-train.txt")
        test = parse_rmtpp(read_lines(folder / f"event-{k}-test.txt"), read_lines(folder / f"time-{k}-test.txt"),
                           divisor, f"{folder}/event-{k}-test.txt")
        n_train = nhp_train_count(len(events), self.train_fraction)
        if complete:
            times: list[str | None] = list(read_lines(folder / f"time-{k}-train.txt"))
            if len(times) != len(events):
                raise ValueError(f"{folder}: {len(events)} event lines but {len(times)} time lines (fold {k} train)")
        else:  # SO: recover the train timestamps from the other folds' test files (module docstring)
            times = recover_times(events, [(read_lines(folder / f"event-{j}-test.txt"),
                                            read_lines(folder / f"time-{j}-test.txt")) for j in donors])
            kept = [sum(t is not None for t in part) for part in (times[:n_train], times[n_train:])]
            note = (f"; subset: time-{k}-train.txt missing, train/val = the {kept[0]:,}/{kept[1]:,} of "
                    f"{n_train:,}/{len(events) - n_train:,} RMTPP-train sequences whose timestamps are recoverable "
                    f"from the test files of folds {','.join(map(str, donors))}; test complete{note}")
        keep = [i for i, t in enumerate(times) if t is not None]
        train = dict(zip(keep, parse_rmtpp([events[i] for i in keep], [times[i] for i in keep], divisor,
                                           f"{folder}/event-{k}-train.txt"), strict=True))
        splits = {"train": [train[i] for i in keep if i < n_train], "val": [train[i] for i in keep if i >= n_train],
                  "test": test}
        ids = np.concatenate([np.array(line.split(), dtype=np.int64) for line in events] + [s.types + 1 for s in test])
        if ids.min() < 1 or ids.max() > self.num_types:
            raise ValueError(f"{folder}: type ids outside 1..{self.num_types}")
        return splits, (f"RMTPP {folder_name} fold {k} (Du et al. 2016) from {folder}: NHP rule type-1, "
                        f"times/{divisor:g}, train/val = first ceil({self.train_fraction:g} n) / rest of the n "
                        f"RMTPP-train, test = RMTPP test {k}{note}; unit: {unit}")

    def _load_nhp(self) -> tuple[dict[str, list[EventSeq]], str]:
        folder = locate_nhp(self.name, self.fold, self.data_dir)
        has_dev = (folder / "dev.pkl").exists()
        self.files = [folder / "train.pkl", folder / "test.pkl"] + ([folder / "dev.pkl"] if has_dev else [])
        self._source_fingerprint = fingerprint_files(self.files)  # verified before any of them is unpickled
        alias = folder.parent if folder.name.startswith(("fold", "folder")) else folder
        where = fallthrough_note(f"{ROOT}/nhp_format/{alias.name}", folder, self.data_dir)
        train_file = load_nhp_pickle(folder / "train.pkl")
        records = {"train": train_file["train"], "test": load_nhp_pickle(folder / "test.pkl")["test"]}
        if has_dev:
            records["val"] = load_nhp_pickle(folder / "dev.pkl")["dev"]
            note = ""
        else:  # PhysioPro's layout has train / test only: hold out the tail of train as NHP does
            n = nhp_train_count(len(records["train"]), self.train_fraction)
            records["train"], records["val"] = records["train"][:n], records["train"][n:]
            note = f"; no dev.pkl: val = last {len(records['val'])} of train.pkl"
        self.num_types = int(train_file["dim_process"])
        splits = {s: nhp_sequences(records[s], f"{folder}/{s}") for s in SPLITS}
        if max(int(q.types.max(initial=0)) for v in splits.values() for q in v) >= self.num_types:
            raise ValueError(f"{folder}: a type_event >= dim_process={self.num_types}")
        what = ("NHP-format StackOverflow subset (re-pickled by the NeuralHawkesPytorch author; of 6,633 sequences)"
                if self.name in NHP_SUBSETS else f"{self.name} (user-supplied pickles)")
        return splits, f"{what}, fold {self.fold}, from {folder}{note}; unit: the pickles' time_since_start{where}"

    # --------------------------------------------------------------------------------------------------- setup

    def _rows(self, seqs: list[EventSeq]) -> list[EventSeq]:
        rows = [r for s in seqs for r in crop(s, self.max_len, self.crop, from_zero=self.spec is not None)]
        return [r for r in rows if len(r.types) >= self.min_len]

    def _subset(self, split: str, rows: list[EventSeq]) -> list[EventSeq]:
        """At most ``max_rows[split]`` rows, drawn without replacement by the data seed (the same rows for every
        model seed), kept in their original order; all rows when the cap is null or not reached."""
        cap = self.max_rows[split]
        if cap is None or len(rows) <= cap:
            return rows
        rng = np.random.default_rng([self.seed, 101 + SPLITS.index(split)])
        return [rows[i] for i in np.sort(rng.choice(len(rows), size=cap, replace=False))]

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        seqs, source = self._load()
        rows = {s: self._rows(seqs[s]) for s in SPLITS}
        for s in SPLITS:
            if not rows[s]:
                raise ValueError(f"{self.name}: the {s} split has no sequence of >= {self.min_len} events")
        if self.requested_scale == "auto":  # mean inter-event gap of the training rows -> 1
            gaps = np.concatenate([np.diff(r.times) for r in rows["train"]])
            self.time_scale = float(gaps.mean())
            if not self.time_scale > 0:
                raise ValueError(f"{self.name}: mean training gap is {self.time_scale}; cannot rescale time by it")
        else:
            self.time_scale = float(self.requested_scale)
        n_before = {s: len(rows[s]) for s in SPLITS}
        rows = {s: self._subset(s, rows[s]) for s in SPLITS}  # after the auto scale: the unit ignores the cap
        arrays = {s: EventArrays.pack(rows[s], self.time_scale) for s in SPLITS}
        self.n_features = self.num_types
        self.seq_len = int(max(a.lengths.max() for a in arrays.values()))
        cap = "no cap" if self.max_len is None else f"{self.crop} to max_len={self.max_len}"
        auto = " (auto: mean train gap = 1)" if self.requested_scale == "auto" else ""
        counts = "/".join(f"{len(seqs[s]):,}" for s in SPLITS)
        n_rows = "/".join(f"{len(arrays[s]):,}" for s in SPLITS)
        capped = [f"{s} {len(arrays[s]):,} of {n_before[s]:,}" for s in SPLITS if len(arrays[s]) < n_before[s]]
        if capped:
            n_rows += f" (seeded row subset: {', '.join(capped)})"
        self.source = (f"{source}; {self.num_types} types; train/val/test {counts} sequences -> {n_rows} rows "
                       f"({cap}, min_len={self.min_len}); times from each row's start / time_scale="
                       f"{self.time_scale:.6g}{auto}")
        self.fingerprint = self._fingerprint(arrays)
        self.splits = {s: EventDataset(arrays[s], self.num_types) for s in SPLITS}

    def _fingerprint(self, arrays: dict[str, EventArrays]) -> str:
        """Source files' fingerprint for recorded sets; sha256 of the description and the arrays for Hawkes."""
        if self.files:
            return self._source_fingerprint  # taken (and verified) before the files were parsed
        digest = hashlib.sha256(self.source.encode())
        for s in SPLITS:
            for a in (arrays[s].types, arrays[s].times, arrays[s].mask):
                digest.update(np.ascontiguousarray(a).tobytes())
        return digest.hexdigest()[:FINGERPRINT_HEX]

    def hawkes_params(self) -> dict[str, np.ndarray]:
        """The Hawkes set's true parameters in the *batch* time unit (t / time_scale): baseline (K,) and alpha (K, K)
        times s, beta (K, K) times s, stationary_rate (K,) times s; s = ``time_scale`` (alpha/beta is unchanged)."""
        if self.spec is None or self.time_scale is None:
            raise ValueError("hawkes_params needs name='hawkes' and setup()")
        s, p = self.time_scale, self.spec.arrays()
        return {"baseline": p["baseline"] * s, "alpha": p["alpha"] * s, "beta": p["beta"] * s,
                "stationary_rate": self.spec.stationary_rate() * s}

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(self.splits[split], batch_size=self.batch_size, shuffle=shuffle,
                          num_workers=self.num_workers, collate_fn=_identity)
