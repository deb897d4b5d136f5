"""Config resolvers: ``${imul:a,b}`` (steps x factor) and ``${idiv:a,b}`` (effective batch / micro-batch)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

import oscrepro  # noqa: F401  (registers the resolvers)
from oscrepro.runs.compose import compose_run


def test_imul_and_idiv_resolve() -> None:
    cfg = OmegaConf.create({"s": 30000, "f": 2.4, "e": 32, "m": 4, "steps": "${imul:${s},${f}}",
                            "acc": "${idiv:${e},${m}}"})
    assert cfg.steps == 72000 and cfg.acc == 8


def test_idiv_refuses_a_micro_batch_that_does_not_divide() -> None:
    cfg = OmegaConf.create({"acc": "${idiv:32,5}"})
    with pytest.raises(Exception, match="not a positive multiple"):
        _ = cfg.acc


def test_compute_matched_and_micro_batch_compose_at_paper_budget() -> None:
    """Sec. 3.5: Standard at 2.4 x the recipe's 30K steps; App. B: coupled QK at 350M in micro-batches of 2."""
    cfg = compose_run(["experiment=coupledqk/lm", "budget=paper", "attention=softmax", "compute_factor=2.4"])
    assert cfg.trainer.max_steps == 72000 and cfg.task.scheduler.total_steps == 72000
    assert cfg.data.batch_size == 8 and cfg.trainer.accumulate_grad_batches == 4
    cfg = compose_run(["experiment=coupledqk/lm", "budget=paper", "model=gpt_large", "micro_batch=2"])
    assert cfg.data.batch_size == 2 and cfg.trainer.accumulate_grad_batches == 16
