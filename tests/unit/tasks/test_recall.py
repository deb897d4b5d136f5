"""RecallTask (MQAR, coupledqk Sec. 3.3): loss and accuracy count only the labelled (queried) positions."""

from __future__ import annotations

from functools import partial

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.data.mqar import MQARDataModule
from oscrepro.tasks.recall import RecallTask

V, N_PAIRS = 64, 4


class LookupModel(nn.Module):
    """Predicts, at every position whose token is a key of the context, the value paired with it (``shift`` adds
    an offset to that value: 0 = always right); elsewhere ``noise``-scaled random logits."""

    def __init__(self, shift: int = 0, noise: float = 0.0) -> None:
        super().__init__()
        self.shift, self.noise = shift, noise
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, x: Tensor) -> tuple[Tensor, list]:
        b, t = x.shape
        logits = self.noise * torch.randn(b, t, V) + self.dummy  # (B, T, V)
        for i in range(b):
            pairs = {int(x[i, 2 * j]): int(x[i, 2 * j + 1]) for j in range(N_PAIRS)}
            for pos in range(2 * N_PAIRS, t):
                if int(x[i, pos]) in pairs:
                    logits[i, pos, :] = 0.0
                    logits[i, pos, V // 2 + (pairs[int(x[i, pos])] - V // 2 + self.shift) % (V // 2)] = 10.0
        return logits, []


def _task(model: nn.Module) -> RecallTask:
    return RecallTask(model=model, optimizer=partial(torch.optim.AdamW, lr=1e-3))


def _batches() -> list[tuple[Tensor, Tensor]]:
    dm = MQARDataModule(n_train=8, n_test=24, seq_len=32, n_kv_pairs=N_PAIRS, batch_size=8, seed=3)
    dm.setup("fit")
    return list(dm.val_dataloader())


def _validate(task: RecallTask, monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    logged: dict[str, float] = {}
    monkeypatch.setattr(task, "log_dict", lambda metrics, **_: logged.update(metrics))
    for k, batch in enumerate(_batches()):
        task.validation_step(batch, k)
    task.on_validation_epoch_end()
    return logged


@pytest.mark.parametrize(("shift", "acc"), [(0, 1.0), (1, 0.0)])
def test_accuracy_counts_exact_values_at_queries(shift: int, acc: float, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    logged = _validate(_task(LookupModel(shift=shift, noise=5.0)), monkeypatch)
    assert set(logged) == {"val/loss", "val/acc"} and logged["val/acc"] == acc
    assert (logged["val/loss"] < 0.01) if shift == 0 else (logged["val/loss"] > 9.0)  # CE = log(1 + 63 e^-10) or ~10


def test_loss_ignores_unlabelled_positions() -> None:
    x, y = _batches()[0]
    torch.manual_seed(0)
    task = _task(LookupModel(noise=3.0))
    loss = task.loss((x, y))
    torch.manual_seed(0)
    logits, _ = task.model(x)
    mask = y != -100
    assert torch.allclose(loss, F.cross_entropy(logits[mask], y[mask]))  # mean over the 4 x 8 queried positions
    torch.manual_seed(1)  # other noise: the unlabelled positions change, the labelled ones do not
    assert torch.allclose(task.loss((x, y)), loss)
    assert torch.allclose(_task(LookupModel(noise=0.0)).loss((x, y)), loss)


def test_trainer_validate_reports_val_acc(monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end through Lightning: the flushed metrics reach ``callback_metrics``."""
    dm = MQARDataModule(n_train=8, n_test=16, seq_len=32, n_kv_pairs=N_PAIRS, batch_size=8, seed=3)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.validate(_task(LookupModel()), datamodule=dm, verbose=False)
    assert float(trainer.callback_metrics["val/acc"]) == 1.0 and "val/loss" in trainer.callback_metrics
