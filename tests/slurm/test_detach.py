"""Submit and come back: ``--detach`` submits the missing runs as one array and exits; ``--collect`` renders what
finished and says what is still queued, running or failed; a plain rebuild never submits a queued run again."""

from __future__ import annotations

import subprocess

import pytest

from oscrepro import table as table_cli
from tests.slurm.cluster import array_tasks, ended, ledger, status, table, table_runs, wait_for

pytestmark = pytest.mark.slurm


def _main(args: list[str]) -> int:
    """The table CLI in this process (no interpreter start-up per call): its exit status."""
    try:
        table_cli.main(args)
    except SystemExit as err:
        return 0 if err.code is None else err.code if isinstance(err.code, int) else 1
    return 0


def test_detach_then_collect(tmp_path, capsys):
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

    assert _main([*args, "--collect"]) != 0  # incomplete: the table is written with its missing runs flagged
    assert "collect: 3 runs: 3 queued" in capsys.readouterr().out
    assert "missing 1" in (results / "fqo" / "smoke" / "table2.md").read_text()

    assert _main([*args, "--launcher", "slurm_cpu"]) != 0  # a plain rebuild: the held jobs are not submitted twice
    assert "3 run(s) still queued or running as SLURM jobs" in capsys.readouterr().out
    assert len(ledger(results)) == 1

    subprocess.run(["scontrol", "release", entry["array"]], check=True)
    wait_for(f"array {entry['array']} to finish", lambda: ended(array_tasks(entry)))
    assert _main([*args, "--collect"]) == 0
    assert "collect: 3 runs: 3 ok" in capsys.readouterr().out
    assert all(status(r.run_dir)["status"] == "ok" for r in table_runs(results, []).values())
    assert "Runs:** 3 ok" in (results / "fqo" / "smoke" / "table2.md").read_text()
