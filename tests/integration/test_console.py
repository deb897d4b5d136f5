"""What a researcher sees: a smoke run's console (its numbers, no third-party warnings, on a machine with SLURM
installed too), its offline wandb run (config and run id, where ``wandb sync results/wandb`` finds it), the train
help (fast, the groups a user picks first; Hydra's own flags unchanged) and make's install line (once)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.helpers.wandb_log import run_record

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ["experiment=fqo/sva", "budget=smoke"]
# "[<date>][oscrepro.train][INFO] - " (Hydra's job logging) in front of our own lines
OURS = re.compile(r"^\[[^\]]+\]\[oscrepro\.[\w.]+\]\[(INFO|WARNING|ERROR)\] - ")


def _env_with_srun(tmp_path: Path) -> dict[str, str]:
    """The environment of a login node or workstation with the SLURM client installed: an ``srun`` on PATH, no
    allocation (``SLURM_*`` unset); wandb offline, as the tests always run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    srun = bin_dir / "srun"
    srun.write_text("#!/bin/sh\nexit 0\n")
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "WANDB_"))}
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "WANDB_MODE": "offline"}


def test_smoke_run_prints_its_metrics_and_its_offline_wandb_run_holds_config_and_run_id(tmp_path):
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "oscrepro.train", *SMOKE, "logger=wandb", f"paths.results_dir={results}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env_with_srun(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (proc.stdout + proc.stderr).splitlines()
    # nothing but our own lines: no srun hint, no wandb banner or warnings (anonymous, git root), no summary
    assert [ln for ln in lines if not OURS.match(ln)] == []
    (record,) = (results / "runs" / "fqo" / "sva").iterdir()
    last = OURS.sub("", lines[-1])
    assert re.fullmatch(
        rf"run {record.name} ok \([\d.]+ s\): val acc=[\d.]+ acc_hard=[\d.]+ loss=[\d.]+ \| "
        rf"test acc=[\d.]+ acc_hard=[\d.]+ loss=[\d.]+ -> {re.escape(str(record))}",
        last,
    ), last

    # the offline run sits directly under results/wandb/, where `wandb sync results/wandb` looks
    (run_dir,) = (results / "wandb").glob("offline-run-*")
    run = run_record(next(run_dir.glob("*.wandb")))
    cfg = OmegaConf.load(record / "config.yaml")
    assert run["id"] == record.name == run["config"]["run_id"]
    assert run["config"]["model"]["d_model"] == cfg.model.d_model
    assert run["config"]["record"] == str(record) and "paths" not in run["config"]  # the hashed payload
    assert (run["group"], run["job_type"], run["tags"]) == ("adhoc/fqo/sva", "fqo", ["fqo", "adhoc", "seed=0"])
    dry = subprocess.run(
        [str(Path(sys.executable).with_name("wandb")), "sync", "--dry-run", "wandb"],
        cwd=results,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env_with_srun(tmp_path),
    )
    assert "Would sync 1 run(s)" in dry.stdout + dry.stderr, dry.stdout + dry.stderr


def test_train_help_is_fast_and_lists_the_groups_a_user_picks_first():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "oscrepro.train", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()}
    assert {"omegaconf", "oscrepro"} <= imported and not {"torch", "lightning", "hydra"} & imported
    lines = proc.stdout.splitlines()
    start = lines.index("Groups a run is made of (group=option; * = default):")
    groups = [ln.split()[0] for ln in lines[start + 1 :] if ln.startswith("  ") and not ln.startswith("   ")]
    assert groups[:7] == ["experiment", "attention", "model", "data", "budget", "trainer", "logger"]
    assert "fqo/sva," in proc.stdout and "softmax*" in proc.stdout and "cpu*" in proc.stdout
    listed = [g for g in groups if not g.endswith("/*")]
    assert not [g for g in listed if g.startswith(("budget_scale", "table/"))]  # internal groups: not to pick


def test_hydra_cfg_flag_still_prints_the_composed_config():
    proc = subprocess.run(
        [sys.executable, "-m", "oscrepro.train", *SMOKE, "model.d_model=48", "--cfg", "job"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert OmegaConf.create(proc.stdout).model.d_model == 48


def _fake_python(path: Path) -> None:
    """A stand-in interpreter for the Makefile: ``-m venv DIR`` creates DIR/bin/python (itself); anything else
    (pip, the torch version query, oscrepro commands) prints what it was asked and exits 0."""
    path.write_text(f"""#!{sys.executable}
import os, shutil, sys
if sys.argv[1:3] == ["-m", "venv"]:
    os.makedirs(os.path.join(sys.argv[3], "bin"), exist_ok=True)
    shutil.copy(__file__, os.path.join(sys.argv[3], "bin", "python"))
elif sys.argv[1:2] == ["-c"]:
    print("2.11.0")
else:
    print("python", *sys.argv[1:])
""")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_says_installed_once_when_it_installs_and_not_again(tmp_path):
    for name in ("Makefile", "pyproject.toml", "requirements.lock"):
        shutil.copy(ROOT / name, tmp_path / name)
    _fake_python(tmp_path / "python3")
    make = ["make", "-C", str(tmp_path), f"PYTHON={tmp_path / 'python3'}", "BUDGET=smoke"]
    first = subprocess.run([*make, "table4"], capture_output=True, text=True, timeout=60, check=True).stdout
    again = subprocess.run([*make, "table4"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert first.count("installed into .venv") == 1, first  # table4 runs `make table`, which depends on install too
    assert "installed into" not in again and "oscrepro.table fqo/table4 --budget smoke" in again
