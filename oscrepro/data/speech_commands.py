"""Google Speech Commands v0.02, 10-keyword spotting (fqo Sec. 4.1.1, Table 1, Table 5; App. B "KWS").

Task: 10 classes (yes no up down left right on off stop go), input 40 log-mel bins x T=49 frames per 1 s clip.
Batches are ``(x, y)`` with ``x`` FloatTensor (B, 49, 40) and ``y`` LongTensor (B,).

Front end (choice): App. B says "log-mel spectrograms with 40 bins, 25 ms windows with 10 ms hop, T=49 frames",
but 25 ms / 10 ms on a 1 s clip gives 98 (center=False) or 101 (center=True) frames, not 49. Sec. 4.1.1 and the
hardware count in Sec. 5 (98 oscillators = 2 heads x T=49) both fix T=49, so T is kept and the window is changed:
``n_fft = win_length = 640`` (40 ms), ``hop_length = 320`` (20 ms), ``center=False`` ->
(16000 - 640) / 320 + 1 = 49 frames. Power spectrogram (|STFT|^2, periodic Hann window), HTK mel filterbank
0 Hz - 8 kHz without area normalisation (torchaudio defaults), then ``log(mel + 1e-6)``. Clips are zero-padded /
cropped at the end to 16,000 samples. Features are standardised per mel bin with the mean/std of the training
split (choice: per-bin rather than one global scalar). All of these are set in ``conf/data/speech_commands.yaml``.

Splits: the official ``validation_list.txt`` / ``testing_list.txt`` when present in the dataset folder (every other
keyword file is train). When they are absent -- as in ``shared/data/speech_commands``, which holds 1,500 wavs of the
official *test-set* archive only (114 speakers; all 114 fall in the TF ``which_set`` "testing" bucket, so the
official hashing rule cannot be reused) -- a deterministic speaker-disjoint split is made: bucket =
sha256("oscrepro-kws-split:" + speaker) mod 100, ``< val_percent`` -> val, ``< val_percent + test_percent`` -> test,
else train (default 10/10/80). ``source`` says which split was used and labels the subset.

``max_per_class`` caps the *training* files per keyword (deterministic draw from ``data_seed``); val/test stay
whole so budgeted runs are evaluated on the same files. Decoded features of all keyword files are cached once as a
.pt under ``cache_dir`` keyed by the dataset fingerprint and the front-end parameters.

Audio is read with ``soundfile``; features use ``torchaudio.transforms.MelSpectrogram``; ``reference_log_mel``
is a plain framing + rfft + hand-built filterbank implementation that the tests compare it against.
"""

from __future__ import annotations

import hashlib
import math
import re
import tarfile
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import soundfile as sf
import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from oscrepro.data.base import DataModuleBase
from oscrepro.data.fingerprint import fingerprint_files, fingerprint_params
from oscrepro.data.paths import (
    cache_dir,
    candidate_dirs,
    download_root,
    fallthrough_note,
    find_dataset,
    missing_dataset_error,
)

KEYWORDS: tuple[str, ...] = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
DATASET_NAME = "speech_commands"
ARCHIVE_URL = "http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz"
# sha256 of the official v0.02 archive (same constant as torchaudio.datasets.speechcommands._CHECKSUMS).
ARCHIVE_SHA256 = "af14739ee7dc311471de98f5f9d2c9191b18aedfe957f4a6ff791c709868ff58"
VAL_LIST, TEST_LIST = "validation_list.txt", "testing_list.txt"
TEST_SET_README = "README_test_set_v0.02.md"  # present in the companion test-set archive
_SPEAKER_RE = re.compile(r"_nohash_.*$")


@dataclass(frozen=True)
class FrontEnd:
    """Log-mel front end parameters (see module docstring for why 40 ms / 20 ms)."""

    sample_rate: int = 16_000
    clip_samples: int = 16_000
    n_fft: int = 640
    win_length: int = 640
    hop_length: int = 320
    n_mels: int = 40
    f_min: float = 0.0
    f_max: float | None = None
    log_eps: float = 1e-6

    @property
    def n_frames(self) -> int:
        """Frames per clip with center=False: 1 + (clip - n_fft) // hop."""
        return 1 + (self.clip_samples - self.n_fft) // self.hop_length


def log_mel(wave: Tensor, fe: FrontEnd) -> Tensor:
    """(N, S) waveforms -> (N, T, n_mels) log-mel features with torchaudio's MelSpectrogram."""
    import torchaudio  # local import: only the KWS task needs it

    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=fe.sample_rate,
        n_fft=fe.n_fft,
        win_length=fe.win_length,
        hop_length=fe.hop_length,
        f_min=fe.f_min,
        f_max=fe.f_max,
        n_mels=fe.n_mels,
        center=False,
        power=2.0,
    )
    spec = mel(wave)  # (N, n_mels, T)
    return torch.log(spec + fe.log_eps).transpose(-1, -2)  # (N, T, n_mels)


def _htk_mel_filterbank(n_freqs: int, fe: FrontEnd) -> Tensor:
    """(n_freqs, n_mels) triangular HTK mel filters, no area normalisation (plain reference construction)."""
    f_max = fe.f_max if fe.f_max is not None else fe.sample_rate / 2
    all_freqs = torch.linspace(0, fe.sample_rate / 2, n_freqs, dtype=torch.float64)
    m_min, m_max = (2595.0 * math.log10(1.0 + f / 700.0) for f in (fe.f_min, f_max))
    m_pts = torch.linspace(m_min, m_max, fe.n_mels + 2, dtype=torch.float64)
    f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)  # (n_mels + 2,)
    fb = torch.zeros(n_freqs, fe.n_mels, dtype=torch.float64)
    for m in range(fe.n_mels):
        lo, mid, hi = f_pts[m], f_pts[m + 1], f_pts[m + 2]
        up = (all_freqs - lo) / (mid - lo)
        down = (hi - all_freqs) / (hi - mid)
        fb[:, m] = torch.clamp(torch.minimum(up, down), min=0.0)
    return fb


def reference_log_mel(wave: Tensor, fe: FrontEnd) -> Tensor:
    """Plain reference for :func:`log_mel`: explicit framing, Hann window, rfft power, mel matmul, log."""
    win = torch.hann_window(fe.win_length, periodic=True, dtype=torch.float64)
    pad = (fe.n_fft - fe.win_length) // 2
    win = torch.nn.functional.pad(win, (pad, fe.n_fft - fe.win_length - pad))  # (n_fft,)
    frames = wave.double().unfold(-1, fe.n_fft, fe.hop_length)  # (N, T, n_fft)
    power = torch.fft.rfft(frames * win, dim=-1).abs() ** 2  # (N, T, n_fft // 2 + 1)
    mel = power @ _htk_mel_filterbank(fe.n_fft // 2 + 1, fe)  # (N, T, n_mels)
    return torch.log(mel + fe.log_eps).float()


def speaker_of(rel_path: str) -> str:
    """``"yes/0a7c2a8d_nohash_1.wav"`` -> ``"0a7c2a8d"`` (the speaker hash of the official naming)."""
    return _SPEAKER_RE.sub("", Path(rel_path).name)


def speaker_bucket(speaker: str, val_percent: float, test_percent: float) -> str:
    """Deterministic speaker -> "train" / "val" / "test" bucket (module docstring), independent of the file set."""
    b = int(hashlib.sha256(f"oscrepro-kws-split:{speaker}".encode()).hexdigest(), 16) % 100
    if b < val_percent:
        return "val"
    if b < val_percent + test_percent:
        return "test"
    return "train"


def list_keyword_files(root: Path, keywords: tuple[str, ...]) -> list[tuple[str, int]]:
    """Sorted ``(relative path, label)`` for every ``<word>/*.wav`` of the keywords (label = keyword index)."""
    out: list[tuple[str, int]] = []
    for label, word in enumerate(keywords):
        out += [(p.relative_to(root).as_posix(), label) for p in sorted((root / word).glob("*.wav"))]
    return out


def assign_splits(root: Path, rel_files: list[str], val_percent: float, test_percent: float) -> tuple[list[str], bool]:
    """Split name per file and whether the official lists were used."""
    if (root / VAL_LIST).exists() and (root / TEST_LIST).exists():
        val = set((root / VAL_LIST).read_text().split())
        test = set((root / TEST_LIST).read_text().split())
        return ["val" if f in val else "test" if f in test else "train" for f in rel_files], True
    return [speaker_bucket(speaker_of(f), val_percent, test_percent) for f in rel_files], False


def load_clip(path: Path, fe: FrontEnd) -> Tensor:
    """Decode one wav with soundfile -> (clip_samples,) float32 mono, zero-padded / cropped at the end."""
    data, sr = sf.read(str(path), dtype="float32", always_2d=True)  # (S, C)
    if sr != fe.sample_rate:
        raise ValueError(f"{path}: sample rate {sr} != {fe.sample_rate} (no resampling is done)")
    wave = torch.from_numpy(data).mean(dim=1)  # (S,)
    if wave.numel() >= fe.clip_samples:
        return wave[: fe.clip_samples]
    return torch.nn.functional.pad(wave, (0, fe.clip_samples - wave.numel()))


def compute_features(root: Path, rel_files: list[str], fe: FrontEnd, chunk: int = 256) -> Tensor:
    """(N, T, n_mels) log-mel features of the files, decoded and transformed in chunks."""
    feats = []
    for i in range(0, len(rel_files), chunk):
        wave = torch.stack([load_clip(root / f, fe) for f in rel_files[i : i + chunk]])  # (n, S)
        feats.append(log_mel(wave, fe))
    return torch.cat(feats) if feats else torch.zeros(0, fe.n_frames, fe.n_mels)


def download_speech_commands(
    dest: Path, url: str = ARCHIVE_URL, sha256: str | None = ARCHIVE_SHA256, timeout: float = 30.0
) -> Path:
    """Download + verify + extract the archive into ``dest`` (the ``<word>/`` folders land directly in it).

    Raises :class:`DatasetNotFoundError` when offline or when the checksum does not match.
    """
    dest.mkdir(parents=True, exist_ok=True)
    part = dest.parent / (Path(url).name + ".part")
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, open(part, "wb") as f:
            while chunk := resp.read(1 << 20):
                h.update(chunk)
                f.write(chunk)
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        part.unlink(missing_ok=True)
        raise missing_dataset_error(
            DATASET_NAME, [dest], f"  - download of {url} failed ({e}); fetch it by hand and extract into {dest}"
        ) from e
    if sha256 is not None and h.hexdigest() != sha256:
        part.unlink(missing_ok=True)
        raise missing_dataset_error(
            DATASET_NAME, [dest], f"  - {url}: sha256 {h.hexdigest()} != expected {sha256} (corrupt or wrong file)"
        )
    with tarfile.open(part, "r:gz") as tar:
        tar.extractall(dest, filter="data")
    part.unlink()
    return dest


class SpeechCommandsDataModule(DataModuleBase):
    """10-keyword Speech Commands v0.02 with a 40 x 49 log-mel front end (fqo App. B, KWS)."""

    def __init__(
        self,
        data_dir: str | None = None,
        batch_size: int = 64,
        keywords: list[str] | None = None,
        sample_rate: int = 16_000,
        clip_samples: int = 16_000,
        n_fft: int = 640,
        win_length: int = 640,
        hop_length: int = 320,
        n_mels: int = 40,
        f_min: float = 0.0,
        f_max: float | None = None,
        log_eps: float = 1e-6,
        val_percent: float = 10.0,
        test_percent: float = 10.0,
        max_per_class: int | None = None,
        data_seed: int = 0,
        download: bool = False,
        cache_dir: str | None = None,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.data_dir, self.batch_size, self.num_workers = data_dir, batch_size, num_workers
        self.keywords = tuple(keywords) if keywords is not None else KEYWORDS
        self.fe = FrontEnd(sample_rate, clip_samples, n_fft, win_length, hop_length, n_mels, f_min, f_max, log_eps)
        self.val_percent, self.test_percent = val_percent, test_percent
        self.max_per_class, self.data_seed = max_per_class, data_seed
        self.download, self.cache_override = download, cache_dir
        self.n_features, self.n_classes = n_mels, len(self.keywords)
        self.seq_len = self.fe.n_frames  # T = 49 frames: 1 s at hop 320, n_fft 640
        self.splits: dict[str, TensorDataset] = {}
        self.split_files: dict[str, list[str]] = {}
        self.feature_mean: Tensor | None = None  # (F,) train statistics, set in setup
        self.feature_std: Tensor | None = None  # (F,)

    def _locate(self) -> Path:
        root = find_dataset(DATASET_NAME, self.data_dir, marker=self.keywords[0])
        if root is not None:
            return root
        how = (
            f"  - download: {ARCHIVE_URL} (sha256 {ARCHIVE_SHA256}), extract so that <D>/{DATASET_NAME}/"
            f"yes/*.wav exists; or set data.download=true to do this automatically when online."
        )
        if not self.download:
            raise missing_dataset_error(DATASET_NAME, candidate_dirs(DATASET_NAME, self.data_dir), how)
        return download_speech_commands(download_root(self.data_dir) / DATASET_NAME, ARCHIVE_URL, ARCHIVE_SHA256)

    def _features(self, root: Path, rel_files: list[str]) -> Tensor:
        """All keyword files' features, from the cache when the fingerprint and front end match."""
        key = fingerprint_params(fingerprint=self.fingerprint, files=len(rel_files), **asdict(self.fe))
        path = cache_dir(DATASET_NAME, self.cache_override) / f"logmel_{self.fingerprint}_{key}.pt"
        if path.exists():
            blob = torch.load(path, weights_only=True)
            if blob["files"] == rel_files:
                return blob["feats"]
        feats = compute_features(root, rel_files, self.fe)  # (N, T, F)
        tmp = path.with_suffix(".tmp")
        torch.save({"files": rel_files, "feats": feats}, tmp)
        tmp.replace(path)
        return feats

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        root = self._locate()
        files = list_keyword_files(root, self.keywords)
        if not files:
            raise missing_dataset_error(DATASET_NAME, [root], "  - the folder has no <keyword>/*.wav files")
        rel = [f for f, _ in files]
        labels = torch.tensor([lab for _, lab in files])  # (N,)
        extra = [root / n for n in (VAL_LIST, TEST_LIST) if (root / n).exists()]
        self.fingerprint = fingerprint_files(
            [root / f for f in rel] + extra, root=root, cache_override=self.cache_override
        )
        feats = self._features(root, rel)  # (N, T, F)
        split_of, official = assign_splits(root, rel, self.val_percent, self.test_percent)
        idx = {s: [i for i, sp in enumerate(split_of) if sp == s] for s in ("train", "val", "test")}
        if self.max_per_class is not None:
            g = torch.Generator().manual_seed(self.data_seed)
            keep = []
            label_list = labels.tolist()
            for c in range(len(self.keywords)):
                cls = [i for i in idx["train"] if label_list[i] == c]
                keep += [cls[j] for j in torch.randperm(len(cls), generator=g)[: self.max_per_class].tolist()]
            idx["train"] = sorted(keep)
        if not idx["train"]:
            raise ValueError(f"speech_commands at {root}: empty training split")
        train = feats[idx["train"]]  # (N_train, T, F)
        self.feature_mean = train.mean(dim=(0, 1))  # (F,)
        self.feature_std = train.std(dim=(0, 1)).clamp_min(1e-5)  # (F,)
        for s, ii in idx.items():
            x = (feats[ii] - self.feature_mean) / self.feature_std  # (N_s, T, F)
            self.splits[s] = TensorDataset(x.contiguous(), labels[ii])
            self.split_files[s] = [rel[i] for i in ii]
        self.source = self._describe(root, len(rel), official) + fallthrough_note(DATASET_NAME, root, self.data_dir)

    def _describe(self, root: Path, n_files: int, official: bool) -> str:
        n_spk = len({speaker_of(f) for f in sum(self.split_files.values(), [])})
        counts = "/".join(f"{len(self.splits[s]):,}" for s in ("train", "val", "test"))
        what = "speech_commands v0.02 test-set subset" if (root / TEST_SET_README).exists() else "speech_commands v0.02"
        split = (
            "official split (validation_list.txt/testing_list.txt)"
            if official
            else f"speaker-disjoint split {100 - self.val_percent - self.test_percent:g}/{self.val_percent:g}/"
            f"{self.test_percent:g} by speaker hash (no official lists)"
        )
        budget = f", train capped at max_per_class={self.max_per_class}" if self.max_per_class is not None else ""
        return (
            f"{what} ({n_files:,} wavs, {n_spk} speakers, {len(self.keywords)} keywords), {split}, "
            f"train/val/test {counts}{budget}; log-mel {self.fe.n_mels}x{self.fe.n_frames} "
            f"(win {self.fe.win_length}/hop {self.fe.hop_length}); from {root}"
        )

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(self.splits[split], batch_size=self.batch_size, shuffle=shuffle, num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False)
