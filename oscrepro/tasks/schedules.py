"""Learning-rate schedules that ``torch.optim.lr_scheduler`` has no single class for, built on ``LambdaLR``.

``warmup_cosine`` is the schedule of coupledqk App. B ("cosine schedule with 2K-step warmup", MQAR: 500 steps):
a linear warm-up from 0 to the base learning rate over ``warmup_steps`` optimizer steps, then a half cosine down to
``min_ratio`` x the base rate at ``total_steps``, flat after that. It is stepped once per optimizer step
(``task.scheduler_interval: step``), so with gradient accumulation the steps are the paper's optimizer steps.
"""

from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR


def warmup_cosine_factor(step: int, warmup_steps: int, total_steps: int, min_ratio: float = 0.0) -> float:
    """Multiplier of the base learning rate after ``step`` optimizer steps (0-based: step 0 is the first update)."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_cosine(optimizer: Optimizer, warmup_steps: int = 0, total_steps: int | None = None, min_ratio: float = 0.0,
                  warmup_fraction: float | None = None) -> LambdaLR:
    """Linear warm-up then cosine decay (module docstring); ``total_steps`` counts optimizer steps.

    ``total_steps: null`` in a config means the whole run: the task fills in the trainer's estimated optimizer steps
    (epochs x batches / accumulation, or max_steps), so an epoch-based recipe ("cosine decay with 5 % warm-up",
    osciformer Sec. 7) needs no step arithmetic in conf/. ``warmup_fraction`` (of ``total_steps``) replaces
    ``warmup_steps`` when given."""
    if total_steps is None:
        raise ValueError("warmup_cosine: total_steps is None (a task passes the run's optimizer steps)")
    if warmup_fraction is not None:
        if not 0.0 <= warmup_fraction < 1.0:
            raise ValueError(f"warmup_cosine: warmup_fraction={warmup_fraction} must be in [0, 1)")
        warmup_steps = round(warmup_fraction * total_steps)
    if total_steps <= 0 or warmup_steps < 0:
        raise ValueError(f"warmup_cosine: total_steps={total_steps} must be > 0 and warmup_steps={warmup_steps} >= 0")
    return LambdaLR(optimizer, lambda s: warmup_cosine_factor(s, warmup_steps, total_steps, min_ratio))
