"""Associative recall (MQAR; coupledqk Sec. 3.3, Table 6): next-token cross-entropy and exact-match accuracy on
the queried positions only."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from oscrepro.tasks.language_modeling import LanguageModelTask

IGNORE_INDEX = -100  # oscrepro.data.mqar.IGNORE: every position that is not a query


class RecallTask(LanguageModelTask):
    """Batches ``(x, y)``: ``x`` (B, T) token ids, ``y`` (B, T) the value to recall at a query position, -100 elsewhere.

    The objective is the cross-entropy over labelled positions only (mean over them). Logs ``<split>/loss`` (mean
    CE per labelled position) and ``<split>/acc``, the fraction of labelled positions whose argmax prediction is
    the queried value (Table 6's "MQAR accuracy"), pooled over the whole split.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._recall: dict[str, Tensor] = {}

    def _loss(self, batch: tuple, reduction: str) -> Tensor:
        x, y = batch[0], batch[1]
        logits, _ = self.model(x)  # (B, T, V)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE_INDEX,
                               reduction=reduction)

    def _eval_step(self, batch: tuple, split: str) -> None:
        x, y = batch[0], batch[1]
        logits, _ = self.model(x)  # (B, T, V)
        mask = y != IGNORE_INDEX  # (B, T)
        picked, target = logits[mask], y[mask]  # (M, V), (M,)
        stats = torch.stack([
            F.cross_entropy(picked.float(), target, reduction="sum"),
            (picked.argmax(-1) == target).sum().float(),
            mask.sum().float(),
        ]).detach()  # (loss sum, correct, labelled) of this batch
        self._recall[split] = self._recall.get(split, torch.zeros_like(stats)) + stats

    def _flush(self, split: str) -> None:
        stats = self._recall.pop(split, None)
        if stats is None or not float(stats[2]):
            return
        loss_sum, correct, n = stats.tolist()
        self.log_dict({f"{split}/loss": loss_sum / n, f"{split}/acc": correct / n}, prog_bar=split == "val")
