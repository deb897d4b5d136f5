"""Speech Commands KWS data: 40 x 49 log-mel front end, splits, budgets, caching, download (fqo App. B)."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from oscrepro.data import paths
from oscrepro.data import speech_commands as sc
from oscrepro.data.paths import DatasetNotFoundError
from tests.helpers.shared_data import require_shared


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the developer's caches or finds data outside what it passes explicitly."""
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)


def _write_fixture(root: Path, n_speakers: int = 30, samples: int = 4000, lists: bool = False) -> list[str]:
    """Tiny Speech-Commands-shaped folder: one short noisy tone per (keyword, speaker)."""
    rng = np.random.default_rng(0)
    rel = []
    for k, word in enumerate(sc.KEYWORDS):
        (root / word).mkdir(parents=True, exist_ok=True)
        for s in range(n_speakers):
            t = np.arange(samples) / 16000
            wave = 0.3 * np.sin(2 * np.pi * (200 + 150 * k) * t) + 0.01 * rng.standard_normal(samples)
            name = f"{word}/{s:08x}_nohash_0.wav"
            sf.write(root / name, wave.astype(np.float32), 16000, subtype="PCM_16")
            rel.append(name)
    if lists:
        (root / sc.VAL_LIST).write_text("\n".join(r for r in rel if r.split("/")[1].startswith("00000000")) + "\n")
        (root / sc.TEST_LIST).write_text("\n".join(r for r in rel if r.split("/")[1].startswith("00000001")) + "\n")
    return rel


def _module(data_dir: Path, tmp_path: Path, **kw: object) -> sc.SpeechCommandsDataModule:
    dm = sc.SpeechCommandsDataModule(data_dir=str(data_dir), cache_dir=str(tmp_path / "cache"), batch_size=16, **kw)
    dm.setup("fit")
    return dm


def test_front_end_shape_and_reference() -> None:
    fe = sc.FrontEnd()
    assert fe.n_frames == 49
    wave = torch.randn(3, 16000)
    feats = sc.log_mel(wave, fe)
    assert feats.shape == (3, 49, 40)
    ref = sc.reference_log_mel(wave, fe)
    torch.testing.assert_close(feats, ref, atol=1e-3, rtol=1e-4)
    # App. B's literal 25 ms / 10 ms would not give 49 frames: the choice is what makes T=49
    assert sc.FrontEnd(n_fft=400, win_length=400, hop_length=160).n_frames == 98


def test_front_end_puts_a_tone_in_the_right_mel_bin() -> None:
    fe = sc.FrontEnd()
    t = torch.arange(16000) / 16000
    peaks = []
    for f in (300.0, 1000.0, 4000.0):
        feats = sc.log_mel(torch.sin(2 * torch.pi * f * t)[None], fe)[0]  # (49, 40)
        peaks.append(int(feats.mean(0).argmax()))
        mel_centres = 700 * (10 ** (torch.linspace(0, 2595 * np.log10(1 + 8000 / 700), 42)[1:-1] / 2595) - 1)
        assert abs(peaks[-1] - int((mel_centres - f).abs().argmin())) <= 1
    assert peaks[0] < peaks[1] < peaks[2]


def test_load_clip_pads_and_crops(tmp_path: Path) -> None:
    fe = sc.FrontEnd()
    short, long = np.full(8000, 0.5, np.float32), np.linspace(-1, 1, 24000, dtype=np.float32)
    sf.write(tmp_path / "s.wav", short, 16000, subtype="FLOAT")
    sf.write(tmp_path / "l.wav", long, 16000, subtype="FLOAT")
    s, l_ = sc.load_clip(tmp_path / "s.wav", fe), sc.load_clip(tmp_path / "l.wav", fe)
    assert s.shape == l_.shape == (16000,)
    assert torch.all(s[:8000] == 0.5) and torch.all(s[8000:] == 0)
    torch.testing.assert_close(l_, torch.from_numpy(long[:16000]))
    sf.write(tmp_path / "r.wav", short, 8000)
    with pytest.raises(ValueError, match="sample rate"):
        sc.load_clip(tmp_path / "r.wav", fe)


def test_speaker_of_and_bucket_determinism() -> None:
    assert sc.speaker_of("yes/0a7c2a8d_nohash_1.wav") == "0a7c2a8d"
    buckets = [sc.speaker_bucket(f"{i:08x}", 10, 10) for i in range(2000)]
    assert buckets == [sc.speaker_bucket(f"{i:08x}", 10, 10) for i in range(2000)]
    frac = {b: buckets.count(b) / len(buckets) for b in ("train", "val", "test")}
    assert 0.75 < frac["train"] < 0.85 and 0.07 < frac["val"] < 0.13 and 0.07 < frac["test"] < 0.13


def test_speaker_disjoint_split_module(tmp_path: Path) -> None:
    _write_fixture(tmp_path / "data" / "speech_commands")
    dm = _module(tmp_path / "data", tmp_path)
    spk = {s: {sc.speaker_of(f) for f in files} for s, files in dm.split_files.items()}
    assert spk["train"] and spk["val"] and spk["test"]
    assert not (spk["train"] & spk["val"]) and not (spk["train"] & spk["test"]) and not (spk["val"] & spk["test"])
    assert sum(len(v) for v in dm.split_files.values()) == 300
    again = _module(tmp_path / "data", tmp_path)
    assert again.split_files == dm.split_files
    assert "speaker-disjoint" in dm.source and "no official lists" in dm.source
    assert (dm.n_features, dm.n_classes, dm.vocab_size) == (40, 10, None)
    assert len(dm.fingerprint) == 16 and dm.fingerprint == again.fingerprint
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (16, 49, 40) and x.dtype == torch.float32 and y.shape == (16,) and y.dtype == torch.long
    train_x = dm.splits["train"].tensors[0]  # (N, 49, 40), standardised per mel bin with train statistics
    torch.testing.assert_close(train_x.mean(dim=(0, 1)), torch.zeros(40), atol=1e-4, rtol=0)
    torch.testing.assert_close(train_x.std(dim=(0, 1)), torch.ones(40), atol=1e-3, rtol=0)


def test_official_lists_are_used_when_present(tmp_path: Path) -> None:
    _write_fixture(tmp_path / "data" / "speech_commands", n_speakers=4, lists=True)
    dm = _module(tmp_path / "data", tmp_path)
    assert {sc.speaker_of(f) for f in dm.split_files["val"]} == {"00000000"}
    assert {sc.speaker_of(f) for f in dm.split_files["test"]} == {"00000001"}
    assert len(dm.split_files["train"]) == 20 and "official split" in dm.source


def test_max_per_class_caps_train_only_and_cache_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_fixture(tmp_path / "data" / "speech_commands")
    full = _module(tmp_path / "data", tmp_path)

    def no_decode(*a: object, **k: object) -> None:
        raise AssertionError("features should come from the cache")

    monkeypatch.setattr(sc, "compute_features", no_decode)
    small = _module(tmp_path / "data", tmp_path, max_per_class=3)
    labels = small.splits["train"].tensors[1]
    assert torch.bincount(labels, minlength=10).tolist() == [3] * 10
    assert small.split_files["val"] == full.split_files["val"] and small.split_files["test"] == full.split_files["test"]
    assert set(small.split_files["train"]) < set(full.split_files["train"])
    assert "max_per_class=3" in small.source
    other_seed = _module(tmp_path / "data", tmp_path, max_per_class=3, data_seed=1)
    assert other_seed.split_files["train"] != small.split_files["train"]


def test_missing_dataset_without_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path / "repo")
    dm = sc.SpeechCommandsDataModule(data_dir=str(tmp_path / "nowhere"), download=False)
    with pytest.raises(DatasetNotFoundError) as ei:
        dm.setup("fit")
    msg = str(ei.value)
    assert "speech_commands" in msg and str(tmp_path / "nowhere" / "speech_commands") in msg
    assert sc.ARCHIVE_URL in msg and "data.download=true" in msg


def test_download_verifies_checksum_and_extracts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    _write_fixture(src, n_speakers=3, samples=800, lists=True)
    archive = tmp_path / "speech_commands_v0.02.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for p in sorted(src.iterdir()):
            tar.add(p, arcname=p.name)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    with pytest.raises(DatasetNotFoundError, match="sha256"):
        sc.download_speech_commands(tmp_path / "bad", url=archive.as_uri(), sha256="0" * 64)
    assert not (tmp_path / "bad" / "yes").exists()
    with pytest.raises(DatasetNotFoundError, match="failed"):
        sc.download_speech_commands(tmp_path / "off", url=(tmp_path / "absent.tar.gz").as_uri())
    # through the data module: nothing on disk, download=true -> fetched into the data root and used
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path / "repo")
    monkeypatch.setattr(sc, "ARCHIVE_URL", archive.as_uri())
    monkeypatch.setattr(sc, "ARCHIVE_SHA256", digest)
    dm = _module(tmp_path / "root", tmp_path, download=True)
    assert (tmp_path / "root" / "speech_commands" / "yes" / "00000000_nohash_0.wav").is_file()
    assert "official split" in dm.source
    assert [len(dm.split_files[s]) for s in ("train", "val", "test")] == [10, 10, 10]


def test_shared_test_set_subset(tmp_path: Path) -> None:
    shared = require_shared(sc.DATASET_NAME, "yes")
    dm = _module(shared.parent, tmp_path)
    n = {s: len(v) for s, v in dm.split_files.items()}
    assert sum(n.values()) == 1500
    spk = {s: {sc.speaker_of(f) for f in files} for s, files in dm.split_files.items()}
    assert len(spk["train"] | spk["val"] | spk["test"]) == 114
    assert not (spk["train"] & spk["val"]) and not (spk["train"] & spk["test"]) and not (spk["val"] & spk["test"])
    for s in ("train", "val", "test"):
        assert torch.bincount(dm.splits[s].tensors[1], minlength=10).min() > 0  # every keyword in every split
    assert "test-set subset" in dm.source and "1,500 wavs" in dm.source and "speaker-disjoint" in dm.source
    x, y = next(iter(dm.val_dataloader()))
    assert x.shape == (16, 49, 40) and torch.isfinite(x).all()
