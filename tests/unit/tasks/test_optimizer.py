"""The speed settings of the training step change no number: why ``task.optimizer.foreach`` may stay out of run ids."""

from __future__ import annotations

import copy

import torch

from oscrepro.runs.compose import compose_run
from oscrepro.runs.record import run_id
from oscrepro.train import build


def _train(task, batches, **opt_kwargs) -> list[torch.Tensor]:
    task = copy.deepcopy(task)
    opt = torch.optim.AdamW(task.parameters(), lr=5e-4, weight_decay=1e-4, **opt_kwargs)
    for b in batches:
        task.loss(b).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return [p.detach() for p in task.parameters()]


def test_foreach_adamw_is_bit_identical_to_the_per_tensor_loop():
    cfg = compose_run(["experiment=fqo/sva", "budget=smoke", "attention=fqo", "model.attention.d_osc=2"])
    dm, _, task = build(cfg)
    batches = [b for _, b in zip(range(20), dm.train_dataloader(), strict=False)]
    ref, fast = _train(task, batches, foreach=False), _train(task, batches, foreach=True)
    assert all(torch.equal(a, b) for a, b in zip(ref, fast, strict=True))
    fused = _train(task, batches, fused=True)  # the comparison can fail: the fused kernel rounds differently
    assert not all(torch.equal(a, b) for a, b in zip(ref, fused, strict=True))


def test_foreach_is_not_part_of_the_run_id():
    base = compose_run(["experiment=fqo/sva", "budget=cpu"])
    assert base.task.optimizer.foreach is True
    other = compose_run(["experiment=fqo/sva", "budget=cpu", "task.optimizer.foreach=false"])
    assert run_id(base) == run_id(other)
    assert run_id(base) != run_id(compose_run(["experiment=fqo/sva", "budget=cpu", "task.optimizer.lr=1e-3"]))
