"""Launcher configs for the table pool and the SLURM bookkeeping, without a scheduler: each Hydra launcher config
resolves to its pool, its options reach the sbatch script submitit writes, bad options are refused before anything
is written, and ended jobs turn into failed runs that name their SLURM state (tests/slurm runs the real thing)."""

from __future__ import annotations

import json
import shutil

import pytest
import submitit
from omegaconf import OmegaConf

from oscrepro import table as table_cli
from oscrepro.runs.record import RunRecord
from oscrepro.tables import slurm
from oscrepro.tables.aggregate import Cell
from oscrepro.tables.job import TrainJob
from oscrepro.tables.launch import _executor, resolve_launcher, split_launcher_overrides
from oscrepro.tables.plan import plan, unique_runs
from oscrepro.tables.render import format_cell
from oscrepro.tables.spec import load_spec


@pytest.fixture
def sbatch_on_path(monkeypatch):
    """A SLURM client 'on PATH' and submitit's srun check passed: what resolving and scripting need, no more."""
    real = shutil.which
    monkeypatch.setattr(
        shutil, "which", lambda name, *a, **k: f"/usr/bin/{name}" if name in ("sbatch", "srun") else real(name, *a, **k)
    )
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("inprocess", "inprocess"),
        ("joblib", "joblib"),
        ("joblib_2jobs", "joblib"),
        ("submitit_local", "submitit_local"),
        ("submitit_slurm", "submitit_slurm"),
        ("slurm_cpu", "submitit_slurm"),
        ("slurm_gpu", "submitit_slurm"),
    ],
)
def test_every_launcher_config_resolves_to_its_pool(name, kind, sbatch_on_path):
    pool = resolve_launcher(name)
    assert pool.kind == kind and "_target_" not in pool.params
    if name == "joblib_2jobs":
        assert pool.params["n_jobs"] == 2


def _script(pool, tmp_path) -> str:
    executor, _ = _executor(pool, tmp_path / "results", "fqo/table2")
    return executor._executor._make_submission_file_text("python -m job", "uid")


def test_launcher_options_reach_the_sbatch_script(tmp_path, sbatch_on_path):
    pool = resolve_launcher(
        "slurm_cpu",
        [
            "hydra.launcher.timeout_min=17",
            "hydra.launcher.partition=cpu",
            "hydra.launcher.mem_gb=4",
            "hydra.launcher.gpus_per_node=1",
            "hydra.launcher.signal_delay_s=45",
            "hydra.launcher.cpus_per_task=3",
            "+hydra.launcher.additional_parameters.comment=oscrepro",
        ],
    )
    text = _script(pool, tmp_path)
    for line in (
        "--time=17",
        "--partition=cpu",
        "--mem=4GB",
        "--gpus-per-node=1",
        "--signal=USR2@45",
        "--cpus-per-task=3",
        "--comment=oscrepro",
        "--job-name=oscrepro-fqo-table2",
    ):
        assert f"#SBATCH {line}\n" in text, (line, text)
    # job folders under the results dir, not Hydra's sweep dir
    assert f"#SBATCH --output={tmp_path / 'results' / 'submitit'}/%j/%j_0_log.out" in text
    executor, _ = _executor(pool, tmp_path, "t")
    assert executor._executor.max_num_timeout == 3  # slurm_cpu requeues after a time limit


def test_submitit_slurm_gets_the_plugins_defaults_not_submitits_bare_ones(tmp_path, sbatch_on_path):
    """Called without options, submitit gives --time=5: every run over ~3.5 min was killed (the issue)."""
    pool = resolve_launcher("submitit_slurm")
    assert "#SBATCH --time=60\n" in _script(pool, tmp_path)
    executor, _ = _executor(pool, tmp_path, "t")
    assert executor._executor.max_num_timeout == 0  # the plugin's config unchanged: a time limit ends the job


def test_launcher_overrides_are_split_from_run_overrides():
    run, ours = split_launcher_overrides(
        ["trainer=gpu", "hydra.launcher.timeout_min=3", "seed=1", "+hydra.launcher.additional_parameters.hold=true"]
    )
    assert run == ["trainer=gpu", "seed=1"]
    assert ours == ["hydra.launcher.timeout_min=3", "+hydra.launcher.additional_parameters.hold=true"]


def test_a_misspelled_launcher_key_is_refused_before_anything_is_written(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        table_cli.main(
            [
                "fqo/table2",
                "--budget",
                "smoke",
                "--launcher",
                "submitit_slurm",
                "--results-dir",
                str(tmp_path / "r"),
                "hydra.launcher.timeot_min=3",
            ]
        )
    assert exit_info.value.code == table_cli.BAD_INPUT_EXIT
    err = capsys.readouterr().err.strip()
    assert "hydra.launcher.timeot_min" in err and "\n" not in err
    assert not (tmp_path / "r").exists()


def test_detach_needs_a_slurm_launcher(tmp_path):
    with pytest.raises(SystemExit, match="--detach submits SLURM jobs; --launcher inprocess does not"):
        table_cli.main(["fqo/table2", "--budget", "smoke", "--results-dir", str(tmp_path / "r"), "--detach"])
    assert not (tmp_path / "r" / "runs").exists()


def test_a_failed_cell_names_the_slurm_state():
    assert (
        format_cell(Cell(n_runs=2, n=1, mean=1.0, n_failed=1, failed_as=["CANCELLED"]), 1)
        == "1.0 (n=1) [failed 1 (CANCELLED)]"
    )
    assert format_cell(Cell(n_runs=1, n_failed=1), 1) == "— (n=0) [failed 1]"


def test_state_word():
    assert slurm.state_word("CANCELLED by 0") == "CANCELLED"
    assert slurm.state_word("") == "UNKNOWN"


def test_an_ended_job_marks_its_unfinished_run_failed_once(tmp_path):
    run = tmp_path / "run"
    assert not slurm.mark_ended(run, "7_1", "RUNNING", "f/%j")  # live: nothing written
    assert not slurm.mark_ended(run, "7_1", "COMPLETED", "f/%j") and not run.exists()
    assert slurm.mark_ended(run, "7_1", "CANCELLED by 0", "f/%j")  # never started: a record that says so
    status = RunRecord(run).status()
    assert (
        status["status"] == "failed"
        and status["slurm_state"] == "CANCELLED"
        and "f/7_1/7_1_0_log.err" in status["reason"]
    )
    assert not slurm.mark_ended(run, "7_1", "CANCELLED by 0", "f/%j")  # recorded once
    own = tmp_path / "own"
    RunRecord(own).start(OmegaConf.create({}), {})
    RunRecord(own).finish("failed", {}, {"reason": "ValueError: boom"})
    assert slurm.mark_ended(own, "8_0", "TIMEOUT", "f/%j")
    assert RunRecord(own).status()["reason"].startswith("ValueError: boom; then SLURM job 8_0 ended TIMEOUT")
    done = tmp_path / "done"
    RunRecord(done).start(OmegaConf.create({}), {})
    RunRecord(done).finish("ok", {}, {})
    assert not slurm.mark_ended(done, "9_0", "NODE_FAIL", "f/%j") and RunRecord(done).status()["status"] == "ok"


def test_queued_runs_are_not_submitted_again_and_collect_says_what_each_job_became(tmp_path, monkeypatch, capsys):
    """A ledger for fqo Table 2's three runs (older submission first); sacct says: one queued, one running, one
    cancelled (stand-ins for sacct's answers, keyed by the newest job of each run)."""
    reqs = unique_runs(plan(load_spec("fqo/table2"), "smoke", [f"paths.results_dir={tmp_path}"]))
    ledger = tmp_path / "submitit" / "submissions"
    ledger.mkdir(parents=True)
    (ledger / "1.json").write_text(
        json.dumps({"submitted": 1.0, "folder": "f/%j", "runs": {str(r.run_dir): f"1_{i}" for i, r in enumerate(reqs)}})
    )
    (ledger / "2.json").write_text(
        json.dumps({"submitted": 2.0, "folder": "f/%j", "runs": {str(reqs[2].run_dir): "2_0"}})
    )
    answers = {"1_0": "PENDING", "1_1": "RUNNING", "2_0": "CANCELLED by 0"}
    monkeypatch.setattr(slurm, "job_states", lambda ids: {j: answers[j] for j in ids})
    assert slurm.without_live_jobs("fqo/table2", reqs) == [reqs[2]]
    assert "2 run(s) still queued or running as SLURM jobs (1_0 PENDING, 1_1 RUNNING)" in capsys.readouterr().out
    assert RunRecord(reqs[2].run_dir).status()["slurm_job"] == "2_0"  # the newest job of that run
    counts = slurm.collect("fqo/table2", reqs)
    assert counts == {"queued": 1, "running": 1, "failed (CANCELLED)": 1}
    assert "collect: 3 runs: 1 queued, 1 running, 1 failed (CANCELLED)" in capsys.readouterr().out


def test_a_signalled_job_resubmits_itself_with_the_same_config():
    cfg = OmegaConf.create({"paths": {"runs_dir": "/nonexistent"}, "experiment_name": "x", "seed": 0})
    job = TrainJob()
    assert isinstance(job, submitit.helpers.Checkpointable)
    again = job.checkpoint(cfg)
    assert again.function is job and again.args == (cfg,)
