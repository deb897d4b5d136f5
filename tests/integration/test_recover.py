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
from oscrepro.utils.provenance import git_commit

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
    assert info["git_commit"] == git_commit()  # which code retrained it: a clean retrain verifies a dirty record
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


def test_a_record_trained_on_a_gpu_is_recovered_on_the_cpu_and_says_so(compose, results_dir, monkeypatch):
    """fsn's cpu tables read runs trained with ``trainer=gpu``; on a CPU-only machine Lightning refuses that
    accelerator ("No supported gpu backend found"), so the recovery retrains on the CPU with only the device keys
    changed. Built here from a CPU run whose record is re-filed under its ``trainer=gpu`` variant's id: the fallback
    must give back exactly the CPU run's weights, keep the record's id and metrics, and say what it did."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu_cfg = compose(SMOKE + [f"paths.results_dir={results_dir}"])
    assert train(cpu_cfg)["status"] == "ok"
    cpu_dir = run_dir_for(cpu_cfg)
    gpu_cfg = compose(SMOKE + [f"paths.results_dir={results_dir}", "trainer=gpu"])
    gpu_dir = run_dir_for(gpu_cfg)
    assert gpu_dir != cpu_dir  # the device keys are part of the id (a device-only variant serves the cell)
    gpu_dir.mkdir(parents=True)
    for f in ("status.json", "metrics.json", "history.csv"):
        shutil.copy(cpu_dir / f, gpu_dir / f)
    from omegaconf import OmegaConf

    OmegaConf.save(gpu_cfg, gpu_dir / "config.yaml")
    status = json.loads((gpu_dir / "status.json").read_text())
    (gpu_dir / "status.json").write_text(json.dumps({**status, "run_id": gpu_dir.name, "device": "cuda: NVIDIA H200"}))

    note = recover_checkpoint(gpu_dir)
    assert has_checkpoint(gpu_dir) and "retrained on the CPU" in note and "cuda: NVIDIA H200" in note
    before = model_state_dict(cpu_dir / "checkpoints" / "last.ckpt")
    after = model_state_dict(gpu_dir / "checkpoints" / "last.ckpt")
    assert all(torch.equal(before[k], after[k]) for k in before)  # same config on the same CPU: same weights
    info = json.loads((gpu_dir / "status.json").read_text())["checkpoint_recovered"]
    assert info["metrics_match"] and "trainer.accelerator=gpu" in info["device_fallback"]
    assert yaml.safe_load((gpu_dir / "config.yaml").read_text())["trainer"]["accelerator"] == "gpu"  # record kept
    assert not list(gpu_dir.parent.glob(".recover-*"))
