"""Misspelled keys get the closest valid key, in one line, from both entry points, with nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oscrepro.runs.compose import compose_run, config_groups
from oscrepro.utils.suggest import unknown_key_message

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("overrides", "want"), [
    (["trainer.max_epoch=3"], "'trainer.max_epochs'"),
    (["experiment=fqo/sva", "model.n_head=4"], "'model.n_heads'"),
    (["experiment=fqo/sva", "seed=0,1", "data.batch_sise=4"], "'data.batch_size'"),  # a sweep composes once
    (["experiment=fqo/sva", "lr=1e-3"], "'task.optimizer.lr'"),  # not a sibling: any dotted key
    (["experimnt=fqo/sva"], "'experiment'"),  # a config group
])
def test_unknown_key_names_the_closest_valid_key(overrides, want):
    message = unknown_key_message(overrides, compose_run, config_groups())
    assert message is not None and message.startswith("unknown config key") and want in message.split("?")[0]
    assert "\n" not in message and "+" + overrides[-1] in message  # and how to add a genuinely new key


def test_valid_overrides_and_other_errors_are_left_to_hydra():
    assert unknown_key_message(["experiment=fqo/sva", "seed=0,1", "-m"], compose_run, config_groups()) is None
    assert unknown_key_message(["attention=nonexistent"], compose_run, config_groups()) is None  # Hydra's own


def test_far_key_says_nothing_is_close():
    message = unknown_key_message(["zzzz=1"], compose_run, config_groups())
    assert message == "unknown config key 'zzzz' (no valid key is close to it); to add it as a new key: +zzzz=1"


@pytest.mark.parametrize("cli", [["oscrepro.train", "experiment=fqo/sva", "budget=smoke"],
                                 ["oscrepro.table", "fqo/table2", "--budget", "smoke"]])
def test_entry_points_refuse_before_writing(cli, tmp_path):
    where = [f"paths.results_dir={tmp_path / 'r'}"] if cli[0] == "oscrepro.train" else ["--results-dir",
                                                                                        str(tmp_path / "r")]
    proc = subprocess.run([sys.executable, "-m", *cli, *where, "trainer.max_epoch=3"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "did you mean 'trainer.max_epochs'?" in proc.stderr  # bad input: exit 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("bad", ["seed=abc", "model.d_model=-4", "data.batch_size=0"])
def test_cli_refuses_bad_values_before_hydra_writes_its_output_dir(bad, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "oscrepro.train", "experiment=fqo/sva", "budget=smoke", bad,
                           f"paths.results_dir={tmp_path / 'r'}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("invalid config, nothing was run or written")
    assert bad.split("=")[0] in proc.stderr
    assert not (tmp_path / "r").exists()  # not even Hydra's output dir
