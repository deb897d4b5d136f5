"""Submit and come back: ``--detach`` submits the missing runs as one array and exits; ``--collect`` renders what
finished and says what is still queued, running or failed; a plain rebuild never submits a queued run again."""

from __future__ import annotations

import subprocess

import pytest

from tests.slurm.cluster import ledger, queue_empty, status, table, table_runs, wait_for

pytestmark = pytest.mark.slurm


def test_detach_then_collect(tmp_path):
    results = tmp_path / "results"
    args = ["fqo/table2", "--budget", "smoke", "--results-dir", str(results)]
    # held (sbatch --hold) so that "queued" is certain when the first collect looks
    proc = table(*args, "--launcher", "slurm_cpu", "+hydra.launcher.additional_parameters.hold=true", "--detach")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "submitted 3 run(s) as SLURM array job" in proc.stdout
    collect_line = proc.stdout.strip().splitlines()[-1]
    assert collect_line.startswith("[table fqo/table2] collect with: python -m oscrepro.table fqo/table2")
    assert collect_line.endswith("--collect") and "--detach" not in collect_line
    assert not (results / "fqo").exists()  # nothing rendered yet: the runs have not trained
    (entry,) = ledger(results)

    queued = table(*args, "--collect")
    assert queued.returncode != 0 and "collect: 3 runs: 3 queued" in queued.stdout, queued.stdout + queued.stderr
    assert "missing 1" in (results / "fqo" / "smoke" / "table2.md").read_text()

    again = table(*args, "--launcher", "slurm_cpu")  # a plain rebuild: the held jobs are not submitted twice
    assert "3 run(s) still queued or running as SLURM jobs" in again.stdout, again.stdout + again.stderr
    assert again.returncode != 0 and len(ledger(results)) == 1

    subprocess.run(["scontrol", "release", entry["array"]], check=True)
    wait_for(f"array {entry['array']} to leave the queue", lambda: queue_empty(entry["array"]))
    done = table(*args, "--collect")
    assert done.returncode == 0 and "collect: 3 runs: 3 ok" in done.stdout, done.stdout + done.stderr
    assert all(status(r.run_dir)["status"] == "ok" for r in table_runs(results, []).values())
    assert "Runs:** 3 ok" in (results / "fqo" / "smoke" / "table2.md").read_text()
