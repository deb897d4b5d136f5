"""BIDMC32HR heart-rate regression (osciformer Table 3) on the committed SYNTHETIC fixture in the real .ts format:
the files load with their float targets, both split protocols are disjoint with the stated sizes and seeded, the
missing-data error says what, where and how, the target statistics round-trip through the model, and a batch runs
through the sequence regressor and the regression task, whose test RMSE is in the target's unit (bpm)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch

from oscrepro.attention.softmax import SoftmaxAttention
from oscrepro.data import paths
from oscrepro.data.heart_rate import HeartRateDataModule, locate_tser, read_tser
from oscrepro.models.sequence_regressor import ContinuousTimeSequenceRegressor
from oscrepro.tasks.regression import RegressionTask

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures"
FOLDER = FIXTURES / "monash" / "BIDMC32HR"
N_TRAIN, N_TEST, STEPS = 12, 6, 48  # make_bidmc_fixture.py


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)


def _dm(**kw: object) -> HeartRateDataModule:
    kw = {"data_dir": str(FIXTURES), "batch_size": 4, **kw}
    dm = HeartRateDataModule(**kw)
    dm.setup("fit")
    return dm


def _file_targets(split: str) -> np.ndarray:
    """The targets as written in the .ts text: the field after the last ':' of every data row."""
    lines = (FOLDER / f"BIDMC32HR_{split}.ts").read_text().splitlines()
    rows = lines[lines.index("@data") + 1 :]
    return np.array([float(r.rsplit(":", 1)[1]) for r in rows if r.strip()])


def _targets(dm: HeartRateDataModule, split: str) -> np.ndarray:
    return dm.splits[split].arrays.y.reshape(-1).astype(np.float64)


def test_fixture_loads_with_float_targets() -> None:
    series, y = read_tser(FOLDER / "BIDMC32HR_TRAIN.ts")
    assert len(series) == N_TRAIN and all(s.shape == (STEPS, 2) for s in series)
    np.testing.assert_allclose(y, _file_targets("TRAIN"), rtol=0, atol=1e-9)  # the target column, as floats
    dm = _dm(protocol="official")
    assert dm.dims == {"n_features": 2, "seq_len": STEPS}
    assert "SYNTHETIC stand-in for BIDMC32HR" in dm.source and "train/val/test 10/2/6" in dm.source
    train = dm.splits["train"].arrays
    assert train.y.shape == (10, 1, 1) and train.target_times.shape == (10, 1)
    assert np.allclose(train.t[:, -1], 1.0) and np.allclose(train.target_times, 1.0)  # normalised time, end = 1
    observed = train.x[train.mask]  # channels standardised with the training split only
    np.testing.assert_allclose(observed.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(observed.std(axis=0), 1.0, atol=1e-4)
    assert 55.0 <= float(dm.target_mean[0]) <= 115.0 and float(dm.target_std[0]) > 1.0  # targets stay in bpm


@pytest.mark.parametrize(("protocol", "sizes"), [("official", (10, 2, 6)), ("merged", (13, 3, 2))])
def test_protocols_give_disjoint_splits_of_the_stated_sizes(protocol: str, sizes: tuple[int, int, int]) -> None:
    dm = _dm(protocol=protocol)
    index = dm.split_index(N_TRAIN, N_TRAIN + N_TEST)
    assert tuple(len(index[s]) for s in ("train", "val", "test")) == sizes
    pooled = np.concatenate(list(index.values()))
    assert len(np.unique(pooled)) == len(pooled) == N_TRAIN + N_TEST  # disjoint, and every series used
    all_targets = np.concatenate([_file_targets("TRAIN"), _file_targets("TEST")])
    got = np.sort(np.concatenate([_targets(dm, s) for s in ("train", "val", "test")]))
    np.testing.assert_allclose(got, np.sort(all_targets), atol=1e-4)  # every series once (float32 targets)
    if protocol == "official":  # the archive's TEST is the test set; validation is held out of TRAIN
        np.testing.assert_allclose(_targets(dm, "test"), _file_targets("TEST"), atol=1e-4)
        assert index["val"].max() < N_TRAIN and index["train"].max() < N_TRAIN


def test_validation_hold_out_is_seeded_and_deterministic() -> None:
    a, b, c = (_dm(protocol="official", seed=s) for s in (0, 0, 1))
    np.testing.assert_array_equal(_targets(a, "val"), _targets(b, "val"))
    assert torch.equal(next(iter(a.val_dataloader()))[0], next(iter(b.val_dataloader()))[0])
    assert set(_targets(a, "val").tolist()) != set(_targets(c, "val").tolist())  # another seed, another hold-out
    assert a.fingerprint == c.fingerprint  # the fingerprint is of the files; the split is in the source
    assert "seed=0" in a.source and "seed=1" in c.source


def test_missing_files_error_names_the_files_places_and_how(tmp_path: Path) -> None:
    with pytest.raises(paths.DatasetNotFoundError) as err:
        locate_tser("BIDMC32HR", data_dir=str(tmp_path / "nowhere"))
    msg = str(err.value)
    assert "BIDMC32HR_TRAIN.ts" in msg and "BIDMC32HR_TEST.ts" in msg  # what
    assert str(tmp_path / "nowhere" / "monash" / "BIDMC32HR") in msg  # where (every place looked)
    assert str(paths.REPO_ROOT / "data" / "monash") in msg
    assert "zenodo.org/records/4001456" in msg and "data.download=true" in msg  # how


def test_real_header_is_not_labelled_a_stand_in_and_relative_dirs_resolve(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "monash" / "BIDMC32HR"
    copy.mkdir(parents=True)
    for split in ("TRAIN", "TEST"):  # the same rows without the fixture's "SYNTHETIC" comment line
        text = (FOLDER / f"BIDMC32HR_{split}.ts").read_text().splitlines()
        (copy / f"BIDMC32HR_{split}.ts").write_text("\n".join(text[1:]) + "\n")
    plain = _dm(data_dir=str(tmp_path))
    assert "stand-in" not in plain.source and "Monash TSER BIDMC32HR" in plain.source
    monkeypatch.chdir(tmp_path / "monash")  # tests/fixtures does not exist from here: taken from the repo root
    assert locate_tser("BIDMC32HR", data_dir="tests/fixtures")[0] == FOLDER / "BIDMC32HR_TRAIN.ts"


def _model(dm: HeartRateDataModule) -> ContinuousTimeSequenceRegressor:
    torch.manual_seed(0)
    model = ContinuousTimeSequenceRegressor(n_features=2, d_model=8, n_heads=2, n_layers=1, d_ff=16,
                                            attention=partial(SoftmaxAttention), time_embedding="sinusoidal")
    model.set_data_statistics(dm)
    return model


def test_target_statistics_round_trip_through_the_model() -> None:
    dm = _dm()
    model = _model(dm).eval()
    assert float(model.target_mean) == pytest.approx(float(dm.target_mean[0]))
    x, y, meta = next(iter(dm.train_dataloader()))
    with torch.no_grad():
        pred, _ = model(x, times=meta["times"], mask=meta["mask"])  # (B, 1, 1) in bpm
        h, _ = model.encoder(x, times=meta["times"])
        z = model.head(h, meta["mask"])  # (B, 1) standardised
    assert pred.shape == y.shape
    torch.testing.assert_close(model.standardise(pred[:, 0]), z, rtol=1e-5, atol=1e-5)  # bpm -> z -> bpm
    torch.testing.assert_close(pred[:, 0], z * float(dm.target_std[0]) + float(dm.target_mean[0]))
    with pytest.raises(ValueError, match="std > 0"):
        model.set_target_statistics(0.0, 0.0)


def test_batch_runs_through_the_regression_task_with_rmse_in_bpm() -> None:
    dm = _dm(protocol="official")
    model = _model(dm)
    task = RegressionTask(model, optimizer=partial(torch.optim.AdamW, lr=1e-3))
    batch = next(iter(dm.train_dataloader()))
    loss = task.loss(batch)
    loss.backward()
    assert torch.isfinite(loss) and model.head.linear.weight.grad is not None
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    logged = trainer.test(task, datamodule=dm, verbose=False)[0]
    model.eval()
    with torch.no_grad():  # hand RMSE over the whole test split, in bpm
        errors = [model(x, times=m["times"], mask=m["mask"])[0] - y for x, y, m in dm.test_dataloader()]
    rmse = float(torch.cat(errors).square().mean().sqrt())
    assert logged["test/rmse"] == pytest.approx(rmse, rel=1e-5)
    assert logged["test/mse"] == pytest.approx(rmse**2, rel=1e-5)
    # an untrained head predicts near the training mean, so the error is on the scale of the targets' spread (bpm)
    assert 0.2 * float(dm.target_std[0]) < rmse < 4.0 * float(dm.target_std[0])


def test_drop_rate_removes_steps_and_keeps_targets() -> None:
    full, dropped = _dm(protocol="official"), _dm(protocol="official", drop_rate=0.5)
    assert (dropped.splits["train"].arrays.lengths == STEPS // 2).all()
    np.testing.assert_array_equal(_targets(full, "test"), _targets(dropped, "test"))
    assert "50% of each sample's observations dropped" in dropped.source
