"""osciformer App. E.3: the resonance-attention forecaster of the 1-D regression experiment (Figs. 5-6).

What (App. E.3, "Features" and "Model"): a sequence of noisy observations (t_n, y_n) on an irregular grid is
summarised by trigonometric coefficients at the analysis frequencies omega_j (the data's grid
{2.0, 3.2, 4.4, 5.6, 6.0, 7.2, 8.0, 9.0}, J = 8), which then query K = 8 damped oscillator keys:

    A_j = 2/T int_0^T y(t) cos(omega_j t) dt,  B_j = 2/T int_0^T y(t) sin(omega_j t) dt   (trapezoid rule)
    E_j = A_j^2 + B_j^2,   Z_j = (log(1 + E_j) - mu_j) / sigma_j                         (mu, sigma: training set)
    Q_j = softplus(w_j Z_j + b_j)                                                       (query spectrum)
    |H_i(omega)| = 1 / sqrt((omega_{0,i}^2 - omega^2)^2 + (2 gamma_i omega)^2)           (key i's transfer function)
    alpha_i = sum_j Q_j |H_i(omega_j)|,  w~_i = softmax_i(alpha_i),  y^ = sum_i w~_i v_i

Everything (omega_0, gamma, w, b, v) is learned end to end on the MSE of y^ against y(T_future). The model has no
time input for the target: it predicts the one value y(T_future = 7) of the data (a single target per sequence).
E_j is blind to the sign of y (and, up to the finite window, to its phase), so y^ can only depend on |a_k|: the
experiment draws a_k >= 0 (conf/experiment/osciformer/forecast.yaml says why).

Where App. E.3 is silent, we chose:
* A_j, B_j: ``oscrepro.data.resonance.trig_coefficients`` (the data module's own features), the trapezoid over
  each sequence's real observations [t_1, t_N], T = t_N - t_1 (the span the integral covers), so A_j = a is
  recovered from a clean a cos(omega_j t) up to the window's leakage.
* (mu_j, sigma_j): the mean and the standard deviation (unbiased) of log(1 + E_j) over the whole training split,
  computed once by the data module at ``setup`` (``ResonanceForecastDataModule.spectral_mean`` / ``spectral_std``)
  and copied into the buffers ``feature_mean`` / ``feature_std`` by :meth:`set_data_statistics`, which
  ``oscrepro.train.build`` calls after building the model; they are saved in the checkpoint and never trained.
  A forward before they are set raises.
* omega_0 > 0 as exp(log omega_0), initialised log-uniform on ``omega_init_range`` = [2, 9] (the analysis grid's
  span); gamma >= 0 as softplus(raw), initialised U[0.05, 0.4] (App. E.2's damping initialisation); w_j = 1,
  b_j = 0 (Q = softplus(Z) at init); v_i ~ N(0, ``value_init_std``^2) with value_init_std = 1 (the target's
  scale; all-zero values would leave omega_0 and gamma without gradient at the first step).
* The optimiser's lr, epochs and batch size are in conf/experiment/osciformer/forecast.yaml.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.data.resonance import spectral_energy


def resonance_magnitude(omega: Tensor, omega0: Tensor, gamma: Tensor) -> Tensor:
    """|H_i(omega)| = 1 / sqrt((omega_0,i^2 - omega^2)^2 + (2 gamma_i omega)^2): omega (J,), omega0 / gamma (K,)
    -> (K, J)."""
    w = omega[None, :]  # (1, J)
    return torch.rsqrt((omega0[:, None].square() - w.square()).square() + (2 * gamma[:, None] * w).square())


class OsciFormerForecaster(nn.Module):
    """App. E.3's model: trapezoid spectral energies -> standardised Z -> query spectrum Q -> resonance logits over
    K oscillator keys -> softmax -> convex combination of learned scalar values (module docstring)."""

    def __init__(self, n_features: int, omegas: Sequence[float], n_keys: int = 8,
                 omega_init_range: tuple[float, float] = (2.0, 9.0),
                 gamma_init_range: tuple[float, float] = (0.05, 0.4), value_init_std: float = 1.0) -> None:
        super().__init__()
        if n_features != 1:
            raise ValueError(f"App. E.3 observes a scalar signal: n_features={n_features}, expected 1")
        j, k = len(omegas), n_keys
        self.n_keys = k
        self.register_buffer("omegas", torch.tensor([float(w) for w in omegas]))  # (J,) analysis frequencies
        self.register_buffer("feature_mean", torch.zeros(j))  # (J,) mu_j, set by set_data_statistics
        self.register_buffer("feature_std", torch.ones(j))  # (J,) sigma_j
        self.register_buffer("statistics_set", torch.tensor(False))
        self.weight = nn.Parameter(torch.ones(j))  # w_j
        self.bias = nn.Parameter(torch.zeros(j))  # b_j
        lo, hi = (math.log(float(v)) for v in omega_init_range)
        self.log_omega0 = nn.Parameter(lo + (hi - lo) * torch.rand(k))  # (K,) log-uniform
        g0 = float(gamma_init_range[0]) + (float(gamma_init_range[1]) - float(gamma_init_range[0])) * torch.rand(k)
        self.gamma_raw = nn.Parameter(torch.log(torch.expm1(g0)))  # softplus^-1
        self.values = nn.Parameter(float(value_init_std) * torch.randn(k))  # v_i

    def set_feature_statistics(self, mean: Tensor, std: Tensor) -> None:
        """Fix (mu_j, sigma_j) of log(1 + E_j), each (J,)."""
        if mean.shape != self.feature_mean.shape or std.shape != self.feature_std.shape:
            raise ValueError(f"statistics of shape {tuple(mean.shape)}, {tuple(std.shape)}; expected "
                             f"{tuple(self.feature_mean.shape)}")
        if not bool((std > 0).all()):
            raise ValueError("feature standard deviations must be positive")
        self.feature_mean.copy_(mean)
        self.feature_std.copy_(std)
        self.statistics_set.fill_(True)

    def set_data_statistics(self, datamodule: Any) -> None:
        """Copy the training split's (mu, sigma) from a set-up ``ResonanceForecastDataModule`` (same omegas)."""
        if datamodule.spectral_mean is None:
            raise ValueError("the data module has no spectral statistics: call setup() first")
        data_omegas = torch.tensor(datamodule.omegas, dtype=self.omegas.dtype)
        if data_omegas.shape != self.omegas.shape or not torch.allclose(data_omegas, self.omegas):
            raise ValueError(f"model omegas {self.omegas.tolist()} differ from the data's {list(datamodule.omegas)}")
        self.set_feature_statistics(datamodule.spectral_mean, datamodule.spectral_std)

    def key_params(self) -> dict[str, Tensor]:
        """omega_0 (K,) > 0, gamma (K,) >= 0, v (K,)."""
        return {"omega0": self.log_omega0.exp(), "gamma": F.softplus(self.gamma_raw), "values": self.values}

    def features(self, x: Tensor, times: Tensor, mask: Tensor) -> Tensor:
        """Standardised log-energies Z (B, J) of x (B, T, 1) at times / mask (B, T)."""
        if not bool(self.statistics_set):
            raise RuntimeError("feature statistics not set: call set_data_statistics(datamodule) (oscrepro.train.build "
                               "does) or set_feature_statistics(mean, std)")
        log_energy = spectral_energy(x, times, mask, self.omegas)  # (B, J): log(1 + A^2 + B^2)
        return (log_energy - self.feature_mean) / self.feature_std

    def attend(self, x: Tensor, times: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(y^ (B,), weights w~ (B, K), logits alpha (B, K)) of one batch."""
        z = self.features(x, times, mask)  # (B, J)
        q = F.softplus(self.weight * z + self.bias)  # (B, J): Q_j
        p = self.key_params()
        h = resonance_magnitude(self.omegas, p["omega0"], p["gamma"])  # (K, J)
        alpha = q @ h.T  # (B, K): sum_j Q_j |H_i(omega_j)|
        weights = alpha.softmax(-1)  # (B, K)
        return weights @ p["values"], weights, alpha  # y^ (B,)

    def forward(self, x: Tensor, need_weights: bool = False, *, times: Tensor | None = None,
                mask: Tensor | None = None, target_times: Tensor | None = None
                ) -> tuple[Tensor, list[dict[str, Tensor]]]:
        """x (B, T, 1) at ``times`` (B, T; default 0..T-1), ``mask`` (B, T) -> (y^ (B, 1, 1), [aux]): the one
        target y(T_future) per sequence (``target_times``, if given, must be (B, 1)); aux holds ``weights`` /
        ``logits`` (B, 1, 1, K) over the keys when ``need_weights``."""
        b, n = x.shape[:2]
        if times is None:
            times = torch.arange(n, device=x.device, dtype=x.dtype).expand(b, -1)
        if mask is None:
            mask = torch.ones(b, n, dtype=torch.bool, device=x.device)
        if target_times is not None and target_times.shape[1] != 1:
            raise ValueError(f"one target per sequence (App. E.3); got target_times {tuple(target_times.shape)}")
        y_hat, weights, alpha = self.attend(x, times, mask)
        aux = {"weights": weights[:, None, None], "logits": alpha[:, None, None]} if need_weights else {}
        return y_hat[:, None, None], [aux]  # (B, 1, 1)
