"""A run's history.csv across interruptions: the rows logged before a resume are kept, not overwritten.

Lightning's ``CSVLogger`` deletes ``logs/metrics.csv`` when it starts in a non-empty directory, so a run that
resumes from ``checkpoints/last.ckpt`` would lose every row from before the interruption. train.py therefore
moves the old file aside (:func:`set_aside`) before the logger starts, and afterwards writes history.csv as the
kept rows followed by the new ones (:func:`merge`). Kept rows are those of epochs up to the checkpoint's;
rows of the interrupted epoch after it are dropped, because the resumed run trains that epoch again.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from pathlib import Path

from oscrepro.runs.record import atomic_write_text
from oscrepro.utils.callbacks import WALL_COLUMN

PRIOR_NAME = "metrics.before_resume.csv"


def _read(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    """Atomically (a kill leaves the old file or the new one)."""
    keys = sorted({k for r in rows for k in r})
    buf = io.StringIO(newline="")
    writer = csv.DictWriter(buf, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def _unique(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """Rows in order, exact repeats dropped (a row is logged once; a repeat is the same row read from two files)."""
    seen: set[tuple[tuple[str, str], ...]] = set()
    out = []
    for r in rows:
        key = tuple(sorted(r.items()))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def set_aside(log_dir: Path, ckpt_epoch: int) -> float:
    """Before a resume: fold ``log_dir/metrics.csv`` into ``log_dir/metrics.before_resume.csv``, keeping rows of
    epochs <= ``ckpt_epoch`` (the last completed epoch in the checkpoint). Returns the last ``time/wall_s`` kept
    (0.0 if none), the offset the resumed run's wall-clock continues from."""
    prior, current = log_dir / PRIOR_NAME, log_dir / "metrics.csv"
    rows = [r for r in _unique(_read(prior) + _read(current))
            if r.get("epoch", "") != "" and int(r["epoch"]) <= ckpt_epoch]
    if rows:
        _write(prior, rows)  # first: a kill before the unlink below leaves the rows in both files, which the next
    else:                    # set_aside reads once (_unique)
        prior.unlink(missing_ok=True)
    if current.exists():
        current.unlink()
    if not rows:
        return 0.0
    walls = [float(r[WALL_COLUMN]) for r in rows if r.get(WALL_COLUMN)]
    return walls[-1] if walls else 0.0


def merge(log_dir: Path, out: Path) -> None:
    """Write ``out`` (history.csv) = rows kept from before resumes + this attempt's rows (nothing if none exist)."""
    rows = _read(log_dir / PRIOR_NAME) + _read(log_dir / "metrics.csv")
    if rows:
        _write(out, rows)


def first_non_finite_epoch(log_dir: Path, columns: Iterable[str]) -> int | None:
    """The first epoch whose logged row (kept from before resumes, or this attempt's) holds a non-finite value in
    one of ``columns``; None if none does. Names the epoch of a run recorded ``diverged`` for its final metrics."""
    wanted = set(columns)
    for row in _read(log_dir / PRIOR_NAME) + _read(log_dir / "metrics.csv"):
        if row.get("epoch", "") != "" and any(row.get(c, "") not in ("", None) and not math.isfinite(float(row[c]))
                                               for c in wanted):
            return int(row["epoch"])
    return None
