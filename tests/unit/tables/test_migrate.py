"""The run-record migration moves a pre-restructuring fsn record to the run dir the engine now plans for it."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from oscrepro.runs.record import run_id
from oscrepro.tables.migrate import migrate
from oscrepro.tables.plan import plan
from oscrepro.tables.spec import load_spec

OLD = Path(__file__).resolve().parents[2] / "fixtures" / "pre_restructuring_fsn_record.yaml"
CELL = "fsn/table1|cpu|codeparrot — Transformer (RoPE, SwiGLU)|bpc|0"
# The fixture was trained at the cpu budget of its day (batch 16, 3 epochs on the first 10,496 characters); the cpu
# budget has since changed (issue 16: 2,000 steps on the whole split), so the plan is asked for that old budget.
OLD_CPU_BUDGET = ["data.max_chars=10496", "data.batch_size=16", "trainer.max_epochs=3", "~trainer.max_steps",
                  "~trainer.val_check_interval", "trainer.limit_val_batches=null", "trainer.limit_test_batches=null",
                  "trainer.log_every_n_steps=5"]


def test_old_record_lands_where_the_new_plan_looks(tmp_path):
    old_cfg = OmegaConf.merge(OmegaConf.load(OLD), {"paths": {"runs_dir": str(tmp_path / "runs")}})
    assert old_cfg.experiment_name == "fsn/codeparrot_transformer"
    old_dir = tmp_path / "runs" / old_cfg.experiment_name / run_id(old_cfg)
    old_dir.mkdir(parents=True)
    (old_dir / "config.yaml").write_text(OmegaConf.to_yaml(old_cfg))
    (old_dir / "status.json").write_text(json.dumps({"status": "ok"}))

    spec = load_spec("fsn/table1")
    row = next(i for i, r in enumerate(spec.rows) if r.label == CELL.split("|")[2])
    req = plan(spec, "cpu", [f"paths.results_dir={tmp_path}", *OLD_CPU_BUDGET])[(row, "bpc")][0]
    assert not req.record.finished()
    moved = migrate(tmp_path)
    assert moved == [(old_dir, req.run_dir)]
    assert req.record.finished() and not old_dir.exists()
    assert OmegaConf.load(req.run_dir / "config.yaml").experiment_name == "fsn/charlm"
    assert migrate(tmp_path) == []  # idempotent
