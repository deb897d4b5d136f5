"""Config validation (oscrepro.runs.validate): each bad value the reliability issue lists gives one message that
names the key, the value and the rule, before anything is written; valid configs pass (every table cell of every
budget is validated by the plan, so the golden-config test covers them)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from oscrepro.runs.validate import ConfigError, config_problems
from oscrepro.train import train

SMOKE = ["experiment=fqo/sva", "budget=smoke", "trainer.enable_progress_bar=false"]
BAD = [
    ("seed=abc", "seed='abc': must be an integer in [0, 4294967295]"),
    ("seed=1.5", "seed=1.5: must be an integer in [0, 4294967295]"),
    ("seed=true", "seed=True: must be an integer in [0, 4294967295]"),
    ("seed=-1", "seed=-1: must be an integer in [0, 4294967295]"),
    ("seed=4294967296", "seed=4294967296: must be an integer in [0, 4294967295]"),  # numpy's seed range
    ("model.d_model=-4", "model.d_model=-4: must be an integer >= 1 or null"),
    ("data.batch_size=0", "data.batch_size=0: must be an integer >= 1"),
    ("data.n_train=-5", "data.n_train=-5: must be an integer >= 1"),
    ("task.optimizer.lr=0", "task.optimizer.lr=0: must be a finite number > 0"),
    ("trainer.max_epochs=-3", "trainer.max_epochs=-3: must be an integer >= -1 (-1: no limit)"),
]


@pytest.mark.parametrize(("override", "message"), BAD)
def test_bad_value_is_named_and_nothing_is_written(compose, results_dir, override, message) -> None:
    cfg = compose([*SMOKE, f"paths.results_dir={results_dir}", override])
    assert config_problems(cfg) == [message + (" (it names the run and seeds every RNG)" if "seed" in message
                                               else "")]
    with pytest.raises(ConfigError, match="nothing was run or written"):
        train(cfg)
    assert not results_dir.exists() or not any(results_dir.rglob("*")), "something was written"


def test_every_problem_is_listed_at_once(compose) -> None:
    cfg = compose([*SMOKE, "seed=abc", "model.d_model=0", "data.batch_size=0"])
    assert sorted(p.split("=")[0] for p in config_problems(cfg)) == ["data.batch_size", "model.d_model", "seed"]


def test_defaults_are_valid_and_zero_steps_is_allowed(compose) -> None:
    assert config_problems(compose(SMOKE)) == []
    assert config_problems(compose(["experiment=coupledqk/mqar", "budget=smoke", "attention=coupled_qk",
                                    "model.attention.n_steps=0"])) == []


def test_cli_prints_one_message_without_traceback(tmp_path) -> None:
    env_results = f"paths.results_dir={tmp_path / 'results'}"
    proc = subprocess.run([sys.executable, "-m", "oscrepro.train", *SMOKE, env_results, "data.batch_size=0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "data.batch_size=0: must be an integer >= 1" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "results" / "runs").exists()  # (Hydra's own log dir, results/hydra, comes first)
