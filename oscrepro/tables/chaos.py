"""Chaos test of the table engine: SIGKILL a table build at random moments, let it finish, compare.

    python -m oscrepro.tables.chaos --kills 24 --out results/chaos/fqo_table2_smoke.md \
        trainer.max_epochs=6 trainer.limit_train_batches=8

1. Builds the table once, uninterrupted, into its own results dir (the reference), timing it.
2. Rounds, until ``--kills`` kills were made: a fresh results dir; the same build started as its own process group
   and killed with SIGKILL (workers included) after a random delay, uniform on [``--min-delay``, the reference
   build's wall time]; after every kill every run record is checked (:func:`half_written`); then the build is
   started again, and killed again, until it finishes on its own; its table must equal the reference's, and so
   must every run's ``metrics.json`` (:func:`metrics_differences`).

A record is half-written when one of its files does not parse whole: ``status.json`` (with a known status),
``config.yaml``, ``metrics.json``, ``history.csv`` (every row as wide as its header). Run records write each file
atomically (:func:`oscrepro.runs.record.atomic_write_text`) and a finished status is written last, so none
should ever be. The tables are compared on their ``.csv`` (the ``.md`` header carries the date and commit).

The table rounds its numbers, so a resumed run that trains at another thread count (a build restarted with fewer
runs left plans fewer workers with more threads each) can change a test loss in its last bits (0.6934264302 vs
0.6934263706) and leave the table equal. So every run's ``metrics.json`` is compared too, bit for bit (each value's
shortest round-trip repr), and the run's final status with it, for the same set of runs. Excluded are the
wall-clock keys (:data:`CLOCK_KEYS`: ``time/*`` such as ``time/train_epoch_s``, and ``*wall_time*`` such as
``train_wall_time_s``): they measure the machine and its load while the run trained, differ between any two
builds, and are not results (no table reads them as one).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from oscrepro.runs.record import atomic_write_text

STATUSES = ("running", "ok", "diverged", "failed")
CLOCK_KEYS = re.compile(r"^time/|wall_time")  # metrics.json keys that measure wall-clock time (module docstring)


@dataclass
class ChaosReport:
    table: str
    budget: str
    reference_s: float
    # (round, seconds after start, finished records, records killed while running after an epoch checkpoint)
    kills: list[tuple[int, float, int, int]] = field(default_factory=list)
    half_written: list[str] = field(default_factory=list)
    rounds_equal: list[bool] = field(default_factory=list)
    # per round: every run's metrics.json (clock keys excluded) and status equal to the reference build's
    rounds_metrics_equal: list[bool] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)  # "round r: run: key reference -> this round"
    runs_compared: int = 0  # runs in the reference build, each compared in every round
    resumed_runs: int = 0  # runs that went on from a checkpoint of a killed attempt (their history was set aside)

    def markdown(self) -> str:
        delays = sorted(k[1] for k in self.kills)
        lines = [f"# Chaos test: `{self.table}` at `{self.budget}`", "",
                 f"- **Kills (SIGKILL to the build's process group):** {len(self.kills)} in {len(self.rounds_equal)} "
                 f"round(s); reference build {self.reference_s:.1f} s",
                 f"- **Kill moments (s after start):** {', '.join(f'{d:.1f}' for d in delays)}",
                 f"- **Half-written records found:** {len(self.half_written)}"
                 + "".join(f"\n  - {h}" for h in self.half_written),
                 f"- **Final table equal to the uninterrupted build:** "
                 f"{sum(self.rounds_equal)}/{len(self.rounds_equal)} rounds",
                 f"- **Every run's metrics.json bit-identical to the uninterrupted build's** ({self.runs_compared} "
                 f"runs, status included; wall-clock keys `time/*`, `*wall_time*` excluded): "
                 f"{sum(self.rounds_metrics_equal)}/{len(self.rounds_metrics_equal)} rounds"
                 + "".join(f"\n  - {d}" for d in self.differences),
                 f"- **Runs resumed from a killed attempt's checkpoint:** {self.resumed_runs}", "",
                 f"- **Kills that hit a run after its first epoch checkpoint:** "
                 f"{sum(1 for k in self.kills if k[3])}", "",
                 "| round | kill at (s) | finished runs at the kill | running runs with a checkpoint |",
                 "|---|---|---|---|"]
        lines += [f"| {r} | {d:.1f} | {n} | {c} |" for r, d, n, c in self.kills]
        return "\n".join(lines) + "\n"

    @property
    def passed(self) -> bool:
        return (not self.half_written and all(self.rounds_equal) and bool(self.rounds_equal)
                and all(self.rounds_metrics_equal) and len(self.rounds_metrics_equal) == len(self.rounds_equal))


def half_written(runs_dir: Path) -> list[str]:
    """Files of run records under ``runs_dir`` that do not parse whole (module docstring)."""
    bad: list[str] = []
    for status_path in runs_dir.rglob("status.json"):
        run = status_path.parent
        try:
            status = json.loads(status_path.read_text())["status"]
            if status not in STATUSES:
                bad.append(f"{status_path}: unknown status {status!r}")
        except (ValueError, KeyError) as err:
            bad.append(f"{status_path}: {err}")
            continue
        checks = {"config.yaml": lambda p: yaml.safe_load(p.read_text())["seed"],
                  "metrics.json": lambda p: json.loads(p.read_text()),
                  "history.csv": _whole_csv}
        for name, check in checks.items():
            path = run / name
            if path.exists():
                try:
                    check(path)
                except Exception as err:  # noqa: BLE001 -- any parse failure is the finding
                    bad.append(f"{path}: {type(err).__name__}: {err}")
        if status in ("ok", "diverged") and not (run / "metrics.json").exists():
            bad.append(f"{run}: status {status} without metrics.json")
    return bad


def _whole_csv(path: Path) -> None:
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows or any(len(r) != len(rows[0]) for r in rows):
        raise ValueError("ragged or empty csv")


def run_metrics(runs_dir: Path) -> dict[str, dict[str, str]]:
    """Per finished-or-not run (``<experiment>/<run id>``, the path under ``runs_dir``): its status and the repr of
    each ``metrics.json`` value but the wall-clock ones (:data:`CLOCK_KEYS`); equal reprs = bit-identical floats."""
    out: dict[str, dict[str, str]] = {}
    for status_path in sorted(runs_dir.rglob("status.json")):
        run = status_path.parent
        metrics_path = run / "metrics.json"
        metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}
        values = {k: repr(v) for k, v in metrics.items() if not CLOCK_KEYS.search(k)}
        values["<status>"] = repr(json.loads(status_path.read_text()).get("status"))
        out[run.relative_to(runs_dir).as_posix()] = values
    return out


def metrics_differences(reference: dict[str, dict[str, str]], other: dict[str, dict[str, str]]) -> list[str]:
    """What differs between two :func:`run_metrics`: runs in one only, and per run each key whose value differs
    (``run: key reference -> other``); empty when every run's metrics are bit-identical."""
    out = [f"{run}: only in the reference build" for run in sorted(set(reference) - set(other))]
    out += [f"{run}: not in the reference build" for run in sorted(set(other) - set(reference))]
    for run in sorted(set(reference) & set(other)):
        a, b = reference[run], other[run]
        out += [f"{run}: {key} {a.get(key, '(absent)')} -> {b.get(key, '(absent)')}"
                for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]
    return out


def _command(table: str, budget: str, results: Path, launcher: str, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "oscrepro.table", table, "--budget", budget, "--launcher", launcher,
            "--results-dir", str(results), "--variant", "chaos", *extra]


def _table_csv(results: Path, table: str, budget: str) -> str:
    paper, name = table.split("/", 1)
    return (results / paper / budget / "chaos" / f"{name}.csv").read_text()


def _finished(runs_dir: Path) -> int:
    return sum(json.loads(p.read_text()).get("status") in ("ok", "diverged") for p in runs_dir.rglob("status.json"))


def _running_with_checkpoint(runs_dir: Path) -> int:
    return sum(json.loads(p.read_text()).get("status") == "running"
               and (p.parent / "checkpoints" / "last.ckpt").exists() for p in runs_dir.rglob("status.json"))


def run_chaos(table: str = "fqo/table2", budget: str = "smoke", kills: int = 20, seed: int = 0,
              launcher: str = "joblib", extra: list[str] | None = None, min_delay: float = 0.5,
              workdir: Path | None = None) -> ChaosReport:
    """Run the chaos test (module docstring); returns its report."""
    rng = random.Random(seed)
    extra = list(extra or [])
    work = Path(workdir or tempfile.mkdtemp(prefix="oscrepro-chaos-"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ref = work / "reference"
    t0 = time.time()
    subprocess.run(_command(table, budget, ref, launcher, extra), check=True, env=env, capture_output=True)
    report = ChaosReport(table, budget, time.time() - t0)
    expected = _table_csv(ref, table, budget)
    expected_metrics = run_metrics(ref / "runs")
    report.runs_compared = len(expected_metrics)
    rnd = 0
    while len(report.kills) < kills:
        rnd += 1
        results = work / f"round{rnd}"
        while True:  # kill until the build finishes on its own
            proc = subprocess.Popen(_command(table, budget, results, launcher, extra), env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            delay = rng.uniform(min_delay, max(report.reference_s, min_delay + 0.1))
            start = time.time()
            try:
                proc.wait(timeout=delay if len(report.kills) < kills else None)
                break  # finished before the kill
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                runs = results / "runs"
                report.kills.append((rnd, time.time() - start, _finished(runs), _running_with_checkpoint(runs)))
                report.half_written += half_written(results / "runs")
                print(f"[chaos] kill {len(report.kills)}/{kills} (round {rnd}) at {time.time() - start:.1f} s",
                      flush=True)
        report.rounds_equal.append(proc.returncode == 0 and _table_csv(results, table, budget) == expected)
        differ = metrics_differences(expected_metrics, run_metrics(results / "runs"))
        report.rounds_metrics_equal.append(not differ)
        report.differences += [f"round {rnd}: {d}" for d in differ]
        report.resumed_runs += sum(1 for _ in (results / "runs").rglob("logs/metrics.before_resume.csv"))
        print(f"[chaos] round {rnd} finished: table equal to the reference: {report.rounds_equal[-1]}, every run's "
              f"metrics.json bit-identical: {report.rounds_metrics_equal[-1]}", flush=True)
    if workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m oscrepro.tables.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", default="fqo/table2")
    parser.add_argument("--budget", default="smoke")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--launcher", default="joblib")
    parser.add_argument("--min-delay", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=None, help="write the report (markdown) here")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run (e.g. trainer.max_epochs=3)")
    args = parser.parse_intermixed_args(argv)
    report = run_chaos(args.table, args.budget, args.kills, args.seed, args.launcher, args.overrides,
                       args.min_delay)
    text = report.markdown()
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, text)
    if not report.passed:
        raise SystemExit("chaos test failed: see the report above")


if __name__ == "__main__":
    main()
