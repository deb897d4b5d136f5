"""FineTuneTask (oscrepro.tasks.finetune): batches (x, y, lengths) reach the model with their lengths, val/acc and
val/loss are exact on a hand case (accumulated over uneven batches), the BERT warmup-then-decay schedule, and a
few optimizer steps on a tiny problem that only last-real-token pooling can solve reduce the loss."""

from __future__ import annotations

import math
from functools import partial

import lightning as L
import pytest
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from oscrepro.attention.softmax import SoftmaxAttention
from oscrepro.models.gpt import GPTLM
from oscrepro.models.sequence_classifier import SequenceClassifier
from oscrepro.tasks.finetune import FineTuneTask, warmup_linear

V = 12


def _trainer(**kw: object) -> L.Trainer:
    return L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                     enable_checkpointing=False, **kw)


class LastTokenVotes(nn.Module):
    """Predicts the class whose id is the token at position lengths - 1, with logit 2 (others 0)."""

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.n_classes, self.unused = n_classes, nn.Parameter(torch.zeros(()))

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, list]:
        last = x[torch.arange(len(x)), lengths - 1]  # (B,)
        return 2.0 * nn.functional.one_hot(last, self.n_classes).float(), []  # (B, C)


def test_accuracy_and_loss_on_a_hand_case() -> None:
    # last real tokens 0, 1, 0 | 2 (the padding after them says otherwise) against labels 0, 1, 1 | 2
    x = torch.tensor([[5, 0, 2], [1, 2, 2], [0, 1, 1], [2, 0, 0]])
    lengths = torch.tensor([2, 1, 1, 1])
    y = torch.tensor([0, 1, 1, 2])
    loader = DataLoader(TensorDataset(x, y, lengths), batch_size=3)  # uneven batches: 3 + 1
    task = FineTuneTask(LastTokenVotes(3), optimizer=partial(torch.optim.AdamW, lr=1e-3))
    val = _trainer().validate(task, loader, verbose=False)[0]
    right, wrong = math.log(1 + 2 * math.exp(-2)), math.log(2 + math.exp(2))  # CE of logits (2, 0, 0)
    assert math.isclose(val["val/acc"], 0.75, abs_tol=1e-6)
    assert math.isclose(val["val/loss"], (3 * right + wrong) / 4, rel_tol=1e-5)
    test = _trainer().test(task, loader, verbose=False)[0]
    assert set(test) == {"test/acc", "test/loss"} and math.isclose(test["test/acc"], 0.75, abs_tol=1e-6)


def test_warmup_then_linear_decay() -> None:
    lr = [warmup_linear(s, 2, 10) for s in range(11)]
    assert lr[:3] == [0.5, 1.0, 1.0] and lr[-1] == 0.0
    assert all(a >= b for a, b in zip(lr[1:], lr[2:], strict=False))


class LrLog(L.Callback):
    """The lr each optimizer step used."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        self.seen.append(trainer.optimizers[0].param_groups[0]["lr"])


def _separable(n: int, gen: torch.Generator) -> TensorDataset:
    """Class = the last real token (1 or 2, which no earlier token is); the padding after it is random 1s and 2s,
    so reading any later position (or attending to 1s and 2s anywhere) does not tell the class."""
    lengths = torch.randint(2, 9, (n,), generator=gen)
    x = torch.randint(3, V, (n, 8), generator=gen)
    pad = torch.arange(8) >= lengths[:, None]  # (B, T)
    x[pad] = torch.randint(1, 3, (int(pad.sum()),), generator=gen)
    y = torch.randint(0, 2, (n,), generator=gen)
    x[torch.arange(n), lengths - 1] = y + 1
    return TensorDataset(x, y, lengths)


def test_a_few_steps_reduce_the_loss() -> None:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = SequenceClassifier(n_classes=2, vocab_size=V, backbone=partial(
        GPTLM, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_positions=8, attention=partial(SoftmaxAttention)))
    task = FineTuneTask(model, optimizer=partial(torch.optim.AdamW, lr=3e-2), warmup_fraction=0.1)
    train = DataLoader(_separable(64, gen), batch_size=16, shuffle=True)
    val = DataLoader(_separable(64, gen), batch_size=32)
    before = _trainer().validate(task, val, verbose=False)[0]
    lrs = LrLog()
    _trainer(max_epochs=5, callbacks=[lrs]).fit(task, train, val)  # 20 steps
    after = _trainer().validate(task, val, verbose=False)[0]
    assert lrs.seen == pytest.approx([3e-2 * warmup_linear(s, 2, 20) for s in range(20)])  # per optimizer step
    assert after["val/loss"] < 0.5 * before["val/loss"] and after["val/acc"] >= 0.9, (before, after)
