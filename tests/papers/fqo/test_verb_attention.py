"""fqo Table 3's probe (oscrepro.papers.fqo.verb_attention): the SVA experiment's task is the core classification
task plus the verb->subject / verb->distractor attention read on hard test sentences; the core task reads none."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from oscrepro.papers.fqo.verb_attention import VerbAttentionProbeTask
from oscrepro.runs.compose import compose_run
from oscrepro.tasks.classification import ClassificationTask

B, T = 4, 5


def weights() -> torch.Tensor:
    """(B, H=2, T, T) attention: the last row of sentence b puts b/10 on position 1 and 0.05 on position 3."""
    w = torch.zeros(B, 2, T, T)
    for b in range(B):
        w[b, :, -1, 1] = b / 10
        w[b, :, -1, 3] = 0.05
    return w


def make(cls: type, **kw) -> ClassificationTask:
    return cls(torch.nn.Linear(2, 2), optimizer=partial(torch.optim.AdamW), **kw)


def test_the_probe_reads_the_verb_row_on_test_only():
    task = make(VerbAttentionProbeTask, probe_layer=1)
    auxes = [{"weights": torch.zeros(B, 2, T, T)}, {"weights": weights()}]  # layer 1 is read
    meta = {"subject_idx": torch.full((B,), 1), "distractor_idx": torch.full((B,), 3)}
    assert task.needs_weights("test") and not task.needs_weights("val")
    assert task.probe_samples("val", meta, auxes) == {}
    got = task.probe_samples("test", meta, auxes)
    torch.testing.assert_close(got["probe/vs"], torch.arange(B) / 10)
    torch.testing.assert_close(got["probe/vd"], torch.full((B,), 0.05))
    samples = {**got, "test/hard": torch.tensor([True, True, True, False])}
    metrics = task.probe_metrics("test", samples, torch.tensor([True, False, True, True]))
    assert float(metrics["test/attn_vs_correct"]) == pytest.approx((0.0 + 0.2) / 2)  # hard and correct: 0, 2
    assert float(metrics["test/attn_vs_wrong"]) == pytest.approx(0.1)
    assert float(metrics["test/n_hard_correct"]) == 2 and float(metrics["test/n_hard_wrong"]) == 1


def test_switched_off_and_the_core_task_read_no_weights():
    off = make(VerbAttentionProbeTask, attention_probe=False)
    core = make(ClassificationTask)
    for task in (off, core):
        assert not task.needs_weights("test")
        assert task.probe_samples("test", {}, []) == {}
        assert task.probe_metrics("test", {"test/hard": torch.tensor([True])}, torch.tensor([True])) == {}


def test_the_sva_experiment_uses_the_probe_task_and_others_the_core_one():
    sva = compose_run(["experiment=fqo/sva", "budget=smoke"]).task
    kws = compose_run(["experiment=fqo/kws", "budget=smoke"]).task
    assert sva._target_ == "oscrepro.papers.fqo.verb_attention.VerbAttentionProbeTask" and sva.attention_probe
    assert kws._target_ == "oscrepro.tasks.classification.ClassificationTask" and "attention_probe" not in kws
