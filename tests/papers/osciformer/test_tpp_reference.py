"""History-free TPP reference (oscrepro.papers.osciformer.tpp_reference): MLE rates, and its LL / accuracy /
RMSE against a hand computation of the homogeneous Poisson likelihood on a small right-padded case."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from oscrepro.papers.osciformer.tpp_reference import history_free_reference, poisson_rates

# two rows of 4 and 3 events (right-padded), 2 types; times from each row's start
TIMES = np.array([[0.0, 1.0, 1.5, 4.0], [0.0, 2.0, 3.0, 3.0]])
TYPES = np.array([[0, 1, 1, 0], [1, 0, 0, 0]])
MASK = np.array([[True, True, True, True], [True, True, True, False]])


def _dm(times=TIMES, types=TYPES, mask=MASK) -> SimpleNamespace:
    arrays = SimpleNamespace(times=times, types=types, mask=mask)
    split = SimpleNamespace(arrays=arrays)
    return SimpleNamespace(num_types=2, splits={"train": split, "val": split, "test": split})


def test_rates_are_scored_counts_over_scored_time() -> None:
    import torch

    rates = poisson_rates(torch.tensor(TIMES), torch.tensor(TYPES), torch.tensor(MASK), 2)
    # scored events (2..N): row 0 types 1, 1, 0 over [0, 4]; row 1 types 0, 0 over [0, 3]
    assert rates.tolist() == pytest.approx([3 / 7, 2 / 7])


def test_scores_equal_the_hand_computed_poisson_likelihood() -> None:
    lam = np.array([3 / 7, 2 / 7])
    ll0 = math.log(lam[1]) * 2 + math.log(lam[0]) - lam.sum() * 4.0
    ll1 = math.log(lam[0]) * 2 - lam.sum() * 3.0
    r = history_free_reference(_dm())
    assert r["ll_seq"] == pytest.approx((ll0 / 4 + ll1 / 3) / 2, rel=1e-12)
    assert r["ll_event"] == pytest.approx((ll0 + ll1) / 7, rel=1e-12)
    assert r["acc"] == pytest.approx(3 / 5)  # majority scored type is 0: three of the five scored events
    gaps = np.array([1.0, 0.5, 2.5, 2.0, 1.0])
    assert r["rmse"] == pytest.approx(math.sqrt(((gaps - gaps.mean()) ** 2).mean()), rel=1e-12)


def test_history_free_reference_is_the_best_constant_rate() -> None:
    """The MLE rates maximise the train LL: scaling them either way scores lower (here train = test)."""
    import torch

    from oscrepro.tasks.tpp_likelihood import log_likelihood

    t, y, m = torch.tensor(TIMES), torch.tensor(TYPES), torch.tensor(MASK)
    rates = poisson_rates(t, y, m, 2)

    def total(scale: float) -> float:
        return float(log_likelihood(lambda s: (rates * scale).expand(*s.shape, 2), t, y, m, "gauss", 1,
                                    eps=0.0).total.sum())

    assert total(1.0) > total(1.1) and total(1.0) > total(0.9)
