"""One pool per table: workers x threads = cores, every missing run in the same pool, progress per finished run."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from oscrepro.table import build_table
from oscrepro.tables.launch import Progress, cores, launch, plan_workers
from oscrepro.tables.plan import plan, unique_runs
from oscrepro.tables.spec import load_spec


@pytest.mark.parametrize(("runs", "cores", "want"), [(9, 2, (2, 1)), (1, 2, (1, 2)), (5, 8, (5, 1)), (3, 16, (3, 5)),
                                                     (0, 2, (1, 2))])
def test_workers_times_threads_fit_the_cores(runs, cores, want):
    workers, threads = plan_workers(runs, cores)
    assert (workers, threads) == want and workers * threads <= cores


def test_max_workers_caps_the_pool():
    assert plan_workers(9, 8, max_workers=2) == (2, 4)


def test_progress_line_counts_runs_and_failures(capsys):
    p = Progress("fqo/table2", total=4, done=1)
    p.update(status="ok")
    p.update(status="diverged")
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("[table fqo/table2] 2/4 runs done, ETA")
    assert out[1].startswith("[table fqo/table2] 3/4 runs done, 1 diverged, ETA")


def test_joblib_pool_trains_every_missing_run_of_a_table_once(tmp_path, capsys):
    """fqo/table2 at smoke: 3 cells x 1 seed in one pool (2 worker processes x 1 thread on a 2-core machine)."""
    results = tmp_path / "results"
    workers, threads = plan_workers(3, cores())
    build_table("fqo/table2", budget="smoke", launcher="joblib", results_dir=results)
    out = capsys.readouterr().out
    assert f"{workers} worker process(es) x {threads} thread(s)" in out and "3/3 runs done" in out
    runs = unique_runs(plan(load_spec("fqo/table2"), "smoke", [f"paths.results_dir={results}"]))
    assert all(r.record.status()["status"] == "ok" for r in runs)
    # the pool gave each worker cores // workers threads (torch_threads is not in the run id)
    assert [OmegaConf.load(r.run_dir / "config.yaml").torch_threads for r in runs] == [threads] * 3
    build_table("fqo/table2", budget="smoke", launcher="joblib", results_dir=results)
    assert "0 to train" in capsys.readouterr().out


def test_unknown_launcher_is_one_clear_error():
    with pytest.raises(ValueError, match="launcher='slurm'; valid: inprocess, joblib, submitit_local, submitit_slurm"):
        launch([object()], "slurm", Progress("x", 1, 0))  # type: ignore[list-item]


def test_a_build_with_missing_runs_exits_non_zero(tmp_path, monkeypatch, capsys):
    """A launcher whose runs never finish (here: a stub that records nothing) leaves cells missing: the table is
    still written, the sweep line counts the failures, and the command exits non-zero naming a cell."""
    from oscrepro import table as table_cli
    from oscrepro.tables import launch as launch_mod

    monkeypatch.setattr(launch_mod, "_train", lambda cfg: {"status": "failed"})
    with pytest.raises(SystemExit, match="incomplete: .* cell"):
        table_cli.main(["fqo/table2", "--budget", "smoke", "--results-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "failed" in out and (tmp_path / "fqo" / "smoke" / "table2.md").exists()


def test_a_complete_table_has_no_incomplete_cells(tmp_path):
    from oscrepro.tables.build import incomplete_cells

    csv_path = tmp_path / "t.csv"
    csv_path.write_text("row,column,n_failed,n_missing\nA,x,0,0\nB,x,0,0\n")
    assert incomplete_cells(csv_path) == []
    csv_path.write_text("row,column,n_failed,n_missing\nA,x,0,0\nB,x,1,0\n")
    assert incomplete_cells(csv_path) == ["B / x"]


def test_submitit_slurm_without_a_cluster_is_one_message_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """No ``sbatch`` on PATH: the build stops before planning, with one line, exit status non-zero."""
    import shutil

    from oscrepro import table as table_cli

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(SystemExit) as exit_info:
        table_cli.main(["fqo/table2", "--budget", "smoke", "--launcher", "submitit_slurm", "--results-dir",
                        str(tmp_path / "results")])
    message = str(exit_info.value.code)
    assert message.startswith("[table fqo/table2] --launcher submitit_slurm needs a SLURM cluster")
    assert "\n" not in message and "joblib" in message
    assert not (tmp_path / "results").exists() and "runs done" not in capsys.readouterr().out


def test_submitit_local_builds_a_table_through_submitit_jobs(tmp_path, capsys):
    """fqo/table2 at smoke through submitit's local executor: 3 jobs, at most 2 at a time, each with its own
    submitit folder under <results>/submitit, and every run record ok."""
    results = tmp_path / "results"
    path = build_table("fqo/table2", budget="smoke", launcher="submitit_local", results_dir=results)
    out = capsys.readouterr().out
    assert "submitit local:" in out and "3/3 runs done" in out and "failed" not in out
    runs = unique_runs(plan(load_spec("fqo/table2"), "smoke", [f"paths.results_dir={results}"]))
    assert all(r.record.status()["status"] == "ok" for r in runs)
    assert len(list((results / "submitit").glob("*/*_result.pkl"))) == 3
    assert "Runs:** 3 ok" in path.read_text()


def test_ddp_runs_are_refused_by_in_process_launchers(tmp_path):
    """Lightning's DDP launcher re-runs the command line per rank: inside a table build that would be the build."""
    from oscrepro.tables.launch import LauncherUnavailableError

    with pytest.raises(LauncherUnavailableError, match="python -m oscrepro.train ... trainer=ddp"):
        build_table("fqo/table2", budget="smoke", extra=["trainer=ddp"], results_dir=tmp_path / "r")
    assert not (tmp_path / "r" / "runs").exists()


def test_render_only_trains_nothing_and_flags_missing_runs(tmp_path, monkeypatch, capsys):
    """--render-only: no run is trained (a trainer that would fail the test is never called), the table is written
    with its missing runs flagged, and the command exits non-zero because cells are incomplete."""
    from oscrepro import table as table_cli
    from oscrepro.tables import launch as launch_mod

    def never(*args, **kwargs):
        raise AssertionError("render-only must not train")

    monkeypatch.setattr(launch_mod, "_train", never)
    with pytest.raises(SystemExit, match="incomplete"):
        table_cli.main(["fqo/table2", "--budget", "smoke", "--results-dir", str(tmp_path), "--render-only"])
    assert "3 missing (render only: not trained)" in capsys.readouterr().out
    assert "missing" in (tmp_path / "fqo" / "smoke" / "table2.md").read_text()
