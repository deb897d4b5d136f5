"""Helpers of the SLURM tests: the scheduler's state, the table CLI as a subprocess, job states and waits.

Waits poll with a generous deadline and fail naming what did not happen (never an assert on a duration)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def scheduler_problem() -> str | None:
    """Why no SLURM scheduler answers here (no client, controller down, no usable node), or None."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "the SLURM client commands (sinfo, sbatch) are not on PATH"
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return f"sinfo failed: {proc.stderr.strip() or proc.stdout.strip()}"
    states = set(proc.stdout.split())
    if not states & {"idle", "mixed", "allocated", "completing"}:
        return f"no node can run jobs (node states: {', '.join(sorted(states)) or 'none'})"
    if subprocess.run(["sacct", "-n", "-X", "-S", "now"], capture_output=True, timeout=60).returncode != 0:
        return "sacct fails: job accounting (slurmdbd) is not up, and failed jobs would stay UNKNOWN"
    return None


def table(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m oscrepro.table <args>`` from the repo root, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "oscrepro.table", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def table_popen(*args: str, log: Path) -> subprocess.Popen:
    """The table CLI in the background, stdout and stderr into ``log``."""
    fh = open(log, "w")  # noqa: SIM115 -- closed with the process by the caller's wait
    return subprocess.Popen(
        [sys.executable, "-m", "oscrepro.table", *args],
        cwd=ROOT,
        stdout=fh,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def wait_for(what: str, check: Callable[[], Any], deadline_s: float = 300, every_s: float = 0.5) -> Any:
    """Poll ``check`` until it returns something truthy (returned); fail naming ``what`` at the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {deadline_s:.0f} s waiting for {what}")


def ledger(results: Path) -> list[dict[str, Any]]:
    """Every submission the engine recorded under ``results`` (oscrepro.tables.slurm), oldest first."""
    entries = [json.loads(p.read_text()) for p in (results / "submitit" / "submissions").glob("*.json")]
    return sorted(entries, key=lambda e: e["submitted"])


def states(job_ids: list[str], duplicates: bool = False) -> dict[str, list[str]]:
    """``job id -> its sacct states`` (one per attempt with ``duplicates``, i.e. ``sacct -D``: a requeued job
    shows REQUEUED, then its later attempts)."""
    cmd = ["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(sorted({j.split("_")[0] for j in job_ids}))]
    out = subprocess.run(cmd + (["-D"] if duplicates else []), capture_output=True, text=True, check=True).stdout
    found: dict[str, list[str]] = {j: [] for j in job_ids}
    for line in out.splitlines():
        job, state = line.split("|")[:2]
        if job in found:
            found[job].append(state.split()[0])
    return found


def ended(job_ids: list[str]) -> dict[str, list[str]] | None:
    """Every attempt's sacct state of each job (``sacct -D``) once every job has left the queue and accounting has
    its end, else None (a job leaves squeue a moment before sacct records how it ended, and a preempted attempt
    ends PREEMPTED in sacct while the job waits in the queue for its next one)."""
    from oscrepro.tables.slurm import LIVE

    queued = subprocess.run(
        ["squeue", "-h", "-o", "%i", "-j", ",".join(sorted({j.split("_")[0] for j in job_ids}))],
        capture_output=True,
        text=True,
    ).stdout.split()
    if queued:
        return None
    found = states(job_ids, duplicates=True)
    return found if all(v and v[-1] not in LIVE for v in found.values()) else None


def array_tasks(entry: dict[str, Any]) -> list[str]:
    """The job ids of a ledger entry (one per run)."""
    return sorted(entry["runs"].values())


def status(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "status.json"
    return json.loads(path.read_text()) if path.exists() else {}


def final_metrics(run_dir: str | Path) -> dict[str, float]:
    """A run's final val/test metrics (what a resumed run must reproduce bit for bit)."""
    metrics = json.loads((Path(run_dir) / "metrics.json").read_text())
    return {k: v for k, v in metrics.items() if k.startswith(("val/", "test/"))}


def table_runs(results: Path, overrides: list[str]) -> dict[str, Any]:
    """fqo Table 2 at smoke with ``overrides``: ``row label -> RunRequest`` (one seed per cell at smoke), planned
    as a build plans them (same run ids)."""
    from oscrepro.tables.plan import plan
    from oscrepro.tables.spec import load_spec

    spec = load_spec("fqo/table2")
    cells = plan(spec, "smoke", [f"paths.results_dir={results}", *overrides])
    return {spec.rows[ri].label: reqs[0] for (ri, col), reqs in cells.items() if col == spec.columns[0].name}


def md_row(md: Path, label: str) -> str:
    """The line of the rendered table ``md`` whose condition is ``label``."""
    (line,) = [ln for ln in md.read_text().splitlines() if ln.startswith(f"| {label} |")]
    return line
