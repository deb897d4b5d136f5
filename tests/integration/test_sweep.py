"""Hydra multirun end to end: a 2-seed sweep in which one job diverges still finishes every job."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_multirun_with_diverging_job_completes(tmp_path):
    cmd = [sys.executable, "-m", "oscrepro.train", "-m", "experiment=fqo/sva", "budget=smoke",
           "trainer.enable_progress_bar=false", f"paths.results_dir={tmp_path}", "seed=0,1",
           "task.debug_nan_step=null,2"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    statuses = sorted(json.loads(p.read_text())["status"] for p in (tmp_path / "runs").rglob("status.json"))
    assert statuses == ["diverged", "diverged", "ok", "ok"]
