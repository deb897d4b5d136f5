"""The point-process head and ContinuousTimeTPP: shapes, causality by gradient (everything read at event j,
intensities included, depends on events <= j only), positive intensities, padding-invariant LL through the real
model, and a few optimizer steps raise the likelihood of Poisson data."""

from __future__ import annotations

from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from oscrepro.attention.osciformer import OsciFormerAttention
from oscrepro.attention.softmax import SoftmaxAttention
from oscrepro.models.point_process import ContinuousTimeTPP, PointProcessHead
from oscrepro.tasks.point_process import PointProcessTask

B, T, K, D = 2, 6, 3, 8
MECHANISMS = {"softmax": partial(SoftmaxAttention), "osciformer": partial(OsciFormerAttention, n_modes=4)}


def _model(mech: str = "softmax", seed: int = 0, **kw) -> ContinuousTimeTPP:
    torch.manual_seed(seed)
    return ContinuousTimeTPP(n_features=K, d_model=D, n_heads=2, n_layers=2, d_ff=16, attention=MECHANISMS[mech],
                             **kw)


def _events(seed: int = 0, b: int = B, t: int = T) -> tuple[Tensor, Tensor, Tensor]:
    """One-hot x (B, T, K), types (B, T), increasing times (B, T)."""
    g = torch.Generator().manual_seed(seed)
    types = torch.randint(0, K, (b, t), generator=g)
    times = (torch.rand(b, t, generator=g) + 0.05).cumsum(dim=1)
    return F.one_hot(types, K).float(), types, times


def test_shapes_and_positive_intensities() -> None:
    model = _model()
    x, _, times = _events()
    out, auxes = model(x, times=times)
    assert out.hidden.shape == (B, T, D) and out.type_logits.shape == (B, T, K) and out.gap.shape == (B, T)
    assert len(auxes) == 2
    elapsed = torch.linspace(0, 50, 11).expand(B, T, 11)  # (B, T, S)
    lam = model.intensity(out.hidden, elapsed)
    assert lam.shape == (B, T, 11, K)
    assert (lam > 0).all() and torch.isfinite(lam.log()).all()


def test_softplus_temperature_and_slope() -> None:
    """lambda_k = log(1 + exp(beta_k (w_k h + b_k + alpha_k s))) / beta_k, per type."""
    head = PointProcessHead(d_model=4, n_types=2, alpha_init=-0.3, beta_init=2.0)
    h = torch.randn(1, 3, 4)
    s = torch.rand(1, 3, 5) * 4
    pre = head.intensity_linear(h)[:, :, None, :] - 0.3 * s[..., None]  # (1, 3, 5, 2)
    torch.testing.assert_close(head.intensity(h, s), torch.log1p(torch.exp(2.0 * pre)) / 2.0)
    assert (head.alpha.detach() == -0.3).all() and torch.allclose(head.log_beta.exp(), torch.tensor(2.0))
    with pytest.raises(ValueError, match="temperature"):
        PointProcessHead(4, 2, beta_init=0.0)


@pytest.mark.parametrize("mech", list(MECHANISMS))
def test_head_at_event_j_depends_on_events_up_to_j_only(mech: str) -> None:
    model = _model(mech, time_embedding="sinusoidal" if mech == "softmax" else "none")  # times reach both
    x, _, times = _events(seed=1)
    x.requires_grad_(True)
    times = times.clone().requires_grad_(True)
    out, _ = model(x, times=times)
    lam = model.intensity(out.hidden, torch.full((B, T, 2), 0.7))  # (B, T, 2, K)
    for j in range(T):
        probe = lam[:, j].sum() + out.type_logits[:, j].sum() + out.gap[:, j].sum()
        gx, gt = torch.autograd.grad(probe, (x, times), retain_graph=True)
        assert not gx[:, j + 1:].any() and not gt[:, j + 1:].any(), f"event {j} sees the future"
        assert gx[:, j].abs().max() > 0  # and it does read its own event


@pytest.mark.parametrize("mech", list(MECHANISMS))
def test_padding_changes_neither_ll_nor_predictions(mech: str) -> None:
    model = _model(mech).eval()
    task = PointProcessTask(model, optimizer=partial(torch.optim.SGD, lr=0.1), eval_estimator="gauss",
                            eval_n_nodes=8)
    x, types, times = _events(seed=2, b=1)
    mask = torch.ones(1, T, dtype=torch.bool)
    pad = 3
    xp = torch.cat([x, torch.zeros(1, pad, K)], dim=1)  # the data module's padding: zero one-hot rows
    tp = torch.cat([times, times[:, -1:].expand(1, pad)], dim=1)  # times repeat the last one
    kp = torch.cat([types, torch.zeros(1, pad, dtype=torch.long)], dim=1)
    mp = torch.arange(T + pad)[None] < T
    with torch.no_grad():
        ll, terms = task.score((x, types, {"times": times, "mask": mask}), "gauss", 8)
        llp, termsp = task.score((xp, kp, {"times": tp, "mask": mp}), "gauss", 8)
    torch.testing.assert_close(llp.total, ll.total, rtol=1e-5, atol=1e-5)
    assert int(llp.n_events) == T and int(termsp.n) == T - 1
    for a, b in zip(terms, termsp, strict=True):
        torch.testing.assert_close(a.float(), b.float(), rtol=1e-5, atol=1e-5)


def test_task_scores_each_event_from_the_state_before_it() -> None:
    """The loss reads h_j only for interval (t_j, t_{j+1}] and event j+1, never h_{j+1}: the last event's input
    (whose state predicts nothing) gets no gradient, the one before it does."""
    model = _model(time_embedding="sinusoidal")
    task = PointProcessTask(model, optimizer=partial(torch.optim.SGD, lr=0.1), estimator="gauss", n_nodes=4)
    x, types, times = _events(seed=3)
    x.requires_grad_(True)
    task.loss((x, types, {"times": times, "mask": torch.ones(B, T, dtype=torch.bool)})).backward()
    assert not x.grad[:, -1].any() and x.grad[:, -2].abs().max() > 0


def test_a_few_steps_raise_the_likelihood_of_poisson_data() -> None:
    """Two types at rates 2 and 0.5 (independent Poisson): 40 Adam steps on the multitask loss raise the LL."""
    g = torch.Generator().manual_seed(0)
    n, length = 16, 12
    gaps = torch.distributions.Exponential(torch.tensor(2.5)).sample((n, length))
    times = gaps.cumsum(dim=1) - gaps[:, :1]
    types = (torch.rand(n, length, generator=g) < 0.2).long()  # type 1 with probability 0.5 / 2.5
    batch = (F.one_hot(types, 2).float(), types, {"times": times, "mask": torch.ones(n, length, dtype=torch.bool)})
    torch.manual_seed(0)
    model = ContinuousTimeTPP(n_features=2, d_model=8, n_heads=2, n_layers=1, d_ff=16,
                              attention=partial(SoftmaxAttention), time_embedding="sinusoidal")
    task = PointProcessTask(model, optimizer=partial(torch.optim.Adam, lr=1e-2), n_nodes=20)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def ll() -> float:
        with torch.no_grad():
            return float(task.score(batch, "gauss", 16)[0].total.sum())

    before = ll()
    for _ in range(40):
        opt.zero_grad()
        task.loss(batch).backward()
        opt.step()
    assert ll() > before + 0.1 * n * length  # at least 0.1 nat per event
