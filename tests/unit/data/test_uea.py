"""UEA with dropped observations (osciformer Sec. 7, Table 2): the committed Epilepsy fixture read through aeon,
both split protocols' sizes, the per-sample drop keeps the stated fraction, training-only standardisation, the
lookup order, and the clear error for a missing set.

aeon is a pinned dependency (requirements.lock): the tests that read .ts files import it and fail if it is missing.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from oscrepro.data import paths
from oscrepro.data.irregular import IrregularArrays, compact, random_drop
from oscrepro.data.uea import PAPER_SETS, UEADataModule, label_order, locate_uea, read_uea_file, stratified_holdout

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures"
FIXTURE_TRAIN, FIXTURE_TEST, STEPS = 8, 4, 206  # tests/fixtures/uea/Epilepsy: 2 + 1 cases per class, 3 x 206


def test_aeon_is_installed() -> None:
    """The .ts reader's dependency (pinned in requirements.lock) is importable: never a silent skip."""
    assert importlib.util.find_spec("aeon") is not None, "aeon missing: make install (requirements.lock pins it)"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)


def _fixture_dm(**kw: object) -> UEADataModule:
    return UEADataModule("Epilepsy", data_dir=str(FIXTURES), folders=("uea",), batch_size=4, **kw)


def _ragged(lengths: list[int], seed: int = 0) -> IrregularArrays:
    rng = np.random.default_rng(seed)
    width = max(lengths)
    keep = np.arange(width)[None, :] < np.array(lengths)[:, None]
    x = rng.standard_normal((len(lengths), width, 3))
    t = np.broadcast_to(np.arange(width, dtype=np.float64), keep.shape)
    return IrregularArrays(*compact(x, t, keep, width=width), np.arange(len(lengths)))


@pytest.mark.parametrize("rate", [0.3, 0.5, 0.7])
def test_drop_keeps_the_stated_fraction_per_sample(rate: float) -> None:
    a = _ragged([206, 100, 29, 7, 1, 2, 3])
    d = random_drop(a, rate, np.random.default_rng(5))
    n = a.lengths
    assert (d.lengths == n - np.minimum(np.floor(rate * n + 1e-9), n - 1)).all()  # floor(rate n) gone, never all
    assert (d.lengths >= 1).all()
    for i in range(len(n)):
        kept_t = d.t[i, d.mask[i]]
        assert (np.diff(kept_t) > 0).all() and np.isin(kept_t, a.t[i, a.mask[i]]).all()  # original times, in order
        assert np.allclose(d.x[i, d.mask[i]], a.x[i, kept_t.astype(int)])  # every channel of a kept step
        assert (d.x[i, ~d.mask[i]] == 0).all() and (d.t[i, ~d.mask[i]] == kept_t[-1]).all()
    again = random_drop(a, rate, np.random.default_rng(5))
    assert np.array_equal(again.t, d.t) and not np.array_equal(random_drop(a, rate, np.random.default_rng(6)).t, d.t)
    dropped = np.concatenate([np.setdiff1d(a.t[0, a.mask[0]], random_drop(a, rate, np.random.default_rng(s)).t[0])
                              for s in range(200)])
    assert np.bincount(dropped.astype(int), minlength=206).min() > 0  # every step gets dropped sometimes


def test_missing_paper_set_raises_the_clear_error(tmp_path: Path) -> None:
    assert PAPER_SETS["SCP1"] == "SelfRegulationSCP1"
    dm = UEADataModule("SCP1", data_dir=str(tmp_path))
    with pytest.raises(paths.DatasetNotFoundError) as err:
        dm.setup("fit")
    text = str(err.value)
    assert "SelfRegulationSCP1" in text and str(tmp_path / "uea" / "SelfRegulationSCP1") in text
    assert "uea_small" in text and "Looked in" in text and "How to supply it" in text
    assert "timeseriesclassification.com" in text and "download" in text


def test_lookup_finds_nested_and_flat_layouts(tmp_path: Path) -> None:
    train, test = locate_uea("Epilepsy", str(FIXTURES), ("uea",))
    assert train == FIXTURES / "uea" / "Epilepsy" / "Epilepsy_TRAIN.ts" and test.name == "Epilepsy_TEST.ts"
    flat = tmp_path / "uea_small"
    flat.mkdir()
    for f in (train, test):
        shutil.copy(f, flat / f.name)
    assert locate_uea("Epilepsy", str(tmp_path), ("uea", "uea_small"))[0] == flat / "Epilepsy_TRAIN.ts"


def test_reader_without_aeon_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aeon", None)  # import aeon -> ImportError
    monkeypatch.setitem(sys.modules, "aeon.datasets", None)
    with pytest.raises(ImportError, match="pip install aeon"):
        read_uea_file(FIXTURES / "uea" / "Epilepsy" / "Epilepsy_TRAIN.ts")


def test_label_order_and_stratified_holdout() -> None:
    assert label_order(np.array(["10", "9", "1"])) == ["1", "9", "10"]
    assert label_order(np.array(["b", "a"])) == ["a", "b"]
    y = np.repeat(np.arange(4), 10)
    keep, hold = stratified_holdout(y, 0.2, np.random.default_rng(0))
    assert len(hold) == 8 and (np.bincount(y[hold], minlength=4) == 2).all()
    assert np.array_equal(np.sort(np.concatenate([keep, hold])), np.arange(40))


def test_fixture_reads_through_aeon() -> None:
    x, y = read_uea_file(FIXTURES / "uea" / "Epilepsy" / "Epilepsy_TRAIN.ts")
    assert len(x) == FIXTURE_TRAIN and all(s.shape == (STEPS, 3) for s in x)
    assert len(set(y.tolist())) == 4 and all(np.isfinite(s).all() for s in x)


@pytest.mark.parametrize(("protocol", "sizes"), [("official", (6, 2, 4)), ("merged", (8, 2, 2))])
def test_protocol_split_sizes(protocol: str, sizes: tuple[int, int, int]) -> None:
    dm = _fixture_dm(protocol=protocol, val_fraction=0.25)
    dm.setup("fit")
    assert tuple(len(dm.splits[s]) for s in ("train", "val", "test")) == sizes
    assert dm.dims == {"n_features": 3, "n_classes": 4, "seq_len": STEPS}
    assert "stand-in" in dm.source and protocol in dm.source
    if protocol == "official":  # test = the TEST file; val = one case of two classes, from TRAIN
        assert len(set(dm.splits["val"].arrays.y.tolist())) == 2
        assert sorted(dm.splits["test"].arrays.y.tolist()) == [0, 1, 2, 3]
    again = _fixture_dm(protocol=protocol, val_fraction=0.25)
    again.setup("fit")
    assert all(np.array_equal(again.splits[s].arrays.y, dm.splits[s].arrays.y) for s in dm.splits)
    assert again.fingerprint == dm.fingerprint


@pytest.mark.parametrize("rate", [0.3, 0.5, 0.7])
def test_module_drops_then_standardises_with_training_statistics(rate: float) -> None:
    dm = _fixture_dm(drop_rate=rate, protocol="merged")
    dm.setup("fit")
    kept = STEPS - int(np.floor(rate * STEPS + 1e-9))
    for ds in dm.splits.values():
        assert (ds.arrays.lengths == kept).all()
    assert dm.seq_len == kept and f"{rate:.0%}" in dm.source
    train = dm.splits["train"].arrays
    observed = train.x[train.mask]  # (n_obs, C)
    assert np.allclose(observed.mean(0), 0, atol=1e-4) and np.allclose(observed.std(0), 1, atol=1e-3)
    test = dm.splits["test"].arrays
    assert not np.allclose(test.x[test.mask].mean(0), 0, atol=1e-4)  # statistics are not refit on test
    x, y, meta = next(iter(dm.train_dataloader()))
    assert x.shape == (4, kept, 3) and x.dtype == torch.float32 and y.dtype == torch.long
    assert set(meta) == {"times", "mask"} and (meta["times"].diff(dim=1) > 0).all()
    assert float(meta["times"].min()) >= 0 and float(meta["times"].max()) <= 1  # normalised step index


def test_standin_reads_another_set_and_says_so() -> None:
    """data.standin (smoke budgets of the paper's missing sets) reads the stand-in and labels it in the source."""
    dm = UEADataModule("SCP1", data_dir=str(FIXTURES), folders=("uea",), batch_size=4, standin="Epilepsy")
    dm.setup("fit")
    plain = _fixture_dm()
    plain.setup("fit")
    assert dm.fingerprint == plain.fingerprint  # the Epilepsy fixture's files, not SelfRegulationSCP1's
    assert "stand-in for SelfRegulationSCP1" in dm.source and dm.source.startswith("UEA Epilepsy")
    with pytest.raises(FileNotFoundError, match="SelfRegulationSCP1"):  # without it: the clear missing-data error
        UEADataModule("SCP1", data_dir=str(FIXTURES), folders=("uea",), batch_size=4).setup("fit")


def test_time_stride_keeps_every_kth_step_at_its_original_time() -> None:
    """data.time_stride=k keeps steps 0, k, 2k, ... with their original (normalised) times, before the drop."""
    full, strided = _fixture_dm(protocol="merged"), _fixture_dm(protocol="merged", time_stride=3)
    full.setup("fit")
    strided.setup("fit")
    a, b = full.splits["train"].arrays, strided.splits["train"].arrays
    assert b.x.shape[1] == -(-STEPS // 3) and (b.lengths == -(-STEPS // 3)).all()
    assert np.allclose(b.t, a.t[:, ::3]) and float(b.t.max()) <= 1.0
    raw_a, raw_b = a.x * full.channel_std + full.channel_mean, b.x * strided.channel_std + strided.channel_mean
    assert np.allclose(raw_b, raw_a[:, ::3], atol=1e-4)  # the same raw values, every third step
    assert "1 step in 3 kept" in strided.source and "step in" not in full.source
    with pytest.raises(ValueError, match="time_stride"):
        _fixture_dm(time_stride=0)
