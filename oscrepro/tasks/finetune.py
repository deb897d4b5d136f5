"""Fine-tuning a pretrained LM with a classification head on GLUE (coupledqk Sec. 3.4, Table 7).

Cross-entropy, ``<split>/acc`` and ``<split>/loss`` exactly as :class:`ClassificationTask` logs them (its
accumulate-then-flush evaluation is reused); only the batch differs: ``(x, y, lengths)``, and the model is
called with the lengths so that it pools the last real token. "Standard BERT-style hyperparameters" (the paper
names only lr 2e-5 and the epochs) are read as BERT's recipe: AdamW with weight decay 0.01 and a linear warmup
over the first ``warmup_fraction`` (10 %) of the optimizer steps, then linear decay to 0 (Devlin et al., 2019).
"""

from __future__ import annotations

import math
from typing import Any

import torch.nn.functional as F
from torch import Tensor

from oscrepro.tasks.classification import ClassificationTask


def warmup_linear(step: int, warmup: int, total: int) -> float:
    """BERT's lr multiplier at optimizer step ``step``: (step + 1) / warmup during warmup, then linear decay to 0
    at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


class FineTuneTask(ClassificationTask):
    """Batches ``(x, y, lengths)``: x (B, T) right-padded ids, y (B,) labels, lengths (B,) real tokens."""

    def __init__(self, *args: Any, warmup_fraction: float | None = 0.1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if warmup_fraction is not None and self.scheduler_factory is not None:
            raise ValueError("give either warmup_fraction (per-step BERT schedule) or scheduler (per epoch)")
        self.warmup_fraction = warmup_fraction

    def loss(self, batch: tuple) -> Tensor:
        """Mean cross-entropy of a training batch."""
        logits, _ = self.model(batch[0], batch[2])  # (B, C)
        return F.cross_entropy(logits, batch[1])

    def _eval_step(self, batch: tuple, split: str) -> None:
        x, y, lengths = batch
        logits, _ = self.model(x, lengths)  # (B, C)
        self._acc[f"{split}/loss_sum"].append(F.cross_entropy(logits, y, reduction="sum").detach()[None])
        self._acc[f"{split}/correct"].append(logits.argmax(-1) == y)  # (B,)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Set the warmup / decay lr of the coming optimizer step (``global_step`` counts optimizer steps), so the
        schedule is per step whether Lightning or the task itself steps the optimizer, and survives a resume."""
        if self.warmup_fraction is None:
            return
        acc = getattr(self, "accumulate_grad_batches", 1)  # applied by the task when it optimizes manually
        total = max(1, math.ceil(self.trainer.estimated_stepping_batches / acc))
        scale = warmup_linear(self.global_step, max(1, int(self.warmup_fraction * total)), total)
        for group in self.trainer.optimizers[0].param_groups:
            group.setdefault("initial_lr", group["lr"])  # the configured lr (kept in the optimizer's state)
            group["lr"] = group["initial_lr"] * scale
