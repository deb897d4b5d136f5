"""Multi-process training (trainer=ddp, two CPU processes over gloo) runs to a complete record and gives the metrics
of one process trained on the same global batches.

The DDP run: 2 ranks x batch 32, each rank training on its slice of every global batch of 64 and evaluating whole
batches round-robin, evaluation metrics gathered over both ranks. The reference: one process, batch 64, the same
global batches. Gradients are averaged across ranks (DDP) instead of summed in one batch, so the metrics agree to
float tolerance, not bit for bit.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from oscrepro.train import train

ROOT = Path(__file__).resolve().parents[2]
RUN = ["experiment=fqo/sva", "budget=smoke", "trainer.max_epochs=2", "trainer.limit_val_batches=null",
       "trainer.limit_test_batches=null", "trainer.enable_progress_bar=false"]


def test_ddp_two_processes_match_one_process_on_the_same_global_batch(compose, tmp_path):
    cmd = [sys.executable, "-m", "oscrepro.train", *RUN, "trainer=ddp", "data.batch_size=32",
           f"paths.results_dir={tmp_path / 'ddp'}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (status_path,) = (tmp_path / "ddp" / "runs").rglob("status.json")  # rank 0 alone wrote a record
    assert json.loads(status_path.read_text())["status"] == "ok"
    ddp = json.loads((status_path.parent / "metrics.json").read_text())
    assert ddp["world_size"] == 2 and ddp["epochs"] == 2

    one = train(compose([*RUN, "data.batch_size=64", f"paths.results_dir={tmp_path / 'one'}"]))
    keys = sorted(k for k in one if k.startswith(("val/", "test/")))
    assert keys and {k for k in ddp if k.startswith(("val/", "test/"))} == set(keys)
    for k in keys:
        assert math.isclose(ddp[k], one[k], rel_tol=1e-4, abs_tol=1e-6), (k, ddp[k], one[k])
