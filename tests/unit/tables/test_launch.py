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
    with pytest.raises(ValueError, match="launcher='slurm'; valid: inprocess, joblib, submitit_slurm"):
        launch([object()], "slurm", Progress("x", 1, 0))  # type: ignore[list-item]
