"""UEA multivariate classification with randomly dropped observations (osciformer Sec. 7, Table 2; Bagnall et al.
2018; the irregular setting of Kidger et al. 2020 / Rough Transformers, Moreno-Pino et al. 2025).

A set is named as in the archive (``SelfRegulationSCP1``; the paper's short names SCP1, SCP2, MI, EW, ETC, HB are
accepted) and read from ``<name>_TRAIN.ts`` / ``<name>_TEST.ts`` (or ``.arff``) with aeon's readers, imported lazily
so that the rest of the package works without aeon. Lookup, first hit wins: for each search root of
:mod:`oscrepro.data.paths` and each folder of ``folders`` (``uea``, then the flat ``uea_small`` stand-in copy),
``<root>/<folder>/<name>/`` then ``<root>/<folder>/``; then the sets bundled with aeon (BasicMotions,
JapaneseVowels); then, with ``download=True``, aeon's ``load_classification`` (timeseriesclassification.com).
An explicit ``data_dir`` is the only root searched, and aeon's bundled sets are not read in its place either (it
is authoritative: :mod:`oscrepro.data.paths`). Otherwise :func:`~oscrepro.data.paths.missing_dataset_error` says
what is missing, where it looked and how to supply it. A fall-through between the default roots (a folder holding
part of the set passed over, or ``$OSCREPRO_DATA_DIR`` without it) is logged and appended to ``source``. Both
files are verified (:func:`~oscrepro.data.fingerprint.verify_files`) before aeon parses them, so a corrupted copy
of a published set is refused as such, not reported as a parse error.

Protocols:
* ``official``: the archive's TRAIN / TEST; validation = a class-stratified ``val_fraction`` of TRAIN (seeded);
* ``merged``: TRAIN and TEST pooled, shuffled by the seed and cut 70 / 15 / 15 (Log-NCDE, Walker et al. 2024,
  and RFormer's protocol; Table 2's baselines come from RFormer).

With ``time_stride = k > 1`` only every k-th step is kept first (times stay the original step indices): ours, for
budgets where a long set (ArticularyWordRecognition, T = 144) must fit ContiFormer's B T^2 d S memory on a small
machine; the source line says so. Then each split drops ``floor(drop_rate * n)`` of every sample's n time steps
(all channels of a step together; 30 / 50 / 70 % in the paper) and every channel is standardised with the mean /
std of the training split's remaining observations. Times are the original step indices, divided by (longest
length - 1) when ``normalise_time`` (so they lie in [0, 1]). Batches: x (B, T, C), y (B,), meta times / mask.

Where the sources are silent we chose: ``val_fraction = 0.15`` (the merged protocol's validation share); labels
are indexed in sorted order (numerically when all labels are integers); steps with a missing (NaN) value in any
channel are treated as unobserved before the drop; the merged cut rounds the train / val counts and gives the
rest to test; the fingerprint hashes the two source files (the protocol and drop are in ``source``).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np

from oscrepro.data.fingerprint import fingerprint_files
from oscrepro.data.irregular import IrregularArrays, IrregularDataModule, compact
from oscrepro.data.paths import candidate_dirs, download_root, explicit_root, fallthrough_note, missing_dataset_error

PAPER_SETS = {"SCP1": "SelfRegulationSCP1", "SCP2": "SelfRegulationSCP2", "MI": "MotorImagery",
              "EW": "EigenWorms", "ETC": "EthanolConcentration", "HB": "Heartbeat"}  # osciformer Table 2
PROTOCOLS = ("official", "merged")
FORMATS = (".ts", ".arff")
ARCHIVE_URL = "https://timeseriesclassification.com/aeon-toolkit/{name}.zip"
AEON_PIN = "aeon==1.6.0"


def _aeon_datasets() -> ModuleType:
    """``aeon.datasets``, imported on first use (aeon is optional for the rest of the package)."""
    try:
        import aeon.datasets
    except ImportError as e:
        raise ImportError(f"reading UEA files needs aeon: pip install {AEON_PIN} (oscrepro.data.uea)") from e
    return aeon.datasets


def _aeon_bundled_dir() -> Path | None:
    """aeon's own data folder (BasicMotions, JapaneseVowels, ...), or None without aeon."""
    try:
        return Path(_aeon_datasets().__file__).parent / "data"
    except ImportError:
        return None


def _pair(folder: Path, name: str) -> tuple[Path, Path] | None:
    for ext in FORMATS:  # both files in one format (aeon's .ts and .arff readers spell labels differently)
        train, test = folder / f"{name}_TRAIN{ext}", folder / f"{name}_TEST{ext}"
        if train.exists() and test.exists():  # a directory in place of a file is named by verify_files
            return train, test
    return None


def partial_places(name: str, places: list[Path]) -> list[Path]:
    """The places (of ``places``) holding part of set ``name``: a folder named ``name``, or one of its two files."""
    return [p for p in places if (p.name == name and p.is_dir())
            or any((p / f"{name}_{s}{ext}").exists() for s in ("TRAIN", "TEST") for ext in FORMATS)]


def located_note(name: str, found: Path, looked: list[Path], data_dir: str | None) -> str:
    """:func:`~oscrepro.data.paths.fallthrough_note` for the set found in ``found`` after ``looked``."""
    before = looked[: looked.index(found)] if found in looked else looked
    return fallthrough_note(name, found, data_dir, partial=partial_places(name, before))


def locate_uea(name: str, data_dir: str | None = None, folders: tuple[str, ...] = ("uea", "uea_small"),
               download: bool = False) -> tuple[Path, Path]:
    """The (TRAIN, TEST) files of UEA set ``name`` (module docstring for the order); raises
    :class:`~oscrepro.data.paths.DatasetNotFoundError` naming every place looked."""
    looked: list[Path] = []
    for folder in folders:
        for base in candidate_dirs(folder, data_dir):
            for place in (base / name, base):
                looked.append(place)
                if (found := _pair(place, name)) is not None:
                    return found
    bundled = _aeon_bundled_dir() if explicit_root(data_dir) is None else None  # an explicit data_dir decides
    if bundled is not None:
        looked.append(bundled / name)
        if (found := _pair(bundled / name, name)) is not None:
            return found
    url = ARCHIVE_URL.format(name=name)
    dest = download_root(data_dir) / folders[0]
    if download:
        try:
            _aeon_datasets().load_classification(name, extract_path=str(dest))  # downloads + extracts dest/name/
        except Exception as e:  # offline, unknown name, bad archive: report it with the lookup
            looked.append(dest / name)
            raise missing_dataset_error(f"{folders[0]}/{name}", looked, f"  - download of {url} failed ({e})") from e
        if (found := _pair(dest / name, name)) is not None:
            return found
    how = (f"  - download {url} (or the whole Multivariate_ts.zip archive from timeseriesclassification.com) and "
           f"extract it so that <D>/{folders[0]}/{name}/{name}_TRAIN.ts and _TEST.ts exist; or set "
           f"data.download=true when online (aeon load_classification, needs {AEON_PIN}).")
    raise missing_dataset_error(f"{folders[0]}/{name}", looked, _partial_lines(name, looked) + how)


def _partial_lines(name: str, looked: list[Path]) -> str:
    """One line per place that holds part of set ``name``: which of its files are there and which are missing."""
    lines = []
    for place in partial_places(name, looked):
        names = [f"{name}_{split}{ext}" for ext in FORMATS for split in ("TRAIN", "TEST")]
        present = [n for n in names if (place / n).exists()]
        missing = [f"{name}_{split}.ts" for split in ("TRAIN", "TEST")
                   if not any((place / f"{name}_{split}{ext}").exists() for ext in FORMATS)]
        lines.append(f"  - {place} holds {', '.join(present) or 'none of its files'} but lacks "
                     f"{', '.join(missing) or 'a TRAIN/TEST pair in one format'}\n")
    return "".join(lines)


def read_uea_file(path: Path) -> tuple[list[np.ndarray], np.ndarray]:
    """One .ts / .arff file -> per-sample float64 arrays (T_i, C) and the string labels (N,), via aeon."""
    datasets = _aeon_datasets()
    reader = datasets.load_from_arff_file if path.suffix == ".arff" else datasets.load_from_ts_file
    x, y = reader(str(path))  # (N, C, T) array, or a list of (C, T_i) for unequal lengths
    return [np.asarray(s, dtype=np.float64).T for s in x], np.asarray(y).astype(str)


def pack_series(series: list[np.ndarray], time_scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ragged (T_i, C) series -> right-padded (x, t, mask); steps with a NaN in any channel are unobserved."""
    width, n_ch = max(len(s) for s in series), series[0].shape[1]
    x = np.zeros((len(series), width, n_ch))
    observed = np.zeros((len(series), width), dtype=bool)
    for i, s in enumerate(series):
        x[i, : len(s)] = s
        observed[i, : len(s)] = np.isfinite(s).all(axis=1)
    t = np.broadcast_to(np.arange(width) * time_scale, observed.shape)  # step index as time
    return compact(np.nan_to_num(x), t, observed, width=width)


def label_order(labels: np.ndarray) -> list[str]:
    """Sorted distinct labels (numerically when all are integers)."""
    distinct = sorted(set(labels.tolist()))
    if all(s.lstrip("-").isdigit() for s in distinct):
        return sorted(distinct, key=int)
    return distinct


def stratified_holdout(y: np.ndarray, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Split indices into (kept, held out) with ``max(1, round(fraction * N))`` held out, spread over the classes
    in proportion to their sizes (each row's key = its random rank within its class / class size)."""
    n_hold = max(1, round(fraction * len(y)))
    key = np.empty(len(y))
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        key[idx] = (rng.permutation(len(idx)) + rng.random(len(idx))) / len(idx)
    order = np.argsort(key, kind="stable")
    return np.sort(order[n_hold:]), np.sort(order[:n_hold])


class UEADataModule(IrregularDataModule):
    """A UEA multivariate set with per-sample observation drop (module docstring)."""

    def __init__(self, name: str, protocol: str = "official", drop_rate: float = 0.0, data_dir: str | None = None,
                 folders: tuple[str, ...] = ("uea", "uea_small"), val_fraction: float = 0.15,
                 fractions: tuple[float, float, float] = (0.7, 0.15, 0.15), normalise_time: bool = True,
                 download: bool = False, batch_size: int = 32, seed: int = 0, num_workers: int = 0,
                 standin: str | None = None, time_stride: int = 1) -> None:
        super().__init__(batch_size=batch_size, seed=seed, drop_rate=drop_rate, num_workers=num_workers)
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol={protocol!r}; valid: {', '.join(PROTOCOLS)}")
        if int(time_stride) != time_stride or time_stride < 1:
            raise ValueError(f"time_stride={time_stride!r}; must be an integer >= 1")
        self.time_stride = int(time_stride)
        if abs(sum(fractions) - 1.0) > 1e-6:
            raise ValueError(f"fractions {fractions} must sum to 1")
        self.name = PAPER_SETS.get(name, name)
        # standin: read this set in place of ``name`` (a budget whose data is missing here, e.g. smoke in CI); the
        # source then says "stand-in for <name>", so no table can pass it off as the named set
        self.requested, self.standin = self.name, standin
        if standin is not None:
            self.name = PAPER_SETS.get(standin, standin)
        self.protocol, self.data_dir, self.folders = protocol, data_dir, tuple(folders)
        self.val_fraction, self.fractions = val_fraction, tuple(fractions)
        self.normalise_time, self.download = normalise_time, download
        self.files: tuple[Path, Path] | None = None
        self._fingerprint = ""  # of self.files, set (after verification) before they are parsed
        self.classes: list[str] = []
        self.channel_mean: np.ndarray | None = None  # (C,) training statistics, set in setup
        self.channel_std: np.ndarray | None = None

    def _split_index(self, y: np.ndarray, n_train_file: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0]))
        if self.protocol == "official":
            train, val = stratified_holdout(y[:n_train_file], self.val_fraction, rng)
            return {"train": train, "val": val, "test": np.arange(n_train_file, len(y))}
        perm = rng.permutation(len(y))
        n_train, n_val = round(self.fractions[0] * len(y)), round(self.fractions[1] * len(y))
        return {"train": perm[:n_train], "val": perm[n_train : n_train + n_val], "test": perm[n_train + n_val :]}

    def build_splits(self) -> dict[str, IrregularArrays]:
        self.files = locate_uea(self.name, self.data_dir, self.folders, self.download)
        self._fingerprint = fingerprint_files(list(self.files))  # verified before aeon parses them
        looked = [place for folder in self.folders for base in candidate_dirs(folder, self.data_dir)
                  for place in (base / self.name, base)]
        note = located_note(self.name, self.files[0].parent, looked, self.data_dir)
        (train_x, train_y), (test_x, test_y) = (read_uea_file(f) for f in self.files)
        series, labels = train_x + test_x, np.concatenate([train_y, test_y])
        self.classes = label_order(labels)
        index_of = {c: i for i, c in enumerate(self.classes)}
        y = np.array([index_of[s] for s in labels], dtype=np.int64)  # (N,)
        self.n_classes = len(self.classes)
        longest = max(len(s) for s in series)
        time_scale = 1.0 / max(longest - 1, 1) if self.normalise_time else 1.0
        if self.time_stride > 1:  # every k-th step, times kept as the original step indices (k t'), before the drop
            series = [s[:: self.time_stride] for s in series]
        x, t, mask = pack_series(series, time_scale * self.time_stride)
        pooled = IrregularArrays(x, t, mask, y)
        index = self._split_index(y, len(train_x))
        splits = {name: pooled.subset(idx) for name, idx in index.items()}
        counts = "/".join(f"{len(idx):,}" for idx in index.values())
        if self.protocol == "official":
            split = f"official TRAIN/TEST, val = stratified {self.val_fraction:.0%} of TRAIN"
        else:
            split = "TRAIN+TEST merged, shuffled {:.0%}/{:.0%}/{:.0%}".format(*self.fractions)
        if self.standin is not None:
            standin = f", stand-in for {self.requested}"
        else:
            standin = "" if self.name in PAPER_SETS.values() else ", stand-in for the paper's UEA sets"
        stride = (f"; 1 step in {self.time_stride} kept (T<={x.shape[1]}) before the drop"
                  if self.time_stride > 1 else "")
        self.source = (f"UEA {self.name}{standin} ({len(series):,} series, {x.shape[-1]} channels, T<={longest}, "
                       f"{self.n_classes} classes) from {self.files[0].parent}{stride}; {split} (seed={self.seed}), "
                       f"train/val/test {counts}{note}")
        return splits

    def transform(self, splits: dict[str, IrregularArrays]) -> dict[str, IrregularArrays]:
        """Standardise every channel with the training split's observed values (after the drop)."""
        train = splits["train"]
        observed = train.x[train.mask]  # (n_obs, C)
        self.channel_mean, self.channel_std = observed.mean(axis=0), np.maximum(observed.std(axis=0), 1e-6)
        out = {}
        for name, a in splits.items():
            x = (a.x - self.channel_mean) / self.channel_std * a.mask[..., None]  # padding stays 0
            out[name] = IrregularArrays(x, a.t, a.mask, a.y)
        return out

    def data_fingerprint(self, splits: dict[str, IrregularArrays]) -> str:
        """The source files' fingerprint, taken (and verified) in :meth:`build_splits` before parsing."""
        assert self.files is not None
        return self._fingerprint
