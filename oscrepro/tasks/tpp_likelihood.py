"""Log-likelihood of a marked temporal point process from an intensity callable (pure torch, no model).

For one right-padded sequence of N events (t_1, k_1), ..., (t_N, k_N) and a conditional intensity that is
piecewise given on each inter-event interval (t_j, t_{j+1}] by the history up to and including event j (the
caller's state h_j, which has not seen event j+1),

    LL = sum_{i=2}^{N} log lambda_{k_i}(t_i)  -  int_{t_1}^{t_N} sum_k lambda_k(t) dt.

What this computes, exactly:

* **Event term:** events 2..N; event j+1 is scored by lambda_{k_{j+1}} read from h_j at the exact elapsed time
  Delta_j = t_{j+1} - t_j (the same callable and state as the interval's integral), plus ``eps`` before the log.
  The first event is left out: with no state before it there is no intensity to score it, so LL is the
  log-density of events 2..N given the first, over [t_1, t_N] (no survival term after t_N: the window's end is not
  recorded).
* **Integral:** on each interval (t_j, t_{j+1}], the intensity from h_j summed over **all** K types, estimated on
  elapsed times s in [0, Delta_j] by :func:`quadrature` (below); no cap on Delta_j.
* **Normalisation:** N counts every real event, the first included, in both reporting conventions
  (:func:`reduce_ll`), as THP's ``total_num_event`` and PhysioPro's ``mask.sum()`` do.

How that differs from the two reference codes (read from their sources):

* **THP** (Zuo et al. 2020, ``Utils.log_likelihood``): the event term **keeps the first event**:
  ``compute_event`` takes the log of ``type_lambda`` at every non-pad position, and that intensity at event j is
  softplus(w_{k_j} . h_j) from the state h_j that has already seen event j, with no elapsed-time term. Its Monte
  Carlo integral (``compute_integral_unbiased``, 100 uniform samples per interval) on (t_j, t_{j+1}] reads
  ``model.linear(data)[:, 1:]``, i.e. **h_{j+1}**, the state after the interval's closing event, and keeps **only
  the next event's type** k_{j+1} (``type_mask[:, 1:]``), not the sum over all types; its elapsed time is divided
  by (t_j + 1). Ours: first event left out, event j+1 scored from h_j at Delta_j, integral from h_j over all
  types, elapsed time as the callable defines it (the point-process head does not divide by t_j + 1:
  :mod:`oscrepro.models.point_process`).
* **PhysioPro** (ContiFormer's TPP model, ``eventprediction.TPP.temporal_log_likelihood``): like ours, the first
  event is left out (``non_pad_mask[:, 1:]``), event j+1 is scored by lambda_{k_{j+1}} from h_j, and the integral
  sums all types from h_j. The differences are numerical: PhysioPro evaluates the intensity on a fixed grid of
  ``tmax * step_size`` elapsed times from 0 to ``tmax`` and reads the event term at grid index
  floor(Delta_j * step_size) (not at Delta_j), and its integral (``compute_integral_unbiased``, despite the name)
  is the mean of the first max(1, floor(Delta_j * step_size)) grid values times Delta_j, a left Riemann sum,
  with the count capped at the grid's ``tmax * step_size`` points. Ours reads the exact Delta_j and has no ``tmax``.

The integral is estimated per interval from elapsed times s in [0, Delta_j] (:func:`quadrature`):

* ``gauss``: n-node Gauss-Legendre on [0, Delta_j]; deterministic, exact for polynomials of degree 2n - 1;
* ``trapezoid``: n >= 2 equally spaced nodes, end points included; deterministic, error O(Delta^3 / n^2);
* ``mc``: n uniform samples per interval, Delta_j * mean_s lambda(t_j + s): unbiased Monte Carlo, as THP's
  ``compute_integral_unbiased`` estimates (100 samples there), but of our integrand (h_j, all types), not THP's.

The event term reads the same callable at s = Delta_j (the right end, history <= j), so an intensity and its
integral can never disagree on which state they use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

ESTIMATORS = ("gauss", "trapezoid", "mc")
CONVENTIONS = ("sequence_mean", "event_mean")
EPS = 1e-9  # added to lambda at an event before the log, as THP / PhysioPro ``compute_event`` (1e-9)

IntensityFn = Callable[[Tensor], Tensor]  # elapsed s (B, T-1, S) since t_j -> lambda (B, T-1, S, K) on interval j


class LogLikelihood(NamedTuple):
    """Per-sequence parts of LL: ``event`` (B,) the sum of log-intensities at events 2..N, ``integral`` (B,) the
    estimated compensator over [t_1, t_N], ``n_events`` (B,) real events N (first included)."""

    event: Tensor
    integral: Tensor
    n_events: Tensor

    @property
    def total(self) -> Tensor:
        """LL per sequence (B,)."""
        return self.event - self.integral


def quadrature(gaps: Tensor, estimator: str, n_nodes: int, generator: torch.Generator | None = None
               ) -> tuple[Tensor, Tensor]:
    """Nodes s (B, T-1, S) in [0, gap] and weights w (B, T-1, S) with int_0^gap f(s) ds ~ sum_s w f(s), for
    interval lengths ``gaps`` (B, T-1). ``mc`` draws its uniforms from ``generator`` (default: torch's global)."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator={estimator!r}; valid: {', '.join(ESTIMATORS)}")
    if n_nodes < (2 if estimator == "trapezoid" else 1):
        raise ValueError(f"{estimator} needs n_nodes >= {2 if estimator == 'trapezoid' else 1}, got {n_nodes}")
    kw = {"dtype": gaps.dtype, "device": gaps.device}
    if estimator == "gauss":
        x, w = np.polynomial.legendre.leggauss(n_nodes)  # nodes / weights on [-1, 1]
        u, w = (torch.as_tensor(x, **kw) + 1) / 2, torch.as_tensor(w, **kw) / 2  # (S,) on [0, 1], sum w = 1
    elif estimator == "trapezoid":
        u = torch.linspace(0.0, 1.0, n_nodes, **kw)  # (S,)
        w = torch.full((n_nodes,), 1.0 / (n_nodes - 1), **kw)
        w[0] = w[-1] = 0.5 / (n_nodes - 1)
    else:
        u = torch.rand(*gaps.shape, n_nodes, generator=generator, **kw)  # (B, T-1, S) on gaps' device
        return gaps[..., None] * u, (gaps / n_nodes)[..., None].expand_as(u)
    return gaps[..., None] * u, gaps[..., None] * w  # (B, T-1, S) each


def log_likelihood(intensity_fn: IntensityFn, times: Tensor, types: Tensor, mask: Tensor, estimator: str = "gauss",
                   n_nodes: int = 16, generator: torch.Generator | None = None, eps: float = EPS) -> LogLikelihood:
    """LL of each right-padded sequence (module docstring) under ``intensity_fn``.

    times (B, T) non-decreasing, types (B, T) int64 in 0..K-1, mask (B, T) bool, a prefix per row. Interval j
    (0 <= j < T-1) is (t_j, t_{j+1}], real iff event j+1 is; ``intensity_fn`` receives elapsed times
    (B, T-1, S + 1): the estimator's S nodes, then Delta_j, and returns (B, T-1, S + 1, K). Padded intervals get
    weight 0 and log 1, so padding changes nothing (values nor gradients). ``eps`` is added to lambda at each
    event before the log (:data:`EPS`; 0 for the exact value).
    """
    real = mask[:, 1:]  # (B, T-1) interval j ends at real event j+1
    gaps = torch.where(real, times[:, 1:] - times[:, :-1], times.new_zeros(()))  # (B, T-1)
    nodes, weights = quadrature(gaps, estimator, n_nodes, generator)  # (B, T-1, S) each
    lam = intensity_fn(torch.cat([nodes, gaps[..., None]], dim=-1))  # (B, T-1, S + 1, K)
    integral = (weights * lam[..., :-1, :].sum(dim=-1)).sum(dim=(1, 2))  # (B,) sum over k, nodes, intervals
    at_event = lam[..., -1, :].gather(-1, types[:, 1:, None]).squeeze(-1)  # (B, T-1) lambda_{k_{j+1}}(t_{j+1})
    log_at = torch.where(real, (at_event + eps).log(), at_event.new_zeros(()))  # (B, T-1)
    return LogLikelihood(log_at.sum(dim=1), integral, mask.sum(dim=1))


def reduce_ll(ll: Tensor, n_events: Tensor, convention: str) -> Tensor:
    """Pool per-sequence LL (N,) over sequences with N_b events each (N,) into one number.

    ``sequence_mean``: mean_b LL_b / N_b, ContiFormer's (PhysioPro's ``ll`` metric: ``loglikelihood / mask.sum``
    per sequence, then the mean over the split's sequences). ``event_mean``: sum_b LL_b / sum_b N_b, THP's
    (``total_event_ll / total_num_event``). They agree when every sequence has the same N.
    """
    n = n_events.to(ll.dtype)
    if convention == "sequence_mean":
        return (ll / n.clamp(min=1)).mean()
    if convention == "event_mean":
        return ll.sum() / n.sum().clamp(min=1)
    raise ValueError(f"convention={convention!r}; valid: {', '.join(CONVENTIONS)}")
