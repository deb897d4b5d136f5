"""Provenance stamped on every run record and rendered table: git commit, date, device, versions."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from pathlib import Path

import torch

import oscrepro

REPO_ROOT = Path(__file__).resolve().parents[2]


#: Paths that are outputs, not code: the table engine writes ``results/``, and ``python -m oscrepro.claims.decide``
#: writes the seed counts it decided to ``conf/decide/`` between its looks (each run's own ``config.yaml`` records its
#: seed, and the ledger ``results/decide/<budget>.json`` the looks), and the golden-config snapshot (a test fixture
#: that a look's new cells make stale until it is regenerated; no build reads it). Changes there do not make a build
#: ``+dirty``.
OUTPUT_PATHS = ("results", "conf/decide", "tests/fixtures/golden_configs.json")


def git_commit(root: Path = REPO_ROOT) -> str:
    """Short commit hash of the repo at ``root``, with ``+dirty`` when tracked code differs; ``unknown`` outside git.

    Files under :data:`OUTPUT_PATHS` are outputs, not code: rebuilding one table, a decide look raising a row's
    seed count, or the golden-config snapshot regenerated for the cells it added, must not mark the next build dirty.
    """
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.strip()
        excludes = [f":(exclude){path}" for path in OUTPUT_PATHS]
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *excludes],
                               cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def device_name(accelerator: str | None = None) -> str:
    """Human-readable compute device: the CUDA device name, else the CPU model and core count. With
    ``accelerator="cpu"`` (a run's ``trainer.accelerator``) the CPU even where a GPU is present: a CPU run on a GPU
    machine was trained by the CPU."""
    if accelerator != "cpu" and torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(0)}"
    cpu = cpuinfo_field("model name") or platform.processor() or platform.machine()
    return f"cpu: {cpu} ({os.cpu_count()} cores)"


def cpuinfo_field(name: str) -> str | None:
    """The first ``name`` line of /proc/cpuinfo (``model name``, ``vendor_id``); None where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(name):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def provenance(accelerator: str | None = None) -> dict[str, str]:
    """Everything a reader needs to know where a number came from (``accelerator``: see :func:`device_name`)."""
    return {
        "git_commit": git_commit(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "device": device_name(accelerator),
        "torch": torch.__version__,
        "oscrepro": oscrepro.__version__,
    }
