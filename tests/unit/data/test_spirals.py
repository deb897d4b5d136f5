"""2-D spirals (ContiFormer spiral.py semantics): the two rotations, observations from the first half of the grid,
clean targets at the target times, the interpolation / extrapolation parts, normalisation and determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from oscrepro.data.spirals import SpiralsDataModule, spiral_trajectories


def test_rotations_follow_contiformer() -> None:
    rng = np.random.default_rng(0)
    cc, ts, cw_flag = spiral_trajectories(4, rng, rotation="cc")
    cw, _, cw_flag2 = spiral_trajectories(4, rng, rotation="cw")
    assert not cw_flag.any() and cw_flag2.all()
    assert np.allclose(ts, np.linspace(0, 6 * math.pi, 150))
    r = 0.3 * ts  # counter-clockwise: r = b z around (+5, 0), z = t
    assert np.allclose(cc[0], np.stack([r * np.cos(ts) + 5, r * np.sin(ts)], -1))
    z = (6 * math.pi + 1 - ts)[::-1]  # clockwise: z = stop + 1 - t, r = 50 b / z around (-5, 0), reversed in time
    assert np.allclose(cw[0], np.stack([15 / z * np.cos(z) - 5, 15 / z * np.sin(z)], -1))
    radius = lambda p, c: np.hypot(p[:, 0] - c, p[:, 1])  # noqa: E731
    assert (np.diff(radius(cc[0], 5)) > 0).all() and (np.diff(radius(cw[0], -5)) < 0).all()  # outward vs inward
    both = spiral_trajectories(400, np.random.default_rng(1), rotation="both")[2]
    assert 0.4 < both.mean() < 0.6


@pytest.mark.parametrize(("target", "expected"), [("all", (0, 150)), ("interpolation", (0, 75)),
                                                  ("extrapolation", (75, 150))])
def test_batches_observe_the_first_half_and_target_the_clean_part(target: str, expected: tuple[int, int]) -> None:
    dm = SpiralsDataModule(n_train=40, n_val=8, n_test=8, batch_size=8, target=target)
    dm.setup("fit")
    assert dm.dims == {"n_features": 2, "seq_len": 50}
    x, y, meta = next(iter(dm.test_dataloader()))
    ts = np.linspace(0, 6 * math.pi, 150).astype(np.float32)
    assert x.shape == (8, 50, 2) and x.dtype == torch.float32 and meta["mask"].all()
    assert y.shape == (8, expected[1] - expected[0], 2) and y.dtype == torch.float32
    assert set(meta) == {"times", "mask", "target_times", "target_mask"} and meta["target_mask"].all()
    assert torch.allclose(meta["target_times"][0], torch.from_numpy(ts[expected[0]: expected[1]]))
    times = meta["times"]
    assert (times.diff(dim=1) > 0).all() and float(times.max()) <= ts[74] + 1e-5  # distinct, first half only
    if target != "extrapolation":  # observations are the clean target at the same times plus N(0, 0.05^2)
        idx = torch.from_numpy(np.searchsorted(ts, times.numpy()))
        clean = torch.take_along_dim(y, idx[..., None], dim=1)
        noise = (x - clean) * torch.from_numpy(dm.data_range).float()  # back in spiral units
        assert 0.04 < float(noise.std()) < 0.06 and abs(float(noise.mean())) < 0.01


def test_normalised_with_the_training_range_and_deterministic() -> None:
    dm = SpiralsDataModule(n_train=60, n_val=10, n_test=10, rotation="both")
    dm.setup("fit")
    y = dm.splits["train"].arrays.y  # (N, 150, 2) clean
    assert np.allclose(y.min(axis=(0, 1)), 0, atol=1e-6) and np.allclose(y.max(axis=(0, 1)), 1, atol=1e-6)
    again = SpiralsDataModule(n_train=60, n_val=10, n_test=10, rotation="both")
    again.setup("fit")
    assert again.fingerprint == dm.fingerprint
    other = SpiralsDataModule(n_train=60, n_val=10, n_test=10, rotation="both", seed=1)
    other.setup("fit")
    assert other.fingerprint != dm.fingerprint
    assert not np.array_equal(dm.splits["train"].arrays.t[:10], dm.splits["test"].arrays.t)


def test_rejects_bad_options() -> None:
    with pytest.raises(ValueError, match="target"):
        SpiralsDataModule(target="middle")
    with pytest.raises(ValueError, match="rotation"):
        SpiralsDataModule(rotation="up")
