"""Heart-rate regression on BIDMC32HR (osciformer Sec. 7, Table 3), and any Monash / UEA time-series extrinsic
regression (TSER, Tan et al. 2020) set by name.

BIDMC32HR: 7,949 recordings of 2 channels (PPG, ECG) x 4,000 steps (32 s at 125 Hz), each with one target, the
heart rate in beats per minute. Read from ``<name>_TRAIN.ts`` / ``<name>_TEST.ts`` (``@targetlabel true``: the float
target ends every row) with aeon's reader (:func:`oscrepro.data.uea.read_uea_file`, imported lazily). Lookup, first
hit wins: for each search root of :mod:`oscrepro.data.paths` and each folder of ``folders`` (``monash``),
``<root>/<folder>/<name>/`` then ``<root>/<folder>/``; then, with ``download=True``, aeon's ``load_regression``
(Zenodo). A relative ``data_dir`` that does not exist from the working directory is taken from the repository root,
so a budget can name the committed fixture ``tests/fixtures`` wherever the command runs; an explicit ``data_dir`` is
the only root searched (:mod:`oscrepro.data.paths`). Otherwise :func:`~oscrepro.data.paths.missing_dataset_error`
names the files, every place looked and how to supply them. A fall-through between the default roots is logged and
appended to ``source``; both files are verified before aeon parses them (as in :mod:`oscrepro.data.uea`).

Protocols (``protocol``):
* ``merged`` (the paper's, by its sources): TRAIN and TEST pooled, shuffled by the seed and cut 70 / 15 / 15 into
  train / val / test. The paper is silent; Table 3's other rows come from RFormer (Moreno-Pino et al. 2025), whose
  HR numbers follow Neural RDE (Morrill et al. 2021, App. "Data splits": "0.70/0.15/0.15"; its code pools the TSR
  files, ``original_idxs = None``), as ODE-RNN / Neural CDE rows do;
* ``official``: the archive's TEST is the test set; a seeded ``val_fraction`` hold-out of TRAIN is the validation
  set for model selection (which epoch or hyperparameters to keep), the rest trains. Test data never selects.

Batches follow :mod:`oscrepro.data.irregular` with one target per series: x (B, T, C), y (B, 1, 1) heart rate in
bpm, ``target_times`` (B, 1) the series' end time, ``target_mask`` (B, 1); times are step indices divided by
(length - 1) when ``normalise_time`` (in [0, 1], as Neural RDE's ``linspace(0, 1, L)``). Every channel is
standardised with the training split's observed values (Neural RDE's scaling). Targets stay in bpm in the batches,
so the regression task's ``test/rmse`` is in bpm as Table 3 reports; the training targets' mean / std
(``target_mean`` / ``target_std``) are handed to the model (``set_data_statistics``), which predicts a standardised
value and maps it back, so the output starts at the training mean (a head at 0 would start 80 bpm off).

Where the sources are silent we chose: no dropped observations by default (``drop_rate`` 0: Neural RDE / RFormer
use the regular series; Sec. 7's drop ratios are stated for UEA); ``val_fraction`` 0.15 (the merged share); the
hold-out is a plain seeded permutation (no strata for a real-valued target); the fingerprint hashes the two files
(protocol and drop are in ``source``); a file whose header comment says "synthetic" is labelled a stand-in.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from oscrepro.data.fingerprint import fingerprint_files
from oscrepro.data.irregular import IrregularArrays, IrregularDataModule
from oscrepro.data.paths import REPO_ROOT, candidate_dirs, download_root, missing_dataset_error
from oscrepro.data.uea import AEON_PIN, located_note, pack_series, read_uea_file

PROTOCOLS = ("merged", "official")
ARCHIVE_URL = "http://tseregression.org (Monash TSER archive; files on https://zenodo.org/communities/tsml)"
ZENODO_RECORDS = {"BIDMC32HR": 4001456, "BIDMC32RR": 4001463, "BIDMC32SpO2": 4001464}  # Monash release, Tan et al.


def _pair(folder: Path, name: str) -> tuple[Path, Path] | None:
    train, test = folder / f"{name}_TRAIN.ts", folder / f"{name}_TEST.ts"
    return (train, test) if train.exists() and test.exists() else None  # a directory there: named by verify_files


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> str | None:
    """``data_dir``, or ``<repo root>/data_dir`` when it is relative, missing from here, and present there."""
    if data_dir in (None, ""):
        return None
    path = Path(os.fspath(data_dir)).expanduser()
    if not path.is_absolute() and not path.exists() and (REPO_ROOT / path).exists():
        return str(REPO_ROOT / path)
    return str(path)


def locate_tser(name: str, data_dir: str | None = None, folders: tuple[str, ...] = ("monash",),
                download: bool = False) -> tuple[Path, Path]:
    """The (TRAIN, TEST) ``.ts`` files of TSER set ``name`` (module docstring for the order); raises
    :class:`~oscrepro.data.paths.DatasetNotFoundError` naming the files, every place looked and how to supply them."""
    data_dir = resolve_data_dir(data_dir)
    looked: list[Path] = []
    for folder in folders:
        for base in candidate_dirs(folder, data_dir):
            for place in (base / name, base):
                looked.append(place)
                if (found := _pair(place, name)) is not None:
                    return found
    dest = download_root(data_dir) / folders[0]
    record = f"https://zenodo.org/records/{ZENODO_RECORDS[name]}" if name in ZENODO_RECORDS else ARCHIVE_URL
    if download:
        try:
            import aeon.datasets

            aeon.datasets.load_regression(name, extract_path=str(dest))  # downloads + extracts dest/name/
        except Exception as e:  # offline, unknown name, bad archive: report it with the lookup
            looked.append(dest / name)
            raise missing_dataset_error(f"{folders[0]}/{name}", looked, f"  - download of {name} failed ({e})") from e
        if (found := _pair(dest / name, name)) is not None:
            return found
    how = (f"  - missing files: {name}_TRAIN.ts and {name}_TEST.ts (Monash / UEA extrinsic-regression .ts format);\n"
           f"  - download {name}.zip from {record} (archive: {ARCHIVE_URL}) and extract it so that "
           f"<D>/{folders[0]}/{name}/{name}_TRAIN.ts and _TEST.ts exist; or set data.download=true when online "
           f"(aeon load_regression, needs {AEON_PIN}).")
    raise missing_dataset_error(f"{folders[0]}/{name}", looked, how)


def is_synthetic(path: Path) -> bool:
    """True when a comment line of the ``.ts`` header (before ``@data``) says "synthetic" (a test fixture)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip().lower().startswith("@data"):
                return False
            if line.startswith("#") and "synthetic" in line.lower():
                return True
    return False


def read_tser(path: Path) -> tuple[list[np.ndarray], np.ndarray]:
    """One TSER ``.ts`` file -> per-series float64 arrays (T_i, C) and the float64 targets (N,)."""
    series, targets = read_uea_file(path)  # aeon casts @targetlabel targets to float; the str round trip is exact
    return series, targets.astype(np.float64)


class HeartRateDataModule(IrregularDataModule):
    """BIDMC32HR (or another TSER set) as sequence-level regression with both split protocols (module docstring)."""

    def __init__(self, name: str = "BIDMC32HR", protocol: str = "merged", drop_rate: float = 0.0,
                 data_dir: str | None = None, folders: tuple[str, ...] = ("monash",), val_fraction: float = 0.15,
                 fractions: tuple[float, float, float] = (0.7, 0.15, 0.15), normalise_time: bool = True,
                 download: bool = False, batch_size: int = 32, seed: int = 0, num_workers: int = 0) -> None:
        super().__init__(batch_size=batch_size, seed=seed, drop_rate=drop_rate, num_workers=num_workers)
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol={protocol!r}; valid: {', '.join(PROTOCOLS)}")
        if abs(sum(fractions) - 1.0) > 1e-6:
            raise ValueError(f"fractions {fractions} must sum to 1")
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction={val_fraction} must be in (0, 1)")
        self.name, self.protocol, self.data_dir, self.folders = name, protocol, data_dir, tuple(folders)
        self.val_fraction, self.fractions = val_fraction, tuple(fractions)
        self.normalise_time, self.download = normalise_time, download
        self.files: tuple[Path, Path] | None = None
        self._fingerprint = ""  # of self.files, set (after verification) before they are parsed
        self.channel_mean: np.ndarray | None = None  # (C,) training statistics, set in setup
        self.channel_std: np.ndarray | None = None
        self.target_mean: np.ndarray | None = None  # (1,) training targets' mean / std (bpm), for the model
        self.target_std: np.ndarray | None = None

    def split_index(self, n_train_file: int, n_total: int) -> dict[str, np.ndarray]:
        """Row indices of train / val / test into TRAIN + TEST pooled (in that order), drawn from the data seed."""
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0]))
        if self.protocol == "official":
            perm = rng.permutation(n_train_file)
            n_val = max(1, round(self.val_fraction * n_train_file))
            return {"train": np.sort(perm[n_val:]), "val": np.sort(perm[:n_val]),
                    "test": np.arange(n_train_file, n_total)}
        perm = rng.permutation(n_total)
        n_train, n_val = round(self.fractions[0] * n_total), round(self.fractions[1] * n_total)
        return {"train": perm[:n_train], "val": perm[n_train : n_train + n_val], "test": perm[n_train + n_val :]}

    def build_splits(self) -> dict[str, IrregularArrays]:
        self.files = locate_tser(self.name, self.data_dir, self.folders, self.download)
        self._fingerprint = fingerprint_files(list(self.files))  # verified before aeon parses them
        data_dir = resolve_data_dir(self.data_dir)
        looked = [place for folder in self.folders for base in candidate_dirs(folder, data_dir)
                  for place in (base / self.name, base)]
        note = located_note(self.name, self.files[0].parent, looked, data_dir)
        (train_s, train_y), (test_s, test_y) = (read_tser(f) for f in self.files)
        series, y = train_s + test_s, np.concatenate([train_y, test_y])  # (N,)
        if not np.isfinite(y).all():
            raise ValueError(f"{self.files[0].parent}: {int((~np.isfinite(y)).sum())} targets are not finite")
        longest = max(len(s) for s in series)
        x, t, mask = pack_series(series, 1.0 / max(longest - 1, 1) if self.normalise_time else 1.0)
        end = t[np.arange(len(t)), mask.sum(axis=1) - 1][:, None]  # (N, 1) each series' last real time
        pooled = IrregularArrays(x, t, mask, y[:, None, None], target_times=end)  # y (N, 1, 1)
        index = self.split_index(len(train_s), len(series))
        counts = "/".join(f"{len(idx):,}" for idx in index.values())
        if self.protocol == "official":
            split = f"archive TRAIN/TEST, val = seeded {self.val_fraction:.0%} of TRAIN"
        else:
            split = "TRAIN+TEST pooled, shuffled {:.0%}/{:.0%}/{:.0%} (Neural RDE / RFormer)".format(*self.fractions)
        label = f"SYNTHETIC stand-in for {self.name}" if is_synthetic(self.files[0]) else self.name
        self.source = (f"Monash TSER {label} ({len(series):,} series, {x.shape[-1]} channels, T<={longest}, target "
                       f"mean {y.mean():.1f} sd {y.std():.1f}) from {self.files[0].parent}; {split} "
                       f"(seed={self.seed}), train/val/test {counts}{note}")
        return {name: pooled.subset(idx) for name, idx in index.items()}

    def transform(self, splits: dict[str, IrregularArrays]) -> dict[str, IrregularArrays]:
        """Standardise every channel with the training split's observed values (after any drop); record the training
        targets' mean / std (targets themselves stay in their unit)."""
        train = splits["train"]
        observed = train.x[train.mask]  # (n_obs, C)
        self.channel_mean, self.channel_std = observed.mean(axis=0), np.maximum(observed.std(axis=0), 1e-6)
        targets = train.y.reshape(len(train), -1)  # (N_train, 1)
        self.target_mean, self.target_std = targets.mean(axis=0), np.maximum(targets.std(axis=0), 1e-6)
        out = {}
        for name, a in splits.items():
            x = (a.x - self.channel_mean) / self.channel_std * a.mask[..., None]  # padding stays 0
            out[name] = IrregularArrays(x, a.t, a.mask, a.y, a.target_times, a.target_mask)
        return out

    def data_fingerprint(self, splits: dict[str, IrregularArrays]) -> str:
        """The source files' fingerprint, taken (and verified) in :meth:`build_splits` before parsing."""
        assert self.files is not None
        return self._fingerprint
