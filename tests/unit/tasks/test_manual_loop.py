"""The task's own optimization (manual optimization in ``BaseTask``) computes what a plain torch loop computes:
loss / accumulation, backward, global-norm clipping, AdamW step, zero_grad, and a per-step schedule after each
optimizer step. Compared parameter for parameter after a Lightning fit, so a change to the loop that alters a
run's numbers fails here."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch.utils.data import DataLoader

from oscrepro.runs.compose import compose_run
from oscrepro.tasks.schedules import warmup_cosine, warmup_cosine_factor
from oscrepro.train import build, make_trainer


def _reference(task, batches, accumulate: int, clip: float | None, warmup: int, total: int) -> list[torch.Tensor]:
    """The plain loop: what the task's training_step must reproduce."""
    task = copy.deepcopy(task)
    opt = task.optimizer_factory([p for p in task.parameters() if p.requires_grad])
    sched = warmup_cosine(opt, warmup, total)
    for i, b in enumerate(batches):
        (task.loss(b) / accumulate).backward()
        if (i + 1) % accumulate == 0 or i == len(batches) - 1:
            if clip:
                torch.nn.utils.clip_grad_norm_(task.parameters(), clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
    return [p.detach().clone() for p in task.parameters()]


@pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`")
@pytest.mark.parametrize("accumulate, clip", [(1, None), (2, 0.05), (3, 1.0)])
def test_task_loop_equals_the_plain_torch_loop(accumulate: int, clip: float | None, tmp_path) -> None:
    n, warmup, total = 7, 2, 4
    cfg = compose_run(["experiment=fqo/sva", "budget=smoke", "attention=softmax", f"paths.results_dir={tmp_path}",
                       f"trainer.limit_train_batches={n}", "trainer.limit_val_batches=0",
                       "+task.scheduler_interval=step",
                       "task.scheduler={_target_: oscrepro.tasks.schedules.warmup_cosine, _partial_: true, "
                       f"warmup_steps: {warmup}, total_steps: {total}}}"])
    dm, _, task = build(cfg)
    dm.setup("fit")
    batches = [b for _, b in zip(range(n), dm.train_dataloader(), strict=False)]
    expected = _reference(task, batches, accumulate, clip, warmup, total)
    trainer = make_trainer(cfg, task, accumulate_grad_batches=accumulate, gradient_clip_val=clip, logger=False,
                           enable_checkpointing=False, max_epochs=1, default_root_dir=str(tmp_path))
    trainer.fit(task, train_dataloaders=DataLoader(batches, batch_size=None))  # the same batches, in order
    assert trainer.global_step == math.ceil(n / accumulate)  # optimizer steps, as Lightning counts them
    got = [p.detach() for p in task.parameters()]
    assert all(torch.allclose(a, b, rtol=0, atol=1e-7) for a, b in zip(expected, got, strict=True))
    moved = max(float((a - b).abs().max()) for a, b in zip(expected, [p.detach() for p in build(cfg)[2].parameters()],
                                                            strict=True))
    assert moved > 1e-4  # training changed the weights, so the comparison can fail


def test_warmup_cosine_shape() -> None:
    f = [warmup_cosine_factor(s, warmup_steps=4, total_steps=12) for s in range(14)]
    assert f[:4] == [0.25, 0.5, 0.75, 1.0]  # linear warm-up to the base rate
    assert f[4] == pytest.approx(1.0) and f[8] == pytest.approx(0.5) and f[12] == pytest.approx(0.0)
    assert all(a >= b for a, b in zip(f[4:], f[5:], strict=False))  # monotone decay, flat after total_steps
    assert warmup_cosine_factor(20, 4, 12, min_ratio=0.1) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="total_steps"):
        warmup_cosine(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0), 1, 0)


@pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`")
def test_warmup_cosine_over_the_whole_run(tmp_path) -> None:
    """total_steps: null = the trainer's optimizer steps (2 epochs x 5 batches); warmup_fraction 0.2 = 2 steps."""
    cfg = compose_run(["experiment=fqo/sva", "budget=smoke", "attention=softmax", f"paths.results_dir={tmp_path}",
                       "trainer.limit_train_batches=5", "trainer.limit_val_batches=0", "trainer.max_epochs=2",
                       "+task.scheduler_interval=step",
                       "task.scheduler={_target_: oscrepro.tasks.schedules.warmup_cosine, _partial_: true, "
                       "warmup_fraction: 0.2, total_steps: null}"])
    dm, _, task = build(cfg)
    trainer = make_trainer(cfg, task, logger=False, enable_checkpointing=False, default_root_dir=str(tmp_path))
    trainer.fit(task, datamodule=dm)
    factor = task.lr_schedulers().lr_lambdas[0]
    assert [factor(s) for s in (0, 1)] == [0.5, 1.0]
    assert factor(6) == pytest.approx(0.5 * (1 + math.cos(math.pi * 4 / 8))) and factor(10) == pytest.approx(0.0)
    assert task.optimizers().param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)  # decayed to 0 at the end
