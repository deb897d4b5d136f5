"""Run records kept without weights (records are in git, checkpoints are not) get their weights back, bit for bit."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml

from oscrepro.runs.compose import RunNotUsableError
from oscrepro.runs.lookup import model_state_dict
from oscrepro.runs.record import run_dir as run_dir_for
from oscrepro.tables.recover import compare_metrics, has_checkpoint, recover_checkpoint
from oscrepro.train import train

SMOKE = ["experiment=fqo/sva", "budget=smoke", "trainer.enable_progress_bar=false"]


def test_compare_metrics_flags_model_metrics_and_skips_machine_times():
    same, worst, differ = compare_metrics({"val/acc": 0.5, "train_wall_time_s": 3.0, "n_params": 10},
                                          {"val/acc": 0.5, "train_wall_time_s": 9.0, "n_params": 10})
    assert same and worst == 0.0 and differ == []
    same, worst, differ = compare_metrics({"val/acc": 0.5, "test/ppl": 100.0}, {"val/acc": 0.5001, "test/ppl": 100.0})
    assert not same and worst == pytest.approx(2e-4) and differ == ["val/acc 0.5 -> 0.5001"]


def test_a_record_without_its_checkpoint_is_retrained_to_the_same_weights(compose, results_dir):
    cfg = compose(SMOKE + [f"paths.results_dir={results_dir}"])
    assert train(cfg)["status"] == "ok"
    rd = run_dir_for(cfg)
    before = model_state_dict(rd / "checkpoints" / "last.ckpt")
    metrics = (rd / "metrics.json").read_text()
    shutil.rmtree(rd / "checkpoints")  # what a fresh checkout holds: the record, not its weights
    shutil.rmtree(rd / "logs", ignore_errors=True)
    assert not has_checkpoint(rd)

    note = recover_checkpoint(rd)
    assert has_checkpoint(rd) and "match the record" in note
    after = model_state_dict(rd / "checkpoints" / "last.ckpt")
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)  # deterministic training: the same weights
    assert (rd / "metrics.json").read_text() == metrics  # the record's numbers are kept as they were
    info = json.loads((rd / "status.json").read_text())["checkpoint_recovered"]
    assert info["metrics_match"] and info["max_rel_diff"] == 0.0
    assert not list(rd.parent.glob(".recover-*"))  # the scratch dir is gone


def test_an_edited_record_is_refused(compose, results_dir):
    cfg = compose(SMOKE + [f"paths.results_dir={results_dir}"])
    train(cfg)
    rd = run_dir_for(cfg)
    shutil.rmtree(rd / "checkpoints")
    edited = yaml.safe_load((rd / "config.yaml").read_text())
    edited["seed"] = 7  # the record no longer describes the run its id names
    (rd / "config.yaml").write_text(yaml.safe_dump(edited))
    with pytest.raises(RunNotUsableError, match="hashes to run id"):
        recover_checkpoint(rd)
    assert not has_checkpoint(rd)
