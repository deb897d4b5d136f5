"""Run identity: every committed run record's directory is the id its config hashes to (an id rule that orphans
records fails here), where a run read its data from is not part of its id, and a CPU run on a GPU machine is
recorded as trained by the CPU."""

from __future__ import annotations

import subprocess
from pathlib import Path

import torch
from omegaconf import OmegaConf

from oscrepro.runs.compose import compose_run
from oscrepro.runs.record import run_id
from oscrepro.utils import provenance

ROOT = Path(__file__).resolve().parents[3]


def test_every_committed_record_is_at_its_run_id() -> None:
    files = subprocess.run(["git", "ls-files", "results/runs/*/config.yaml"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    assert len(files) > 100  # the records are in git (a checkout without them would make this vacuous)
    wrong = [f for f in files if run_id(OmegaConf.load(ROOT / f)) != Path(f).parent.name]
    assert not wrong, wrong[:5]


def test_data_location_is_not_part_of_the_id() -> None:
    base = compose_run(["experiment=leaderboard/charlm", "budget=smoke"])
    assert base.data.data_dir is None
    moved = compose_run(["experiment=leaderboard/charlm", "budget=smoke", "data.data_dir=/elsewhere/data"])
    assert run_id(moved) == run_id(base)
    assert run_id(compose_run(["experiment=leaderboard/charlm", "budget=smoke", "data.seq_len=16"])) != run_id(base)


def test_cpu_run_on_a_gpu_machine_names_the_cpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    assert provenance.device_name() == "cuda: NVIDIA H200"
    assert provenance.device_name("gpu") == "cuda: NVIDIA H200"
    assert provenance.device_name("cpu").startswith("cpu: ")
