"""SLURM jobs of a table build: the submission ledger, and what each run's job became (queued, running, or ended
in a SLURM failure state, which the run's record names). The jobs themselves run :class:`oscrepro.tables.job.TrainJob`,
which requeues on a time limit or preemption.

* **Ledger.** Each submission writes ``<results>/submitit/submissions/<array id>.json`` (table, folder, one job id
  per run dir), so that a later build or ``--collect`` finds each run's newest job without the process that
  submitted it, which may have exited (``--detach``) or been killed.
* **States.** :func:`job_states` asks ``sacct`` (through submitit's watcher, which reads array ranges) for the
  newest job of every unfinished run. A job still :data:`LIVE` is not submitted again. A job that ended in one of
  :data:`FAILURE_STATES` without a finished record turns that record into ``failed`` with ``slurm_state`` (and the
  job's log in the reason): the table cell says ``failed 1 (CANCELLED)``, the build exits non-zero, and the next
  build trains the run again (resuming from its checkpoint when it has one).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import submitit
from submitit.slurm.slurm import SlurmJob

from oscrepro.runs.lookup import RunRequest
from oscrepro.runs.record import RunRecord, atomic_write_text

# sacct states (first word: "CANCELLED by 0") of a job that may still train its run
LIVE = frozenset(
    {
        "PENDING",
        "RUNNING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "CONFIGURING",
        "COMPLETING",
        "RESIZING",
        "SUSPENDED",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)
# states of a job that ended without its run finishing: the run's cell counts it as failed, naming the state
FAILURE_STATES = frozenset(
    {"CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "FAILED", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED"}
)


def state_word(state: str) -> str:
    """The state itself: ``CANCELLED by 0`` -> ``CANCELLED``, ``UNKNOWN`` when sacct has none."""
    return (state or "UNKNOWN").split()[0].upper()


def ledger_dir(results: Path) -> Path:
    return Path(results) / "submitit" / "submissions"


def record_submission(table: str, reqs: list[RunRequest], jobs: list[submitit.Job], folder: str, launcher: str) -> Path:
    """Write the ledger entry of one array submission (one job per run, same order); returns its path."""
    results = Path(str(reqs[0].cfg.paths.results_dir))
    array_id = jobs[0].job_id.split("_")[0]
    path = ledger_dir(results) / f"{array_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        path,
        json.dumps(
            {
                "array": array_id,
                "table": table,
                "launcher": launcher,
                "folder": folder,
                "submitted": time.time(),
                "runs": {str(r.run_dir): j.job_id for r, j in zip(reqs, jobs, strict=True)},
            },
            indent=1,
        ),
    )
    return path


def newest_jobs(reqs: Iterable[RunRequest]) -> dict[Path, tuple[str, str]]:
    """``run dir -> (job id, submitit folder)`` of the newest submission of each run in ``reqs`` that has one
    (ledgers under each run's results dir); empty when nothing was ever submitted there (no sacct call)."""
    wanted = {Path(str(r.run_dir)): Path(str(r.cfg.paths.results_dir)) for r in reqs}
    entries = []
    for folder in {ledger_dir(res) for res in wanted.values()}:
        if folder.is_dir():
            entries += [json.loads(p.read_text()) for p in folder.glob("*.json")]
    out: dict[Path, tuple[str, str]] = {}
    for entry in sorted(entries, key=lambda e: e["submitted"]):  # newer submissions win
        for run, job_id in entry["runs"].items():
            if Path(run) in wanted:
                out[Path(run)] = (job_id, entry["folder"])
    return out


def job_states(job_ids: Iterable[str]) -> dict[str, str]:
    """``job id -> sacct state`` (full text, e.g. ``CANCELLED by 0``; ``UNKNOWN`` when sacct has no record) in one
    forced sacct call for all of them."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    for job_id in ids:
        SlurmJob.watcher.register_job(job_id)
    SlurmJob.watcher.update()
    states = {j: SlurmJob.watcher.get_state(j, mode="cache") for j in ids}
    unknown = [j for j, s in states.items() if state_word(s) == "UNKNOWN"]
    return {**states, **queue_states(unknown)} if unknown else states


def queue_states(job_ids: list[str]) -> dict[str, str]:
    """``job id -> squeue state`` of the jobs the queue still lists (one line per array task), for jobs sacct does
    not know yet: slurmdbd records a held job (``sbatch --hold``, priority 0) only once it is released, so sacct
    says nothing of it while squeue shows it PENDING. Jobs the queue no longer lists are left out."""
    bases = sorted({j.split("_")[0] for j in job_ids})
    try:
        out = subprocess.run(["squeue", "-h", "-r", "-o", "%i %T", "-j", ",".join(bases)], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    listed = dict(line.split(maxsplit=1) for line in out.stdout.splitlines() if len(line.split()) == 2)
    return {j: listed[j] for j in job_ids if j in listed}


def log_path(folder: str, job_id: str) -> Path:
    """Where submitit writes the stderr of task 0 of ``job_id`` (``%j`` in the folder is the job id)."""
    return Path(folder.replace("%j", job_id)) / f"{job_id}_0_log.err"


def mark_ended(req_dir: Path, job_id: str, state: str, folder: str) -> bool:
    """Record the run at ``req_dir`` as ``failed`` naming its job's SLURM state, when the job ended in one of
    :data:`FAILURE_STATES` and the run has no finished record (a cancelled job that never started gets a record
    that says so). Returns whether it did."""
    word = state_word(state)
    record = RunRecord(req_dir)
    if word not in FAILURE_STATES or record.finished() or record.status().get("slurm_job") == job_id:
        return False  # still live or completed, finished, or this job's end is recorded already
    req_dir.mkdir(parents=True, exist_ok=True)
    own = record.status()
    # a run that recorded its own failure keeps its reason (and traceback); the job's end is added to it
    mine = own.get("status") == "failed" and own.get("reason")
    ended = (
        f"SLURM job {job_id} ended {state}{'' if mine else ' before the run finished'}; its log: "
        f"{log_path(folder, job_id)}"
    )
    reason = f"{own['reason']}; then {ended}" if mine else ended
    record.update_status({"status": "failed", "slurm_state": word, "slurm_job": job_id, "reason": reason})
    return True


def without_live_jobs(key: str, reqs: list[RunRequest]) -> list[RunRequest]:
    """``reqs`` less the runs whose newest SLURM job is queued or running (said in one line): a build never
    submits a run twice. Ended jobs' runs are recorded by :func:`mark_ended` first (so a cancelled run counts as
    failed in this build's table if it is not trained again here)."""
    jobs = newest_jobs(reqs)
    if not jobs:
        return reqs
    states = job_states(j for j, _ in jobs.values())
    live = []
    for run, (job_id, folder) in jobs.items():
        if state_word(states[job_id]) in LIVE:
            live.append(f"{job_id} {state_word(states[job_id])}")
        else:
            mark_ended(run, job_id, states[job_id], folder)
    if live:
        print(
            f"[table {key}] {len(live)} run(s) still queued or running as SLURM jobs ({', '.join(live)}): not "
            f"submitted again; collect them later with --collect",
            flush=True,
        )
    live_dirs = {run for run, (job_id, _) in jobs.items() if state_word(states[job_id]) in LIVE}
    return [r for r in reqs if Path(str(r.run_dir)) not in live_dirs]


def collect(key: str, reqs: list[RunRequest]) -> Counter[str]:
    """``--collect``: the state of the newest job of every unfinished run of ``reqs`` (one sacct call), ended
    failures recorded (:func:`mark_ended`), and one summary line: finished runs, then queued / running / failed
    (by SLURM state) / without a job. Returns the counts (``ok``, ``diverged``, ``failed: <STATE>``, ...)."""
    unfinished = [r for r in reqs if not r.record.finished()]
    jobs = newest_jobs(unfinished)
    states = job_states(j for j, _ in jobs.values())
    counts: Counter[str] = Counter(r.record.status()["status"] for r in reqs if r.record.finished())
    for r in unfinished:
        run = Path(str(r.run_dir))
        if run not in jobs:
            counts["not submitted"] += 1
            continue
        job_id, folder = jobs[run]
        word = state_word(states[job_id])
        mark_ended(run, job_id, states[job_id], folder)
        status = r.record.status()
        if word in LIVE:
            counts["queued" if word in ("PENDING", "REQUEUED", "REQUEUE_HOLD") else "running"] += 1
        elif status.get("status") == "failed":
            counts[f"failed ({status.get('slurm_state') or 'in training: see its status.json'})"] += 1
        else:
            counts[f"ended {word} without a record (refused? see {log_path(folder, job_id)})"] += 1
    print(f"[table {key}] collect: {len(reqs)} runs: " + ", ".join(f"{v} {k}" for k, v in counts.items()), flush=True)
    return counts
