"""The wandb logger of a run: its id is the run id (a resumed run continues the same wandb run), its config the
hashed payload plus the run id, its folder the results dir (offline runs in results/wandb/offline-run-*), and no
``anonymous`` key reaches wandb.init (wandb 0.31 warns on any value). No wandb run is started here."""

from __future__ import annotations

import os

from lightning.pytorch.loggers import CSVLogger, WandbLogger

from oscrepro.runs.compose import compose_run
from oscrepro.runs.loggers import WANDB_DEFAULTS, run_loggers
from oscrepro.runs.record import hashed_payload, run_dir


def test_wandb_logger_carries_run_id_config_and_resume(tmp_path, monkeypatch):
    for var in WANDB_DEFAULTS:  # unset for the test, restored after it (setenv first records the original)
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    cfg = compose_run(["experiment=fqo/sva", "budget=smoke", "logger=wandb", f"paths.results_dir={tmp_path}"])
    rd = run_dir(cfg)
    csv, wandb = run_loggers(cfg, rd)
    assert isinstance(csv, CSVLogger) and isinstance(wandb, WandbLogger)
    init = wandb._wandb_init
    assert init["id"] == rd.name and init["resume"] == "allow"
    assert init["config"] == {**hashed_payload(cfg), "run_id": rd.name, "record": str(rd)}
    assert init["config"]["model"]["d_model"] == cfg.model.d_model
    assert init["dir"] == str(tmp_path) and tmp_path.is_dir()  # wandb writes <dir>/wandb/offline-run-*
    assert "anonymous" not in init
    assert (init["group"], init["job_type"], init["tags"]) == ("adhoc/fqo/sva", "fqo", ["fqo", "adhoc", "seed=0"])
    assert os.environ["WANDB_MODE"] == "offline"  # never the network unless the user asks


def test_csv_only_by_default(tmp_path):
    cfg = compose_run(["experiment=fqo/sva", "budget=smoke", f"paths.results_dir={tmp_path}"])
    (csv,) = run_loggers(cfg, run_dir(cfg))
    assert isinstance(csv, CSVLogger) and csv.log_dir == str(run_dir(cfg) / "logs")
