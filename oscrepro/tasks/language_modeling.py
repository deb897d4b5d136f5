"""Causal language modeling: next-token cross-entropy; perplexity = exp(CE) and bits per token = CE / ln 2
(bits per character for character-level corpora), both from the token-mean CE of each split."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from oscrepro.tasks.base import BaseTask


class LanguageModelTask(BaseTask):
    """Batches ``(x, y)`` with ``x, y`` (B, T) token ids, ``y`` shifted by one.

    Logs ``<split>/loss`` (nats/token), ``<split>/ppl`` and ``<split>/bpc`` (bits/token); validation also logs
    ``val/ppl_best``, the lowest validation perplexity so far (the "Best Val PPL" of coupledqk Tables 3/4).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sums: dict[str, list[float]] = {}

    def _loss(self, batch: tuple, reduction: str) -> Tensor:
        x, y = batch[0], batch[1]
        logits, _ = self.model(x)  # (B, T, V)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction=reduction)

    def loss(self, batch: tuple) -> Tensor:
        """Token-mean cross-entropy of a training batch (the objective; what the loop benchmark times bare)."""
        return self._loss(batch, "mean")

    def _eval_step(self, batch: tuple, split: str) -> None:
        total = self._sums.setdefault(split, [0.0, 0.0])
        total[0] += float(self._loss(batch, "sum"))
        total[1] += batch[1].numel()

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: tuple, batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def _flush(self, split: str) -> None:
        loss_sum, n = self._sums.pop(split, [0.0, 0.0])
        if n:
            loss = loss_sum / n
            ppl = float(torch.tensor(loss).exp())
            self.log_dict({f"{split}/loss": loss, f"{split}/ppl": ppl, f"{split}/bpc": loss / math.log(2)},
                          prog_bar=split == "val")
            if split == "val" and not self.trainer.sanity_checking:
                self.best_val_ppl = min(ppl, getattr(self, "best_val_ppl", math.inf))
                self.log("val/ppl_best", self.best_val_ppl)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["best_val_ppl"] = getattr(self, "best_val_ppl", math.inf)  # a resumed run keeps its best

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "best_val_ppl" in checkpoint:
            self.best_val_ppl = checkpoint["best_val_ppl"]

    def on_validation_epoch_end(self) -> None:
        self._flush("val")

    def on_test_epoch_end(self) -> None:
        self._flush("test")
