"""Which files under ``results/`` the report shows, and where: every committed table (a markdown file), figure
(PNG) and claims report, each assigned to one page and one anchor.

Committed means tracked by git (``git ls-files``), so a table half-built in a working copy never reaches the report;
outside a git checkout every file under ``results/`` counts. Run records (``results/runs/``) are not documents: the
tables' provenance links to them (:mod:`oscrepro.report.provenance`).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from oscrepro.tables.spec import available_tables

CLAIMS = "CLAIMS.md"
REPORT = "REPORT.md"
PAGES_DIR = "report"  # results/report/<page>.html; the index is results/index.html


@cache
def papers() -> tuple[str, ...]:
    """The paper keys, sorted: the folder of every table spec (``conf/table/<paper>/``, a table key's first part),
    the leaderboard aside, so a sixth paper's tables get their page with no edit here (no spec is parsed)."""
    return tuple(sorted({key.split("/")[0] for key in available_tables()} - {"leaderboard"}))


@dataclass
class Document:
    """One committed markdown file: a table (or a note) of a page, with the figures shown under it."""

    path: Path  # relative to the results dir, e.g. fqo/cpu/table4.md
    page: str  # fqo | leaderboard | other | claims (results/report/<page>.html)
    figures: list[Path] = field(default_factory=list)  # PNGs shown under it (relative to the results dir)

    @property
    def anchor(self) -> str:
        """The section id on its page: the path without ``.md``, non-alphanumerics as ``-``."""
        return re.sub(r"[^A-Za-z0-9]+", "-", str(self.path.with_suffix(""))).strip("-")

    @property
    def key(self) -> str:
        """``<paper>/<name>`` as the table engine names it (``fqo/table4``); the path for other documents."""
        parts = self.path.with_suffix("").parts
        return f"{parts[0]}/{parts[-1]}" if len(parts) > 1 else parts[0]

    @property
    def budget(self) -> str | None:
        """The budget by the engine's layout: ``<paper>/<name>.md`` is paper, ``<paper>/<budget>/...`` that budget."""
        parts = self.path.parts
        if parts[0] not in (*papers(), "leaderboard"):
            return None
        if len(parts) == 2:
            return "paper"
        return parts[1] if parts[1] in ("smoke", "cpu", "paper") else None


@dataclass
class Site:
    """Everything the report shows: documents per page, the claims reports, and figures no document names."""

    results: Path
    documents: list[Document]
    reports: dict[str, Path]  # paper -> its REPORT.md (relative)
    claims: Path | None  # CLAIMS.md (relative)
    loose_figures: dict[str, list[Path]]  # page -> figures no document of it names

    def pages(self) -> list[str]:
        """Page names in order: the papers, the leaderboard, the other tables."""
        have = {d.page for d in self.documents} | set(self.loose_figures) | set(self.reports)
        return [p for p in (*papers(), "leaderboard", "other") if p in have]

    def on_page(self, page: str) -> list[Document]:
        return [d for d in self.documents if d.page == page]

    def document(self, path: Path) -> Document | None:
        """The document of a results-relative path, or ``None``."""
        return next((d for d in self.documents if d.path == path), None)


def committed_files(results: Path) -> list[Path]:
    """Files under ``results`` tracked by git (relative to ``results``), without the run records; every file when
    ``results`` is not inside a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "."], cwd=results, capture_output=True, check=True)
        files = [Path(p) for p in out.stdout.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = [p.relative_to(results) for p in results.rglob("*") if p.is_file()]
    return sorted(p for p in files if p.parts and p.parts[0] != "runs" and (results / p).is_file())


def page_of(path: Path) -> str:
    """The page a results-relative file belongs to."""
    top = path.parts[0] if len(path.parts) > 1 else path.stem
    if top in papers():
        return top
    if top == "leaderboard":
        return "leaderboard"
    return "other"


def collect(results: str | Path) -> Site:
    """Assign every committed table and figure under ``results`` to a page (module docstring); a figure goes under
    the first document of its folder that names it (``fig6.png`` in table4.md's notes, or a markdown image)."""
    results = Path(results)
    files = committed_files(results)
    docs, reports, claims = [], {}, None
    for f in files:
        if f.suffix != ".md" or f.name.endswith(".html.md"):
            continue
        if f == Path(CLAIMS):
            claims = f
        elif f.name == REPORT and len(f.parts) == 2:
            reports[f.parts[0]] = f
        else:
            docs.append(Document(f, page_of(f)))
    pngs = [f for f in files if f.suffix == ".png"]
    texts = {d.path: (results / d.path).read_text(errors="replace") for d in docs}
    placed: set[Path] = set()
    for png in pngs:
        for d in docs:
            if d.path.parent == png.parent and png.name in texts[d.path]:
                d.figures.append(png)
                placed.add(png)
                break
    loose: dict[str, list[Path]] = {}
    for png in pngs:
        if png not in placed:
            loose.setdefault(page_of(png), []).append(png)
    return Site(results, docs, reports, claims, loose)
