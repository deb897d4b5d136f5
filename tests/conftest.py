"""Shared fixtures: isolated results dirs, config composition, and a tiny torch thread budget."""

from __future__ import annotations

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra

from oscrepro.runs.compose import compose_run

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _clear_hydra():
    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    """Route every run record and table of the test into a temporary results dir."""
    monkeypatch.setenv("OSCREPRO_RESULTS_DIR", str(tmp_path / "results"))
    return tmp_path / "results"


@pytest.fixture
def compose():
    """compose(overrides) -> DictConfig, as `python -m oscrepro.train` would build it."""
    return compose_run
