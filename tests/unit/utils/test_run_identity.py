"""Run identity: every committed run record's directory is the id its config hashes to (an id rule that orphans
records fails here), also read back at today's class paths (a class moved into oscrepro/papers/ keeps its records'
ids: runs.record.MOVED_TARGETS), where a run read its data from is not part of its id, and a CPU run on a GPU
machine is recorded as trained by the CPU."""

from __future__ import annotations

import subprocess
from pathlib import Path

import torch
from hydra.utils import get_object
from omegaconf import DictConfig, OmegaConf

from oscrepro.runs.compose import compose_run
from oscrepro.runs.record import MOVED_TARGETS, RETIRED_KEYS, current_targets, hashed_payload, run_id
from oscrepro.utils import provenance

ROOT = Path(__file__).resolve().parents[3]


def committed_configs() -> list[str]:
    files = subprocess.run(["git", "ls-files", "results/runs/*/config.yaml"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    assert len(files) > 100  # the records are in git (a checkout without them would make this vacuous)
    return files


def targets(cfg: DictConfig) -> set[str]:
    """Every ``_target_`` string of a config."""
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            found.update([node["_target_"]] if isinstance(node.get("_target_"), str) else [])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(OmegaConf.to_container(cfg, resolve=False))
    return found


def test_every_committed_record_is_at_its_run_id() -> None:
    wrong = [f for f in committed_configs() if run_id(OmegaConf.load(ROOT / f)) != Path(f).parent.name]
    assert not wrong, wrong[:5]


def test_every_committed_record_read_at_todays_paths_keeps_its_id_and_imports() -> None:
    """A record's config read back at today's paths (what load_run and recover_checkpoint build from) hashes to its
    own dir name, and every class it names imports: the moved fsn backbones and fqo's probe task included."""
    wrong, names = [], set()
    for f in committed_configs():
        now = current_targets(OmegaConf.load(ROOT / f))
        if run_id(now) != Path(f).parent.name:
            wrong.append(f)
        names |= targets(now)
    assert not wrong, wrong[:5]
    assert not names & set(MOVED_TARGETS.values()) - set(RETIRED_KEYS)  # no record left at a path classes left
    assert {"oscrepro.papers.fsn.torus_lm.TorusLM",
            "oscrepro.papers.fqo.verb_attention.VerbAttentionProbeTask"} <= names  # the moves are exercised
    for name in sorted(names):
        get_object(name)


def test_every_moved_path_imports_and_hashes_as_its_old_one() -> None:
    """Each alias's new path imports; a config naming it hashes as one naming the old path (and no old path is a
    new path too: a chain would hash differently depending on which record was read)."""
    for new, old in MOVED_TARGETS.items():
        assert callable(get_object(new)), new
        assert new not in MOVED_TARGETS.values()
        keys = RETIRED_KEYS.get(old, {})  # a moved class that took retired keys over states them
        assert run_id(OmegaConf.create({"x": {"_target_": new, **keys}})) == \
            run_id(OmegaConf.create({"x": {"_target_": old, **keys}}))


def test_a_retired_key_hashes_at_its_retired_value_when_absent() -> None:
    """The core classification task no longer takes fqo's probe keys; its runs keep the ids they had with them."""
    target = "oscrepro.tasks.classification.ClassificationTask"
    without = OmegaConf.create({"task": {"_target_": target, "scheduler": None}})
    with_keys = OmegaConf.create({"task": {"_target_": target, "scheduler": None, **RETIRED_KEYS[target]}})
    assert run_id(without) == run_id(with_keys)
    assert hashed_payload(without)["task"] == {"_target_": target, "scheduler": None, **RETIRED_KEYS[target]}
    probed = OmegaConf.create({"task": {"_target_": target, "scheduler": None, "attention_probe": True,
                                        "probe_layer": 0}})
    assert run_id(probed) != run_id(without)  # the check can fail: the probe's runs are other runs
    assert current_targets(probed).task._target_ == "oscrepro.papers.fqo.verb_attention.VerbAttentionProbeTask"
    assert "attention_probe" not in current_targets(with_keys).task


def test_data_location_is_not_part_of_the_id(monkeypatch) -> None:
    monkeypatch.delenv("OSCREPRO_DATA_DIR", raising=False)  # the env var fills data_dir; the id must ignore both
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


def _unaccepted(node: dict) -> list[str]:
    """Keys of one ``_target_`` node that its callable does not accept (none when it takes ``**kwargs``)."""
    import inspect

    params = inspect.signature(get_object(node["_target_"])).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    return [k for k in node if not k.startswith("_") and k not in params]


def test_every_committed_record_builds_at_todays_paths() -> None:
    """Every class node of every record, read at today's paths, holds only keys its class accepts: a class that moved
    or lost a key (fqo's probe switch left the core classification task) still rebuilds its old runs. The check
    failed for the osciformer resonance records before ``train.build`` read configs at today's paths."""
    bad: dict[str, str] = {}
    for f in committed_configs():
        container = OmegaConf.to_container(current_targets(OmegaConf.load(ROOT / f)), resolve=False)
        for node in (container.get("task"), container.get("model")):
            if isinstance(node, dict) and isinstance(node.get("_target_"), str) and (extra := _unaccepted(node)):
                bad.setdefault(f"{node['_target_']} {extra}", f)
    assert not bad, bad


def test_build_rebuilds_a_record_config_of_a_class_that_lost_a_key() -> None:
    """``train.build`` on a record's config as written (an osciformer resonance run: ``attention_probe: false`` in
    its task, a key that left the core classification task) builds its task: the resonance figure's analysis
    failed with "unexpected keyword argument 'attention_probe'" before build read configs at today's paths."""
    from oscrepro.train import build

    record = next(f for f in committed_configs() if f.startswith("results/runs/osciformer/resonance/"))
    cfg = OmegaConf.load(ROOT / record)
    assert "attention_probe" in cfg.task  # the record as written keeps the retired key
    cfg.data.n_train, cfg.data.n_val, cfg.data.n_test = 64, 32, 32  # the construction, not the data size, is tested
    _, model, task = build(cfg)
    assert type(task).__name__ == "ClassificationTask" and task.model is model


def test_a_record_is_read_back_without_its_data_location(tmp_path: Path) -> None:
    """A record's ``data.data_dir`` names the training machine's data folder: read back (what load_run and
    recover_checkpoint build from) it is null, so this checkout's data path finds the data, and the id is unchanged.
    fsn Table 5's weight recovery failed with "Dataset 'python_code' not found ... /work/main/.devdata" before."""
    from oscrepro.runs.record import load_record_config

    record = next(f for f in committed_configs() if "data_dir: /" in (ROOT / f).read_text())
    run = tmp_path / Path(record).parent.name
    run.mkdir()
    (run / "config.yaml").write_text((ROOT / record).read_text())
    cfg = load_record_config(run)
    assert cfg.data.data_dir is None
    assert run_id(cfg) == run.name
