"""Multi-process training inside an sbatch allocation: ``srun`` starts one task per rank and Lightning's SLURM
environment makes them one DDP run (2 tasks on the local node), with the metrics of one process trained on the
same global batches (to float tolerance: gradients are averaged across ranks, tests/integration/test_ddp.py)."""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys

import pytest

from oscrepro.train import train
from tests.integration.test_ddp import RUN
from tests.slurm.cluster import ROOT, ended, status, wait_for

pytestmark = pytest.mark.slurm


def test_two_task_ddp_through_srun_matches_one_process(tmp_path, compose):
    command = [
        sys.executable,
        "-m",
        "oscrepro.train",
        *RUN,
        "trainer=ddp",
        "data.batch_size=32",
        f"paths.results_dir={tmp_path / 'ddp'}",
    ]
    script = tmp_path / "ddp.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=2\n#SBATCH --cpus-per-task=1\n"
        f"#SBATCH --time=10\n#SBATCH --chdir={ROOT}\n#SBATCH --output={tmp_path / 'ddp.log'}\n"
        f"srun --label {shlex.join(command)}\n"
    )  # --label: each line says which task printed it
    job = subprocess.run(
        ["sbatch", "--parsable", str(script)], capture_output=True, text=True, check=True
    ).stdout.strip()
    one = train(compose([*RUN, "data.batch_size=64", f"paths.results_dir={tmp_path / 'one'}"]))
    attempts = wait_for(f"job {job} to finish", lambda: ended([job]))[job]
    log = (tmp_path / "ddp.log").read_text()
    assert attempts == ["COMPLETED"], log[-3000:]
    # rank 1 is srun's task 1, not a process that rank 0 started (Lightning's own launcher outside SLURM)
    assert "1: Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in log, log[-3000:]
    assert "0: Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2" in log
    (record,) = (tmp_path / "ddp" / "runs").rglob("status.json")  # rank 0 alone wrote a record
    assert status(record.parent)["status"] == "ok"
    ddp = json.loads((record.parent / "metrics.json").read_text())
    assert ddp["world_size"] == 2 and ddp["epochs"] == 2
    keys = sorted(k for k in one if k.startswith(("val/", "test/")))
    assert keys and {k for k in ddp if k.startswith(("val/", "test/"))} == set(keys)
    for k in keys:
        assert math.isclose(ddp[k], one[k], rel_tol=1e-4, abs_tol=1e-6), (k, ddp[k], one[k])
