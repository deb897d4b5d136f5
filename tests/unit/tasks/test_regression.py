"""RegressionTask: masked MSE equals a hand computation, padded targets carry no value and no gradient, the epoch
metrics pool every real target, and a tiny continuous-time regressor fits."""

from __future__ import annotations

import math
from functools import partial

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from oscrepro.attention.softmax import SoftmaxAttention
from oscrepro.models.continuous_time import ContinuousTimeRegressor
from oscrepro.tasks.regression import RegressionTask, masked_squared_error

B, T, K = 4, 5, 3


def _regressor(seed: int = 0) -> ContinuousTimeRegressor:
    torch.manual_seed(seed)
    return ContinuousTimeRegressor(n_out=1, n_features=2, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                                   attention=partial(SoftmaxAttention), time_embedding="sinusoidal")


def _batch(seed: int, target_mask: torch.Tensor | None = None) -> tuple:
    """Observations (a, noise) of a per-sequence level a; the targets are a at K later times."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(B, 1, 1, generator=g)
    x = torch.cat([a.expand(B, T, 1), 0.1 * torch.randn(B, T, 1, generator=g)], dim=-1)  # (B, T, 2)
    times = torch.rand(B, T, generator=g).cumsum(dim=1)  # (B, T)
    target_times = times[:, -1:] + torch.arange(1, K + 1)  # (B, K)
    meta = {"times": times, "mask": torch.ones(B, T, dtype=torch.bool), "target_times": target_times}
    if target_mask is not None:
        meta["target_mask"] = target_mask
    return x, a.expand(B, K, 1).clone(), meta


def test_masked_mse_equals_hand_computation() -> None:
    pred = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[0.0, 1.0], [5.0, -1.0]]])  # (B=2, K=2, C=2)
    y = torch.tensor([[[0.0, 0.0], [1.0, 1.0]], [[1.0, 1.0], [9.0, 9.0]]])
    mask = torch.tensor([[True, True], [True, False]])
    sse, n = masked_squared_error(pred, y, mask)
    # real targets: (1, 4) + (4, 9) + (1, 0) -> 19 over 6 scalars; (0, 1, 1) row 1 target 1 is a pad
    assert float(sse) == 19.0 and int(n) == 6
    task = RegressionTask(torch.nn.Identity(), optimizer=partial(torch.optim.SGD, lr=0.1))
    task.predict = lambda batch, need_weights=False: (pred, [])
    assert float(task.loss((None, y, {"target_mask": mask}))) == pytest.approx(19.0 / 6)
    assert float(task.loss((None, y))) == pytest.approx((19.0 + 16 + 100) / 8)  # no mask: every target


def test_padded_targets_carry_no_value_and_no_gradient() -> None:
    pred = torch.randn(2, 3, 1, requires_grad=True)
    y = torch.randn(2, 3, 1)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    y_nan = y.masked_fill(~mask[..., None], float("nan"))  # garbage in the pads
    sse, n = masked_squared_error(pred, y_nan, mask)
    sse.backward()
    assert torch.isfinite(sse) and int(n) == 3
    assert torch.all(pred.grad[~mask] == 0) and torch.all(pred.grad[mask] != 0)
    torch.testing.assert_close(sse, ((pred - y)[mask] ** 2).sum())


@pytest.mark.filterwarnings("ignore:.*does not have many workers")
def test_validation_logs_pooled_mse_rmse_and_loss() -> None:
    task = RegressionTask(_regressor(), optimizer=partial(torch.optim.AdamW))
    batches = [_batch(1), _batch(2, torch.tensor([[True, False, False]] * B))]
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu")
    got = trainer.validate(task, dataloaders=DataLoader(batches, batch_size=None), verbose=False)[0]
    with torch.no_grad():
        sums = [masked_squared_error(task.predict(b)[0], b[1], b[2].get("target_mask")) for b in batches]
    mse = sum(float(s) for s, _ in sums) / sum(int(n) for _, n in sums)  # pooled over targets, not batch means
    assert got["val/mse"] == pytest.approx(mse, rel=1e-5) and got["val/loss"] == got["val/mse"]
    assert got["val/rmse"] == pytest.approx(math.sqrt(mse), rel=1e-5)


def test_tiny_regression_fit_decreases_the_loss() -> None:
    task = RegressionTask(_regressor(), optimizer=partial(torch.optim.AdamW, lr=3e-3))
    opt = task.configure_optimizers()
    batches = [_batch(s) for s in range(4)]
    with torch.no_grad():
        before = sum(float(task.loss(b)) for b in batches) / len(batches)
    for step in range(120):
        loss = task.loss(batches[step % len(batches)])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        after = sum(float(task.loss(b)) for b in batches) / len(batches)
    assert after < 0.3 * before, (before, after)
