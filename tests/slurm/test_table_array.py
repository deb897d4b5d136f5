"""A table build as one SLURM array: the launcher config's options reach the submitted script, the runs give the
numbers an in-process build gives, and a job cancelled with scancel is a failed cell that names it."""

from __future__ import annotations

import subprocess

import pytest
from omegaconf import OmegaConf

from oscrepro.table import build_table
from tests.slurm.cluster import final_metrics, ledger, md_row, status, table, table_popen, table_runs, wait_for

pytestmark = pytest.mark.slurm

OPTIONS = [
    "hydra.launcher.timeout_min=17",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.signal_delay_s=45",
    "hydra.launcher.array_parallelism=2",
    "+hydra.launcher.additional_parameters.comment=oscrepro-test",
]


def test_fqo_table2_builds_as_one_array_with_the_launcher_options_in_its_script(tmp_path):
    results = tmp_path / "slurm"
    proc = table(
        "fqo/table2", "--budget", "smoke", "--launcher", "submitit_slurm", "--results-dir", str(results), *OPTIONS
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (entry,) = ledger(results)  # one submission: the 3 runs as one array
    assert len(entry["runs"]) == 3 and {j.split("_")[0] for j in entry["runs"].values()} == {entry["array"]}
    (script,) = (results / "submitit").glob("*/*_submission.sh")  # job folders stay under the results dir
    text = script.read_text()
    for line in ("--time=17", "--cpus-per-task=1", "--signal=USR2@45", "--array=0-2%2", "--comment=oscrepro-test"):
        assert f"#SBATCH {line}\n" in text, (line, text)
    runs = table_runs(results, [])
    assert all(status(r.run_dir)["status"] == "ok" for r in runs.values())
    # each job trained at the threads it asked for (cpus_per_task)
    assert {OmegaConf.load(r.run_dir / "config.yaml").torch_threads for r in runs.values()} == {1}
    # the same numbers, bit for bit, as an in-process build of the same table
    build_table("fqo/table2", budget="smoke", results_dir=tmp_path / "local")
    local = table_runs(tmp_path / "local", [])
    assert {k: final_metrics(r.run_dir) for k, r in runs.items()} == {
        k: final_metrics(r.run_dir) for k, r in local.items()
    }


def test_a_cancelled_job_is_a_failed_cell_naming_it_and_the_build_exits_non_zero(tmp_path):
    results = tmp_path / "results"
    # ~30 s of training per run (0.15 s an epoch here): the victim is cancelled seconds after it starts, and must
    # not finish within SLURM's KillWait (5 s, scripts/slurm_up.sh) of the SIGTERM; 20 epochs (~5 s) sometimes did
    longer = ["trainer.max_epochs=200", "trainer.limit_train_batches=16"]
    build = table_popen(
        "fqo/table2",
        "--budget",
        "smoke",
        "--launcher",
        "slurm_cpu",
        "--results-dir",
        str(results),
        *longer,
        log=tmp_path / "build.log",
    )
    runs = table_runs(results, longer)
    entry = wait_for("the array's ledger entry", lambda: ledger(results) and ledger(results)[0])
    job_of = {run: job for run, job in entry["runs"].items()}
    victim = wait_for(
        "a run in training",
        lambda: next((r for r in runs.values() if status(r.run_dir).get("status") == "running"), None),
    )
    subprocess.run(["scancel", job_of[str(victim.run_dir)]], check=True)
    assert build.wait(timeout=600) != 0  # the table is written, but a cell has a failed run
    out = (tmp_path / "build.log").read_text()
    assert "incomplete: " in out, out[-3000:]
    recorded = status(victim.run_dir)
    assert recorded["status"] == "failed" and recorded["slurm_state"] == "CANCELLED", recorded
    md = results / "fqo" / "smoke" / "table2.md"
    for label, req in runs.items():
        if req is victim:
            assert "[failed 1 (CANCELLED)]" in md_row(md, label)
        else:
            assert status(req.run_dir)["status"] == "ok" and "failed" not in md_row(md, label)
