"""Resonance tasks (osciformer App. E.2 classification, App. E.3 forecasting): the frequency bank, Poisson times
in (0, T), the label is the generating frequency, the forecast target is the noise-free signal at T_future, the
trapezoid spectral features, and the batch format of both modules."""

from __future__ import annotations

import math

import numpy as np
import torch

from oscrepro.data.resonance import (
    FORECAST_OMEGAS,
    ResonanceDataModule,
    ResonanceForecastDataModule,
    frequency_bank,
    generate_classification,
    generate_forecast,
    spectral_energy,
)


def test_frequency_bank_is_app_e2s() -> None:
    bank = frequency_bank()
    assert bank.shape == (41,)
    assert math.isclose(bank[0], 2 * math.pi * 0.5) and math.isclose(bank[-1], 2 * math.pi * 4.5)
    assert np.allclose(np.diff(bank), 2 * math.pi * 0.1)


def test_classification_examples() -> None:
    a = generate_classification(4_000, np.random.default_rng(0))
    assert a.x.shape == (4_000, 32, 2) and a.mask.all() and a.y.dtype == np.int64
    assert (a.t > 0).all() and (a.t < 5).all() and (np.diff(a.t, axis=1) > 0).all()  # 0 < t_1 < ... < t_L < T
    assert np.bincount(a.y, minlength=41).min() > 50  # labels cover all 41 classes
    radius = np.linalg.norm(a.x, axis=-1)  # A plus N(0, 0.05^2) noise
    assert 0.95 < radius.mean() < 1.05 and radius.min() > 0.55 and radius.max() < 1.45
    # the label is the frequency that generated the sinusoid: a periodogram on the bank recovers it
    z = a.x[..., 0] + 1j * a.x[..., 1]  # A e^{i(omega t + phi)}, (N, L)
    power = np.abs(np.einsum("nl,nlm->nm", z, np.exp(-1j * a.t[..., None] * frequency_bank())))  # (N, M)
    assert (power.argmax(axis=1) == a.y).mean() > 0.97


def test_forecast_target_is_the_clean_signal_at_t_future() -> None:
    a = generate_forecast(2_000, np.random.default_rng(1))
    assert a.y.shape == (2_000, 1, 1) and (a.target_times == 7.0).all() and a.target_mask.all()
    n = a.lengths
    assert n.min() >= 2 and n.max() > n.min() + 5  # the number of points varies
    assert (a.t[a.mask] > 0).all() and (a.t[a.mask] < 5).all()
    target = a.y[:, 0, 0]
    assert 0.75 < target.std() < 1.05  # App. E.3 reports std(y_target) ~ 0.88
    om = np.asarray(FORECAST_OMEGAS)
    pred = []
    for x, t, m in zip(a.x[:300, :, 0], a.t[:300], a.mask[:300], strict=True):  # least squares on the 8 cosines
        coef = np.linalg.lstsq(np.cos(np.outer(t[m], om)), x[m], rcond=None)[0]
        pred.append(coef @ np.cos(7.0 * om))
    assert np.corrcoef(pred, target[:300])[0, 1] > 0.95  # the target is sum_k a_k cos(7 omega_k) of the same a_k


def test_spectral_energy_is_the_trapezoid_rule() -> None:
    a = generate_forecast(6, np.random.default_rng(2))
    om = torch.tensor(FORECAST_OMEGAS)
    got = spectral_energy(torch.from_numpy(a.x), torch.from_numpy(a.t), torch.from_numpy(a.mask), om)
    for i in range(6):
        t, y = a.t[i][a.mask[i]].astype(np.float64), a.x[i, a.mask[i], 0].astype(np.float64)
        span = t[-1] - t[0]
        ca = 2 / span * np.trapezoid(y[:, None] * np.cos(np.outer(t, om.numpy())), t, axis=0)
        cb = 2 / span * np.trapezoid(y[:, None] * np.sin(np.outer(t, om.numpy())), t, axis=0)
        assert np.allclose(got[i].numpy(), np.log1p(ca**2 + cb**2), atol=1e-4)


def test_modules_batches_and_determinism() -> None:
    dm = ResonanceDataModule(n_train=256, n_val=64, n_test=64, batch_size=32)
    dm.setup("fit")
    assert dm.dims == {"n_features": 2, "n_classes": 41, "seq_len": 32}
    x, y, meta = next(iter(dm.train_dataloader()))
    assert x.shape == (32, 32, 2) and y.shape == (32,) and y.dtype == torch.long and set(meta) == {"times", "mask"}
    again = ResonanceDataModule(n_train=256, n_val=64, n_test=64, batch_size=32)
    again.setup("fit")
    assert again.fingerprint == dm.fingerprint
    assert not np.array_equal(dm.splits["train"].arrays.t[:64], dm.splits["val"].arrays.t)

    fc = ResonanceForecastDataModule(n_train=200, n_val=40, n_test=40, batch_size=16)
    fc.setup("fit")
    assert set(fc.dims) == {"n_features", "seq_len"} and fc.n_features == 1
    x, y, meta = next(iter(fc.val_dataloader()))
    assert x.shape[0] == 16 and x.shape[2] == 1 and x.shape[1] <= fc.seq_len
    assert y.shape == (16, 1, 1) and y.dtype == torch.float32
    assert set(meta) == {"times", "mask", "target_times", "target_mask"} and (meta["target_times"] == 7).all()
    padded = ~meta["mask"]
    assert padded.any() and (x[padded] == 0).all()
    last = meta["times"].gather(1, meta["mask"].sum(1, keepdim=True) - 1)  # (B, 1)
    assert torch.equal(torch.where(meta["mask"], meta["times"], last), meta["times"])
    assert fc.spectral_mean.shape == fc.spectral_std.shape == (8,) and (fc.spectral_std > 0).all()
