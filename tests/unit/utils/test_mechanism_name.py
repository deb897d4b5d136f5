"""wandb's job_type is the attention config's name (what a user types), and that name never changes a run id."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from oscrepro.runs.compose import compose_run
from oscrepro.runs.record import run_id, with_mechanism


@pytest.mark.parametrize(("overrides", "name"), [
    (["experiment=fqo/sva"], "fqo"),
    (["experiment=fqo/sva", "attention=fqo_gain"], "fqo_gain"),
    (["experiment=osciformer/uea", "attention=contiformer"], "contiformer"),
])
def test_wandb_job_type_is_the_attention_config_name(overrides, name):
    cfg = compose_run([*overrides, "budget=smoke", "logger=wandb"])
    assert cfg.mechanism == name
    wandb = OmegaConf.to_container(cfg.logger, resolve=True)["wandb"]
    assert wandb["job_type"] == name and "." not in wandb["job_type"]  # not the class path


def test_the_mechanism_name_is_not_hashed():
    cfg = compose_run(["experiment=fqo/sva", "budget=smoke"])
    before = run_id(cfg)
    assert run_id(with_mechanism(cfg, "renamed")) == before
    assert run_id(with_mechanism(cfg, None)) == before
