"""``make report`` (oscrepro.report) without a browser: the pages it renders from the committed results link every
committed table and figure, every local link and image resolves, and the provenance comes from the tables' headers.
The browser side (chromium loads the pages) is tests/integration/test_report_browser.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oscrepro.report.build import Report
from oscrepro.report.collect import Document, committed_files
from oscrepro.report.links import broken_links, parse
from oscrepro.report.provenance import read_provenance

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"


@pytest.fixture(scope="module")
def report() -> Report:
    return Report(RESULTS)


@pytest.fixture(scope="module")
def pages(report: Report) -> dict[Path, str]:
    return report.render()


def test_every_local_link_and_image_resolves(pages):
    assert broken_links(pages, RESULTS) == []


def test_index_links_every_committed_table(report, pages):
    index = pages[Path("index.html")]
    hrefs = {u for t, u in parse(index).refs if t == "a"}
    tables = [f for f in committed_files(RESULTS) if f.suffix == ".md" and f.name not in ("REPORT.md", "CLAIMS.md")]
    assert len(tables) > 50
    missing = [t for t in tables if report.url(t, Path(".")) not in hrefs]
    assert missing == []
    # ... and each link lands on a section that renders that table
    for t in tables:
        page, anchor = report.url(t, Path(".")).split("#")
        assert f'id="{anchor}"' in pages[Path(page)]


def test_every_committed_figure_is_shown(pages):
    shown = {(rel.parent / u).as_posix() for rel, text in pages.items() for t, u in parse(text).refs if t == "img"}
    shown = {str(Path(p).resolve().relative_to(RESULTS.resolve())) for p in (RESULTS / s for s in shown)}
    pngs = {f.as_posix() for f in committed_files(RESULTS) if f.suffix == ".png"}
    assert pngs and pngs <= shown


def test_claims_and_paper_reports_are_rendered(pages):
    claims = pages[Path("report/claims.html")]
    assert "verdict" in claims.lower() and "<table>" in claims
    for paper in ("fqo", "osciformer", "coupledqk", "ssa", "fsn"):
        text = pages[Path(f"report/{paper}.html")]
        assert 'id="report"' in text and "Roll-up:" in text
        assert "REPORT.md" not in "".join(u for _, u in parse(text).refs)  # links go to sections, not raw markdown


def test_provenance_read_from_the_headers(report):
    t4 = report.prov[Path("fqo/cpu/table4.md")]
    # the header line as written (the committed table's commit changes with each rebuild)
    line = next(ln for ln in (RESULTS / "fqo/cpu/table4.md").read_text().splitlines() if "**commit**" in ln)
    commit = re.search(r"\*\*commit\*\* `([0-9a-f]{7,})`", line).group(1)
    device = re.search(r"\*\*Device:\*\* (.+?); \*\*commit\*\*", line).group(1)  # the machine of its last rebuild
    assert device.startswith("cpu: ") and "cores)" in device
    assert (t4.budget, t4.commit, t4.device) == ("cpu", commit, device) and not t4.dirty
    t1 = report.prov[Path("osciformer/cpu/table4.md")]
    assert t1.records and all((RESULTS / r / "status.json").exists() for r in t1.records)
    legacy = report.prov[Path("ssa/cpu/bench_n1024_threads1/ssa_cpu.md")]  # '> git_commit:' header of a benchmark
    written = next(ln for ln in (RESULTS / "ssa/cpu/bench_n1024_threads1/ssa_cpu.md").read_text().splitlines()
                   if ln.startswith("> git_commit:")).split(":", 1)[1].strip()
    assert legacy.commit == written and legacy.dirty == written.endswith("+dirty")
    assert legacy.device == "cpu: AMD EPYC (2 cores)"
    sva = report.prov[Path("leaderboard/cpu/sva.md")]  # budget_map: built at cpu, runs at paper
    assert sva.runs_budget == "paper" and sva.records


def test_unstated_fields_stay_unstated(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "note.md").write_text("# A note\n\nNo provenance here.\n")
    prov = read_provenance(tmp_path, Document(Path("x/note.md"), "other"))
    assert (prov.commit, prov.device, prov.date, prov.budget) == (None, None, None, None)


def test_links_are_rewritten_and_a_broken_one_is_reported(tmp_path):
    """A table linking another table goes to its section; a link to a missing file is reported, not dropped."""
    res = tmp_path / "results"
    (res / "fqo" / "cpu").mkdir(parents=True)
    (res / "fqo" / "cpu" / "a.md").write_text(
        "# fqo — a: A\n\n- **Budget:** `cpu` — x\n\nsee [b](b.md) and [gone](missing.csv) and ![fig](fa.png)\n"
    )
    (res / "fqo" / "cpu" / "b.md").write_text("# fqo — b: B\n\n| x |\n|---|\n| 1 |\n")
    shutil.copy(RESULTS / "leaderboard.png", res / "fqo" / "cpu" / "fa.png")
    pages = Report(res).render()
    fqo = pages[Path("report/fqo.html")]
    assert 'href="fqo.html#fqo-cpu-b"' in fqo and 'src="../fqo/cpu/fa.png"' in fqo
    assert broken_links(pages, res) == ["report/fqo.html: <a> ../fqo/cpu/missing.csv (no file fqo/cpu/missing.csv)"]


def test_pages_are_deterministic(report, pages):
    assert Report(RESULTS).render() == pages


def test_cli_writes_the_index_and_checks_its_links(tmp_path):
    """``python -m oscrepro.report`` on a copy of the results writes index.html and the pages, exit status 0."""
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy, ignore=shutil.ignore_patterns("index.html", "report"))
    out = subprocess.run(
        [sys.executable, "-m", "oscrepro.report", "--results-dir", str(copy)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert (copy / "index.html").exists() and (copy / "report" / "fqo.html").exists()
    assert "file://" in out.stdout
