"""Sequence classification (KWS, SVA): cross-entropy, accuracy, hard-split accuracy and attention probes."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from oscrepro.analysis.attention_stats import verb_attention_summary
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

    With ``attention_probe=True`` the test pass also records, per hard sentence, the attention of the last
    position (SVA's <verb>) on ``meta['subject_idx']`` and ``meta['distractor_idx']`` in layer ``probe_layer``
    (mean over heads), and logs the fqo Table 3 summary (``test/attn_vs_correct`` ...).
    """

    def __init__(self, *args: Any, attention_probe: bool = False, probe_layer: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.attention_probe, self.probe_layer = attention_probe, probe_layer
        self._acc: dict[str, list[Tensor]] = defaultdict(list)

    def loss(self, batch: tuple) -> Tensor:
        """Mean cross-entropy of a training batch (the objective; also what the loop benchmark times bare)."""
        logits, _ = self.model(batch[0], **time_kwargs(batch))  # (B, C)
        return F.cross_entropy(logits, batch[1])

    def _eval_step(self, batch: tuple, split: str) -> None:
        x, y = batch[0], batch[1]
        meta = batch[2] if len(batch) > 2 else {}
        probe = split == "test" and self.attention_probe
        logits, auxes = self.model(x, need_weights=probe, **time_kwargs(batch))
        loss = F.cross_entropy(logits, y, reduction="sum")
        correct = logits.argmax(-1) == y  # (B,)
        store = self._acc
        store[f"{split}/loss_sum"].append(loss.detach()[None])
        store[f"{split}/correct"].append(correct)
        if "hard" in meta:
            store[f"{split}/hard"].append(meta["hard"].bool())
        if probe:
            w = auxes[self.probe_layer]["weights"].mean(dim=1)[:, -1]  # (B, T): last-position row, head mean
            rows = torch.arange(len(y), device=w.device)
            store["probe/vs"].append(w[rows, meta["subject_idx"]])
            store["probe/vd"].append(w[rows, meta["distractor_idx"]])

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
            if "probe/vs" in s:
                summary = verb_attention_summary(s["probe/vs"][hard], s["probe/vd"][hard], correct[hard].bool())
                metrics.update({f"{split}/{k}": torch.tensor(v) for k, v in summary.items()})
        self.log_dict(metrics, prog_bar=split == "val")

    def on_validation_epoch_end(self) -> None:
        self._flush("val")

    def on_test_epoch_end(self) -> None:
        self._flush("test")
