"""A committed table's provenance, read from what it says about itself: budget, commit, device and date from its
markdown header (or its csv's ``#`` lines), and the run records that trained its cells.

The headers come in the forms the writers of ``results/`` use: the table engine's bullets
(``- **Budget:** `cpu` ...``, ``- **Device:** ...; **commit** `sha`; **date** ...``, ``- **Runs:** 36 ok``), the
benchmarks' ``- git_commit: sha`` / ``> git_commit: sha`` lines and the leaderboard's ``**Built:** ... commit `sha```.
A field no pattern finds is ``None`` (the report prints "not stated"), never guessed. Run records are matched by the
``table_name`` and ``budget_name`` each record's ``config.yaml`` carries.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from oscrepro.report.collect import Document

HEAD_LINES = 60  # provenance sits in the first lines of a table; the rest is the table and its claims

PATTERNS: dict[str, tuple[str, ...]] = {
    "commit": (
        r"\*\*commit\*\* `([^`]+)`",
        r"^[->]\s*git_commit:\s*(\S+)",
        r"\*\*Built:\*\*.*?commit `([^`]+)`",
        r"^#\s*git_commit:\s*(\S+)",
        r"\bon ([0-9a-f]{7,}(?:\+dirty)?),",
    ),
    "device": (r"\*\*Device:\*\*\s*([^;]+);", r"^[->#]\s*device:\s*(.+)$"),
    "date": (r"\*\*date\*\*\s*([^;]+);", r"^[->#]\s*date:\s*(.+)$"),
    "budget": (r"\*\*Budget:\*\*\s*`([^`]+)`", r"\(budget `([^`]+)`\)", r"^#.*\(budget=(\w+)\)"),
    "runs": (r"^- \*\*Runs:\*\*\s*(.+)$",),
    "trained_on": (r"^- \*\*Trained on:\*\*\s*(.+)$",),
    "redrawn": (r"^- \*\*Redrawn:\*\*\s*(.+)$",),
    "runs_budget": (r"\*\*Runs at budget `([^`]+)`\*\*",),  # the spec's budget_map (leaderboard SVA)
}


@dataclass
class Provenance:
    """What a table says about where its numbers come from (``None``: the table does not say)."""

    budget: str | None = None
    commit: str | None = None
    device: str | None = None
    date: str | None = None
    runs: str | None = None
    trained_on: str | None = None
    redrawn: str | None = None
    runs_budget: str | None = None  # the budget its runs trained at, where the spec maps it (budget_map)
    records: list[Path] = field(default_factory=list)  # run dirs, relative to the results dir

    @property
    def dirty(self) -> bool:
        """Built from uncommitted code: its commit cannot be checked out."""
        return bool(self.commit and self.commit.endswith("+dirty"))


def _search(lines: list[str], patterns: tuple[str, ...]) -> str | None:
    for pattern in patterns:
        for line in lines:
            m = re.search(pattern, line)
            if m:
                return m.group(1).strip()
    return None


def read_provenance(
    results: Path, doc: Document, records: dict[tuple[str, str], list[Path]] | None = None
) -> Provenance:
    """The provenance of ``doc`` from its header (and its csv's ``#`` lines); the budget falls back to the engine's
    folder layout; ``records`` (:func:`record_index`) gives its run records."""
    lines = (results / doc.path).read_text(errors="replace").splitlines()[:HEAD_LINES]
    csv_path = results / doc.path.with_suffix(".csv")
    if csv_path.exists():
        with open(csv_path, errors="replace") as fh:
            lines += [ln.rstrip("\n") for ln in fh.readlines()[:HEAD_LINES] if ln.startswith("#")]
    prov = Provenance(**{name: _search(lines, pats) for name, pats in PATTERNS.items()})
    prov.budget = prov.budget or doc.budget
    if records is not None and prov.budget:
        prov.records = records.get((doc.key, prov.runs_budget or prov.budget), [])
    return prov


def record_index(results: Path) -> dict[tuple[str, str], list[Path]]:
    """``{(table key, budget): [run dir, ...]}`` over the run records under ``results/runs`` (each record's
    ``config.yaml`` names the table that planned it and its budget; a record shared by tables is listed under the
    first table that trained it, as its config says)."""
    index: dict[tuple[str, str], list[Path]] = defaultdict(list)
    runs = results / "runs"
    if not runs.is_dir():
        return {}
    for cfg in sorted(runs.glob("*/*/*/config.yaml")):
        table = budget = None
        with open(cfg, errors="replace") as fh:
            for line in fh:  # top-level keys only: a full YAML parse of ~500 configs is needlessly slow
                if line.startswith("table_name:"):
                    table = line.split(":", 1)[1].strip().strip("'\"")
                elif line.startswith("budget_name:"):
                    budget = line.split(":", 1)[1].strip().strip("'\"")
        if table and table != "null" and budget:
            index[(table, budget)].append(cfg.parent.relative_to(results))
    return dict(index)
