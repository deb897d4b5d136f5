"""The TPP log-likelihood (oscrepro.tasks.tpp_likelihood) against a multivariate exponential-kernel Hawkes
process simulated here by Ogata thinning, whose log-likelihood is written out in closed form independently.

Hawkes process (alpha = branching ratios, the tick "adjacency"; alpha[k, l]: events of type k caused per type-l
event): lambda_k(t) = mu_k + sum_{t_j < t} alpha[k, k_j] beta exp(-beta (t - t_j)), simulated on [0, t_end] from an
empty history. The estimator's range is [t_1, t_N] with the first event unscored (the module's convention), so
the closed form is the conditional LL of events 2..N given the first:

    LL = sum_{i=2}^{N} log(mu_{k_i} + sum_{j<i} alpha[k_i, k_j] beta e^{-beta (t_i - t_j)})
         - sum_k [ mu_k (t_N - t_1) + sum_{j<N} alpha[k, k_j] (1 - e^{-beta (t_N - t_j)}) ].
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from oscrepro.models.point_process import PointProcessOutput
from oscrepro.tasks.point_process import PointProcessTask
from oscrepro.tasks.tpp_likelihood import log_likelihood, quadrature, reduce_ll

MU = np.array([0.5, 0.3])
ALPHA = np.array([[0.4, 0.2], [0.3, 0.3]])  # spectral radius 0.6 < 1: stationary, rates (I - alpha)^-1 mu ~ (1.1, 0.9)
BETA = 1.5


def simulate_hawkes(mu: np.ndarray, alpha: np.ndarray, beta: float, t_end: float, rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Ogata thinning: between events the intensity only decays, so its value just after the current time bounds
    it until the next candidate. Returns times (N,), types (N,)."""
    times, types = [], []
    t, excite = 0.0, np.zeros(len(mu))  # excite_k = sum_j alpha[k, k_j] beta e^{-beta (t - t_j)} at time t
    while True:
        bound = float((mu + excite).sum())
        w = rng.exponential(1.0 / bound)
        t, excite = t + w, excite * math.exp(-beta * w)
        if t > t_end:
            return np.array(times), np.array(types, dtype=np.int64)
        lam = mu + excite
        if rng.uniform() * bound <= lam.sum():  # accept with probability lambda(t) / bound
            k = int(rng.choice(len(mu), p=lam / lam.sum()))
            times.append(t)
            types.append(k)
            excite = excite + alpha[:, k] * beta


def closed_form_ll(times: np.ndarray, types: np.ndarray, mu: np.ndarray, alpha: np.ndarray, beta: float) -> float:
    """The module docstring's LL, by direct double sums (no recursion shared with the code under test)."""
    n = len(times)
    event = 0.0
    for i in range(1, n):
        past = np.arange(i)
        event += math.log(mu[types[i]] + (alpha[types[i], types[past]] * beta
                                          * np.exp(-beta * (times[i] - times[past]))).sum())
    integral = mu.sum() * (times[-1] - times[0])
    for j in range(n):
        integral += alpha[:, types[j]].sum() * (1 - math.exp(-beta * (times[-1] - times[j])))
    return event - integral


def pad_batch(seqs: list[tuple[np.ndarray, np.ndarray]], extra: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Right-pad like the event data module (times repeat the last time), with ``extra`` more pad columns; pad
    types are garbage (type 1) on purpose. float64 times."""
    width = max(len(t) for t, _ in seqs) + extra
    times = torch.zeros(len(seqs), width, dtype=torch.float64)
    types = torch.ones(len(seqs), width, dtype=torch.int64)
    mask = torch.zeros(len(seqs), width, dtype=torch.bool)
    for b, (t, k) in enumerate(seqs):
        times[b, : len(t)], times[b, len(t):] = torch.from_numpy(t), float(t[-1])
        types[b, : len(t)], mask[b, : len(t)] = torch.from_numpy(k), True
    return times, types, mask


def hawkes_intensity(times: Tensor, types: Tensor, mu: np.ndarray, alpha: np.ndarray, beta: float):
    """The true intensity as the likelihood's callable: on interval j, lambda(t_j + s) = mu + G_j e^{-beta s},
    G_j = sum_{m <= j} alpha[:, k_m] beta e^{-beta (t_j - t_m)} by the recursion G_j = G_{j-1} e^{-beta gap} + jump."""
    a = torch.as_tensor(alpha, dtype=torch.float64)
    jumps = beta * a[:, types].permute(1, 2, 0)  # (B, T, K): alpha[:, k_m] beta
    g = [jumps[:, 0]]
    for j in range(1, times.shape[1]):
        g.append(g[-1] * torch.exp(-beta * (times[:, j] - times[:, j - 1]))[:, None] + jumps[:, j])
    excite = torch.stack(g[:-1], dim=1)  # (B, T-1, K) just after t_j, intervals 0..T-2
    mu_t = torch.as_tensor(mu, dtype=torch.float64)
    return lambda s: mu_t + excite[:, :, None, :] * torch.exp(-beta * s)[..., None]  # (B, T-1, S, K)


def sequences(n: int, t_end: float, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = [simulate_hawkes(MU, ALPHA, BETA, t_end, rng) for _ in range(n)]
    assert all(len(t) >= 2 for t, _ in out)
    return out


def batch_ll(seqs, estimator: str, n_nodes: int, mu=MU, alpha=ALPHA, beta=BETA, extra: int = 0,
             generator: torch.Generator | None = None) -> Tensor:
    """LL per sequence under the Hawkes intensity with these parameters, exact log (eps = 0)."""
    times, types, mask = pad_batch(seqs, extra)
    fn = hawkes_intensity(times, types, mu, alpha, beta)
    return log_likelihood(fn, times, types, mask, estimator, n_nodes, generator, eps=0.0).total


@pytest.mark.parametrize(("estimator", "n_nodes", "tol"), [("gauss", 16, 1e-12), ("trapezoid", 400, 1e-5)])
def test_deterministic_estimators_match_closed_form(estimator: str, n_nodes: int, tol: float) -> None:
    seqs = sequences(4, 40.0, seed=0)
    exact = np.array([closed_form_ll(t, k, MU, ALPHA, BETA) for t, k in seqs])
    got = batch_ll(seqs, estimator, n_nodes).numpy()
    assert np.abs(got - exact).max() < tol * np.abs(exact).max()
    if estimator == "trapezoid":  # O(1/n^2): quartering the nodes' spacing cuts the error ~16x
        coarse = batch_ll(seqs, estimator, n_nodes // 4).numpy()
        assert np.abs(coarse - exact).max() > 8 * np.abs(got - exact).max()


def test_monte_carlo_is_unbiased_within_four_standard_errors() -> None:
    seqs = sequences(3, 40.0, seed=1)
    exact = np.array([closed_form_ll(t, k, MU, ALPHA, BETA) for t, k in seqs])
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([batch_ll(seqs, "mc", 8, generator=g) for _ in range(40)]).numpy()  # (R, B)
    se = draws.std(axis=0, ddof=1) / math.sqrt(len(draws))
    assert (se > 0).all()  # it is random
    assert (np.abs(draws.mean(axis=0) - exact) < 4 * se).all()
    assert (np.abs(draws - exact) > 1e-6).any()


@pytest.mark.parametrize(("name", "mu", "alpha", "beta"), [
    ("mu x 1.5", MU * 1.5, ALPHA, BETA), ("mu x 0.6", MU * 0.6, ALPHA, BETA),
    ("alpha x 0.5", MU, ALPHA * 0.5, BETA), ("alpha transposed", MU, ALPHA.T, BETA),
    ("beta x 2", MU, ALPHA, BETA * 2), ("beta x 0.5", MU, ALPHA, BETA * 0.5),
])
def test_perturbed_parameters_score_lower_on_long_sequences(name, mu, alpha, beta) -> None:
    seqs = sequences(2, 600.0, seed=2)  # ~1,200 events each
    truth = batch_ll(seqs, "gauss", 16).sum()
    assert batch_ll(seqs, "gauss", 16, mu, alpha, beta).sum() < truth - 5.0, name


@pytest.mark.parametrize("estimator", ["gauss", "trapezoid"])
def test_padding_changes_nothing(estimator: str) -> None:
    seqs = sequences(3, 15.0, seed=3)
    alone = torch.cat([batch_ll([s], estimator, 8) for s in seqs])
    together = batch_ll(seqs, estimator, 8, extra=5)  # shorter rows padded, and 5 extra pad columns for all
    torch.testing.assert_close(together, alone, rtol=0, atol=1e-12)


def test_quadrature_weights_integrate_polynomials() -> None:
    gaps = torch.tensor([[0.5, 2.0, 0.0]], dtype=torch.float64)  # (B, T-1), a zero-length (padded) interval
    for estimator, n, degree in (("gauss", 4, 7), ("trapezoid", 2, 1)):
        nodes, w = quadrature(gaps, estimator, n)
        torch.testing.assert_close((w * nodes**degree).sum(-1), gaps ** (degree + 1) / (degree + 1))
    with pytest.raises(ValueError, match="valid: gauss, trapezoid, mc"):
        quadrature(gaps, "simpson", 4)


def test_conventions_differ_as_defined() -> None:
    ll, n = torch.tensor([-6.0, -1.0]), torch.tensor([3, 2])
    assert float(reduce_ll(ll, n, "sequence_mean")) == pytest.approx((-6 / 3 + -1 / 2) / 2)  # -1.25
    assert float(reduce_ll(ll, n, "event_mean")) == pytest.approx(-7 / 5)  # -1.4
    same = torch.tensor([4, 4])
    assert float(reduce_ll(ll, same, "sequence_mean")) == pytest.approx(float(reduce_ll(ll, same, "event_mean")))


class ConstantTPP(nn.Module):
    """Stub model: lambda_k = rate_k everywhere, fixed next-event predictions."""

    def __init__(self, rates: list[float]) -> None:
        super().__init__()
        self.rates = torch.tensor(rates)
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, x: Tensor, need_weights: bool = False, *, times: Tensor, mask: Tensor):
        b, t, k = x.shape
        logits = torch.zeros(b, t, k) + torch.arange(k)  # always predicts the last type
        return PointProcessOutput(torch.zeros(b, t, 1), logits, torch.ones(b, t)), []

    def intensity(self, hidden: Tensor, elapsed: Tensor) -> Tensor:
        return self.rates.expand(*elapsed.shape, len(self.rates))


def test_task_logs_both_conventions_on_a_hand_case() -> None:
    """Rows: 3 events (types 0, 1, 1 at 0, 1, 3) and 2 events (types 1, 0 at 0, 2), lambda = (0.5, 2)."""
    times = torch.tensor([[0.0, 1.0, 3.0], [0.0, 2.0, 2.0]])
    types = torch.tensor([[0, 1, 1], [1, 0, 0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    x = torch.nn.functional.one_hot(types, 2).float() * mask[..., None]
    task = PointProcessTask(ConstantTPP([0.5, 2.0]), optimizer=partial(torch.optim.SGD, lr=0.1),
                            eval_estimator="trapezoid", eval_n_nodes=2)
    logged: dict[str, float] = {}
    task.log_dict = lambda d, **kw: logged.update({k: float(v) for k, v in d.items()})
    task.test_step((x, types, {"times": times, "mask": mask}), 0)
    task.on_test_epoch_end()
    ll_a = 2 * math.log(2.0) - 2.5 * 3  # events 2, 3 of type 1; compensator 2.5 x (3 - 0)
    ll_b = math.log(0.5) - 2.5 * 2
    assert logged["test/ll_seq"] == pytest.approx((ll_a / 3 + ll_b / 2) / 2)
    assert logged["test/ll_event"] == pytest.approx((ll_a + ll_b) / 5)
    assert logged["test/ll"] == logged["test/ll_seq"]  # the default convention
    assert logged["test/acc"] == pytest.approx(2 / 3)  # predicts type 1: right, right, wrong
    assert logged["test/rmse"] == pytest.approx(math.sqrt((0 + 1 + 1) / 3))  # gaps 1, 2, 2 vs predicted 1
