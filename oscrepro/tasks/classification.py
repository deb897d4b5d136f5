"""Sequence classification (KWS, SVA, XOR, UEA): cross-entropy, accuracy, hard-split accuracy, and hooks through
which a subclass reads the attention weights of an evaluation pass (fqo Table 3's probe:
``oscrepro.papers.fqo.verb_attention``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from oscrepro.tasks.base import BaseTask

TIME_KEYS = ("times", "mask")  # irregular-sampling meta a continuous-time model reads (models.continuous_time)


def time_kwargs(batch: tuple, keys: tuple[str, ...] = TIME_KEYS) -> dict[str, Tensor]:
    """``keys`` (default ``times`` / ``mask``) of a batch's meta as model keywords; empty when the meta has none of
    them (the model is then called exactly as before)."""
    meta = batch[2] if len(batch) > 2 and isinstance(batch[2], dict) else {}
    return {k: meta[k] for k in keys if k in meta}


class ClassificationTask(BaseTask):
    """Batches are ``(x, y)`` or ``(x, y, meta)``; ``meta['hard']`` adds ``<split>/acc_hard``; ``meta['times']`` /
    ``meta['mask']`` (irregular series) go to the model as ``times=`` / ``mask=`` keywords.

    A subclass that reads attention weights overrides :meth:`needs_weights` (the model then returns each layer's
    ``aux``), :meth:`probe_samples` (per-example values kept with the split's samples) and :meth:`probe_metrics`
    (what it logs from them at the split's end); here they do nothing.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._acc: dict[str, list[Tensor]] = defaultdict(list)

    def loss(self, batch: tuple) -> Tensor:
        """Mean cross-entropy of a training batch (the objective; also what the loop benchmark times bare)."""
        logits, _ = self.model(batch[0], **time_kwargs(batch))  # (B, C)
        return F.cross_entropy(logits, batch[1])

    def needs_weights(self, split: str) -> bool:
        """Whether the ``split`` pass asks the model for its attention weights (``need_weights=True``)."""
        return False

    def probe_samples(self, split: str, meta: dict[str, Tensor], auxes: list[dict[str, Any]]) -> dict[str, Tensor]:
        """Per-example values (``{key: (B,) tensor}``) of one ``split`` batch, gathered with its samples."""
        return {}

    def probe_metrics(self, split: str, samples: dict[str, Tensor], correct: Tensor) -> dict[str, Tensor]:
        """Metrics of the ``split`` pass computed from every rank's samples (``correct``: (N,) bool)."""
        return {}

    def _eval_step(self, batch: tuple, split: str) -> None:
        x, y = batch[0], batch[1]
        meta = batch[2] if len(batch) > 2 else {}
        logits, auxes = self.model(x, need_weights=self.needs_weights(split), **time_kwargs(batch))
        loss = F.cross_entropy(logits, y, reduction="sum")
        correct = logits.argmax(-1) == y  # (B,)
        store = self._acc
        store[f"{split}/loss_sum"].append(loss.detach()[None])
        store[f"{split}/correct"].append(correct)
        if "hard" in meta:
            store[f"{split}/hard"].append(meta["hard"].bool())
        for key, values in self.probe_samples(split, meta, auxes).items():
            store[key].append(values)

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: tuple, batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def _flush(self, split: str) -> None:
        s = {k: self.gather_samples(torch.cat(v)) for k, v in self._acc.items()}  # every rank's samples
        self._acc.clear()
        if f"{split}/correct" not in s:
            return
        correct = s[f"{split}/correct"].float()
        metrics = {f"{split}/loss": s[f"{split}/loss_sum"].sum() / len(correct), f"{split}/acc": correct.mean()}
        if f"{split}/hard" in s:
            hard = s[f"{split}/hard"]
            if hard.any():  # no hard example: the accuracy on them is undefined, so it is not logged (never NaN:
                metrics[f"{split}/acc_hard"] = correct[hard].mean()  # a non-finite final metric voids a run)
        metrics.update(self.probe_metrics(split, s, correct.bool()))
        self.log_dict(metrics, prog_bar=split == "val")

    def on_validation_epoch_end(self) -> None:
        self._flush("val")

    def on_test_epoch_end(self) -> None:
        self._flush("test")
