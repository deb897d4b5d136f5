"""Synthetic resonance tasks of osciformer App. E.2 (frequency classification) and App. E.3 (1-D forecasting).

**Classification (App. E.2).** A bank of M = 41 angular frequencies ``omega_m = 2 pi (0.5 + 0.1 (m - 1))``. Per
example: label ``m* ~ U{0..M-1}``; L = 32 times ``0 <= t_1 < ... < t_L <= T = 5`` from a homogeneous Poisson
process of rate 6 "re-normalised to [0, T]"; amplitude ``A ~ U[0.8, 1.2]``, phase ``phi ~ U[0, 2 pi)``;
observation ``x_l = A (cos(omega* t_l + phi), sin(omega* t_l + phi)) + N(0, 0.05^2 I_2)``. 50K / 10K / 10K
train / val / test. Batches: x (B, 32, 2), y (B,) in 0..40.

**Forecasting (App. E.3).** ``y(t) = sum_k a_k cos(omega_k t)`` over 1-3 frequencies of
{2.0, 3.2, 4.4, 5.6, 6.0, 7.2, 8.0, 9.0}; observed with noise ``N(0, sigma^2)`` on a grid with i.i.d. Gamma gaps
(the number of points varies); the target is ``y(T_future = 7)``. 2,000 / 400 train / val. Batches: x (B, T, 1)
noisy values at ``meta["times"]``, y (B, 1, 1) at ``meta["target_times"] = 7``. The appendix's trigonometric
features ``Z_j = (log(1 + A_j^2 + B_j^2) - mu_j) / sigma_j`` (trapezoid rule, (mu, sigma) from the training
set) are a model input built from the batch: :func:`spectral_energy` computes ``log(1 + E_j)`` and the module
keeps the training ``spectral_mean`` / ``spectral_std``.

Where the appendix is silent we chose:
* E.2 times: L + 1 exponential gaps of rate 6, ``t_l = T S_l / S_{L+1}`` (S = cumulative gaps): the law of a
  Poisson process conditioned on L points in [0, T], so ``0 < t_1 < ... < t_L < T`` (never ``t_L = T``, where
  the query at T would see a zero-length integral); the rate cancels in this normalisation;
* E.2 label indices are 0-based (class m* - 1);
* E.3: the number of components uniform in {1, 2, 3}, frequencies distinct; ``a_k ~ U[-1.5, 1.5]`` (gives
  std(y_target) ~ 0.90 and a constant-predictor MSE ~ 0.80 against the reported ~0.88 / ~0.78; U[0.5, 1.5] gives
  0.94 / 0.89; the E.3 experiment draws U[0, 1.65], since its sign-blind energy features cannot forecast
  sign-symmetric amplitudes: conf/experiment/osciformer/forecast.yaml); gaps ``Gamma(shape 2, scale 0.1)``
  (mean 0.2) with observations while ``t < t_obs = 5`` (~25 points; Fig. 6a shows a final observation time before
  T_future), at least 2 points; ``sigma = 0.1``; a 400-sequence test split from its own stream (the appendix
  reports validation only); the features' integral runs over [t_1, t_N] and their T is that span, t_N - t_1.
Splits use ``SeedSequence([seed, k])``, k = 0/1/2.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from oscrepro.data.irregular import IrregularArrays, IrregularDataModule, compact

FORECAST_OMEGAS = (2.0, 3.2, 4.4, 5.6, 6.0, 7.2, 8.0, 9.0)  # App. E.3


def frequency_bank(n_freqs: int = 41, f_min: float = 0.5, df: float = 0.1) -> np.ndarray:
    """App. E.2's omega_m = 2 pi (f_min + (m - 1) df), m = 1..M: (M,)."""
    return 2 * math.pi * (f_min + df * np.arange(n_freqs))


def generate_classification(n: int, rng: np.random.Generator, n_freqs: int = 41, f_min: float = 0.5,
                            df: float = 0.1, n_points: int = 32, t_max: float = 5.0, rate: float = 6.0,
                            amp_range: tuple[float, float] = (0.8, 1.2), noise_std: float = 0.05
                            ) -> IrregularArrays:
    """App. E.2 examples (module docstring): x (n, L, 2), t (n, L) in (0, T), y (n,) frequency index."""
    omegas = frequency_bank(n_freqs, f_min, df)
    y = rng.integers(0, n_freqs, size=n)  # (n,)
    gaps = rng.exponential(1.0 / rate, size=(n, n_points + 1))  # Poisson process, L + 1 gaps
    s = np.cumsum(gaps, axis=1)
    t = t_max * s[:, :n_points] / s[:, -1:]  # (n, L), renormalised into (0, T)
    amp = rng.uniform(*amp_range, size=(n, 1))
    phase = rng.uniform(0.0, 2 * math.pi, size=(n, 1))
    angle = omegas[y][:, None] * t + phase  # (n, L)
    x = amp[..., None] * np.stack([np.cos(angle), np.sin(angle)], axis=-1)  # (n, L, 2)
    x = x + noise_std * rng.standard_normal(x.shape)
    return IrregularArrays(x, t, np.ones(t.shape, dtype=bool), y)


def forecast_amplitudes(n: int, rng: np.random.Generator, n_freqs: int = len(FORECAST_OMEGAS),
                        max_components: int = 3, amp_range: tuple[float, float] = (-1.5, 1.5)) -> np.ndarray:
    """The amplitudes a_k (n, K) of App. E.3 sequences, 0 on unused frequencies: the first draws of
    :func:`generate_forecast` from ``rng``, so a replay from the same seed gives the sequences' true amplitudes."""
    n_comp = rng.integers(1, max_components + 1, size=n)  # (n,)
    chosen = np.argsort(rng.random((n, n_freqs)), axis=1) < n_comp[:, None]  # (n, K) distinct components
    return np.where(chosen, rng.uniform(*amp_range, size=(n, n_freqs)), 0.0)  # (n, K)


def generate_forecast(n: int, rng: np.random.Generator, omegas: tuple[float, ...] = FORECAST_OMEGAS,
                      max_components: int = 3, amp_range: tuple[float, float] = (-1.5, 1.5),
                      gap_shape: float = 2.0, gap_scale: float = 0.1, t_obs: float = 5.0, t_future: float = 7.0,
                      noise_std: float = 0.1, min_points: int = 2) -> IrregularArrays:
    """App. E.3 sequences (module docstring): x (n, T, 1) noisy y(t_n), y (n, 1, 1) = y(t_future)."""
    om = np.asarray(omegas, dtype=np.float64)
    amp = forecast_amplitudes(n, rng, len(om), max_components, amp_range)  # (n, K), a_k (0 if unused)
    n_draw = int(4 * t_obs / (gap_shape * gap_scale)) + 8  # enough gaps to pass t_obs with certainty in practice
    t = np.cumsum(rng.gamma(gap_shape, gap_scale, size=(n, n_draw)), axis=1)  # (n, D)
    keep = (t < t_obs) | (np.arange(n_draw) < min_points)
    if (t[keep] >= t_future).any():
        raise ValueError("an observation falls after t_future; lower gap_scale or raise t_future")
    signal = np.einsum("nk,ndk->nd", amp, np.cos(t[..., None] * om))  # (n, D)
    obs = signal + noise_std * rng.standard_normal(signal.shape)
    x, t_obs_grid, mask = compact(obs[..., None], t, keep)  # (n, T, 1)
    target = (amp * np.cos(t_future * om)).sum(axis=1)  # (n,)
    return IrregularArrays(x, t_obs_grid, mask, target[:, None, None], target_times=np.full((n, 1), t_future))


def trig_coefficients(x: Tensor, times: Tensor, mask: Tensor, omegas: Tensor) -> tuple[Tensor, Tensor]:
    """App. E.3's ``A_j ~ 2/T int y cos(omega_j t) dt`` and ``B_j`` (with sin) by the trapezoid rule over each
    row's real points, T = the row's observation span. x (B, T, 1), times / mask (B, T), omegas (J,) -> 2 x (B, J)."""
    y = x[..., 0] * mask  # (B, T)
    arg = times[..., None] * omegas  # (B, T, J)
    dt = (times[:, 1:] - times[:, :-1]) * (mask[:, 1:] & mask[:, :-1])  # (B, T-1), 0 across padding
    span = (dt.sum(dim=1, keepdim=True)).clamp_min(1e-6)  # (B, 1)

    def trapezoid(f: Tensor) -> Tensor:  # f (B, T, J) -> (B, J)
        return (0.5 * (f[:, 1:] + f[:, :-1]) * dt[..., None]).sum(dim=1)

    a = 2 / span * trapezoid(y[..., None] * torch.cos(arg))
    b = 2 / span * trapezoid(y[..., None] * torch.sin(arg))
    return a, b  # (B, J) each


def spectral_energy(x: Tensor, times: Tensor, mask: Tensor, omegas: Tensor) -> Tensor:
    """App. E.3 features before standardisation: ``log(1 + E_j)``, ``E_j = A_j^2 + B_j^2``
    (:func:`trig_coefficients`). x (B, T, 1), times / mask (B, T), omegas (J,) -> (B, J)."""
    a, b = trig_coefficients(x, times, mask, omegas)
    return torch.log1p(a**2 + b**2)  # (B, J)


def _split_rng(seed: int, k: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, k]))


class ResonanceDataModule(IrregularDataModule):
    """App. E.2 frequency classification: which of 41 frequencies made the irregular noisy 2-D sinusoid."""

    def __init__(self, n_train: int = 50_000, n_val: int = 10_000, n_test: int = 10_000, n_freqs: int = 41,
                 f_min: float = 0.5, df: float = 0.1, n_points: int = 32, t_max: float = 5.0, rate: float = 6.0,
                 amp_range: tuple[float, float] = (0.8, 1.2), noise_std: float = 0.05, batch_size: int = 128,
                 seed: int = 0, drop_rate: float = 0.0, num_workers: int = 0) -> None:
        super().__init__(batch_size=batch_size, seed=seed, drop_rate=drop_rate, num_workers=num_workers)
        self.sizes = {"train": n_train, "val": n_val, "test": n_test}
        self.params = dict(n_freqs=n_freqs, f_min=f_min, df=df, n_points=n_points, t_max=t_max, rate=rate,
                           amp_range=tuple(amp_range), noise_std=noise_std)
        self.n_classes = n_freqs
        sizes = "/".join(f"{n:,}" for n in self.sizes.values())
        self.source = (f"synthetic resonance classification (osciformer App. E.2; oscrepro.data.resonance): "
                       f"{n_freqs} frequencies {f_min}..{f_min + df * (n_freqs - 1):.3g} Hz, {n_points} Poisson "
                       f"times in (0, {t_max}), noise {noise_std}, train/val/test {sizes}, seed={seed}")

    def build_splits(self) -> dict[str, IrregularArrays]:
        return {name: generate_classification(n, _split_rng(self.seed, k), **self.params)
                for k, (name, n) in enumerate(self.sizes.items())}


class ResonanceForecastDataModule(IrregularDataModule):
    """App. E.3 forecasting of y(7) from a noisy irregular multi-cosine signal; sets ``spectral_mean`` /
    ``spectral_std`` (J,) of :func:`spectral_energy` on the training split for the appendix's Z features."""

    def __init__(self, n_train: int = 2_000, n_val: int = 400, n_test: int = 400,
                 omegas: tuple[float, ...] = FORECAST_OMEGAS, max_components: int = 3,
                 amp_range: tuple[float, float] = (-1.5, 1.5), gap_shape: float = 2.0, gap_scale: float = 0.1,
                 t_obs: float = 5.0, t_future: float = 7.0, noise_std: float = 0.1, batch_size: int = 64,
                 seed: int = 0, drop_rate: float = 0.0, num_workers: int = 0) -> None:
        super().__init__(batch_size=batch_size, seed=seed, drop_rate=drop_rate, num_workers=num_workers)
        self.sizes = {"train": n_train, "val": n_val, "test": n_test}
        self.omegas = tuple(float(w) for w in omegas)
        self.params = dict(omegas=self.omegas, max_components=max_components, amp_range=tuple(amp_range),
                           gap_shape=gap_shape, gap_scale=gap_scale, t_obs=t_obs, t_future=t_future,
                           noise_std=noise_std)
        self.spectral_mean: Tensor | None = None  # (J,)
        self.spectral_std: Tensor | None = None
        sizes = "/".join(f"{n:,}" for n in self.sizes.values())
        self.source = (f"synthetic resonance forecasting (osciformer App. E.3; oscrepro.data.resonance): 1-"
                       f"{max_components} cosines of {list(self.omegas)}, Gamma({gap_shape}, {gap_scale}) gaps "
                       f"to t<{t_obs}, noise {noise_std}, target y({t_future}), train/val/test {sizes}, seed={seed}")

    def build_splits(self) -> dict[str, IrregularArrays]:
        return {name: generate_forecast(n, _split_rng(self.seed, k), **self.params)
                for k, (name, n) in enumerate(self.sizes.items())}

    def transform(self, splits: dict[str, IrregularArrays]) -> dict[str, IrregularArrays]:
        train = splits["train"]
        energy = spectral_energy(torch.from_numpy(train.x), torch.from_numpy(train.t), torch.from_numpy(train.mask),
                                 torch.tensor(self.omegas, dtype=torch.float32))  # (N, J)
        self.spectral_mean, self.spectral_std = energy.mean(dim=0), energy.std(dim=0).clamp_min(1e-6)
        return splits
