"""The report's pages: ``results/index.html`` (papers, leaderboard, every committed table with its provenance) and
``results/report/<page>.html`` (one per paper with its claims report, tables and figures; the claims; the
leaderboard; the other tables). Pages are rebuilt whole from the committed files on every run; they carry no date
or commit of their own, so rebuilding an unchanged ``results/`` rewrites the same bytes.
"""

from __future__ import annotations

import html
from pathlib import Path

from oscrepro.report.collect import PAGES_DIR, Document, Site, collect
from oscrepro.report.html import figure_html, md_to_html, page, relative_url, rewrite_links
from oscrepro.report.provenance import Provenance, read_provenance, record_index

TITLES = {"leaderboard": "Leaderboard", "other": "Benchmarks, checks and plans", "claims": "Claims and verdicts"}


class Report:
    """The site of one results dir and the writer of its pages."""

    def __init__(self, results: str | Path) -> None:
        self.results = Path(results)
        self.site: Site = collect(self.results)
        records = record_index(self.results)
        self.prov = {d.path: read_provenance(self.results, d, records) for d in self.site.documents}

    # ------------------------------------------------------------------------------------------ links
    def page_path(self, name: str) -> Path:
        """Results-relative path of a page (``index`` is ``index.html`` at the top)."""
        return Path("index.html") if name == "index" else Path(PAGES_DIR) / f"{name}.html"

    def url(self, target: Path, page_dir: Path) -> str:
        """Page-relative URL of a results-relative path: a committed table goes to its section, a claims report to
        its page, any other file to itself."""
        doc = self.site.document(target)
        if doc is not None:
            return f"{relative_url(self.page_path(doc.page), page_dir)}#{doc.anchor}"
        if target == self.site.claims:
            return relative_url(self.page_path("claims"), page_dir)
        for paper, report in self.site.reports.items():
            if target == report:
                return f"{relative_url(self.page_path(paper), page_dir)}#report"
        return relative_url(target, page_dir)

    def nav(self, page_dir: Path) -> list[tuple[str, str]]:
        out = [("Index", relative_url(self.page_path("index"), page_dir))]
        if self.site.claims is not None:
            out.append(("Claims", relative_url(self.page_path("claims"), page_dir)))
        return out + [(TITLES.get(p, p), relative_url(self.page_path(p), page_dir)) for p in self.site.pages()]

    def markdown(self, source: Path, page_dir: Path, drop_title: bool = False) -> tuple[str, str]:
        """(title, HTML) of a results-relative markdown file, links rewritten for a page in ``page_dir``."""
        text = (self.results / source).read_text(errors="replace")
        lines = text.splitlines()
        title = (
            lines[0].lstrip("# ").replace("`", "").strip() if lines and lines[0].startswith("# ") else source.as_posix()
        )
        if drop_title and lines and lines[0].startswith("# "):
            text = "\n".join(lines[1:])
        return title, rewrite_links(md_to_html(text), source, lambda t: self.url(t, page_dir))

    # ----------------------------------------------------------------------------------------- blocks
    def provenance_html(self, doc: Document, page_dir: Path) -> str:
        """The definition list of a table's provenance, with its files and run records linked."""
        p: Provenance = self.prov[doc.path]
        stated = lambda v: html.escape(v) if v else "<em>not stated</em>"  # noqa: E731
        commit = stated(p.commit) + (' <span class="warn">(uncommitted code)</span>' if p.dirty else "")
        rows = [
            (
                "Budget",
                stated(p.budget) + (f" (runs at <code>{html.escape(p.runs_budget)}</code>)" if p.runs_budget else ""),
            ),
            ("Commit", commit),
            ("Device", stated(p.device)),
            ("Date", stated(p.date)),
        ]
        rows += [
            (k, html.escape(v))
            for k, v in (("Runs", p.runs), ("Trained on", p.trained_on), ("Redrawn", p.redrawn))
            if v
        ]
        files = [doc.path, doc.path.with_suffix(".csv")]
        rows.append(
            (
                "Files",
                " ".join(
                    f'<a href="{html.escape(relative_url(f, page_dir))}">{html.escape(f.name)}</a>'
                    for f in files
                    if (self.results / f).exists()
                ),
            )
        )
        if p.records:
            links = " ".join(
                f'<a href="{html.escape(relative_url(r / "status.json", page_dir))}">{r.name}</a>' for r in p.records
            )
            rows.append(
                (
                    "Run records",
                    f"<details><summary>{len(p.records)} records in "
                    f"<code>results/runs</code> (table {html.escape(doc.key)}, budget "
                    f"{html.escape(p.runs_budget or p.budget or '')})</summary>{links}</details>",
                )
            )
        return '<dl class="prov">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"

    def section(self, doc: Document, page_dir: Path) -> str:
        """One table: heading, provenance, the rendered markdown, then the figures it names (not inline ones)."""
        title, body = self.markdown(doc.path, page_dir, drop_title=True)
        text = (self.results / doc.path).read_text(errors="replace")
        figs = "".join(figure_html(self.results, f, page_dir) for f in doc.figures if f"]({f.name})" not in text)
        return (
            f'<section class="doc" id="{doc.anchor}"><h2>{html.escape(title)}</h2>'
            f"<p><code>{html.escape(doc.path.as_posix())}</code></p>{self.provenance_html(doc, page_dir)}"
            f"{body}{figs}</section>"
        )

    def toc(self, docs: list[Document], page_dir: Path) -> str:
        """A table of the given documents: link, budget, commit, device, records, figures."""
        head = (
            "<tr><th>Table</th><th>Budget</th><th>Commit</th><th>Device</th><th>Run records</th><th>Figures</th></tr>"
        )
        rows = []
        for d in docs:
            p = self.prov[d.path]
            commit = html.escape(p.commit or "—") + (' <span class="warn">dirty</span>' if p.dirty else "")
            rows.append(
                f'<tr><td><a href="{html.escape(self.url(d.path, page_dir))}">{html.escape(d.path.as_posix())}'
                f"</a></td><td>{html.escape(p.budget or '—')}</td><td>{commit}</td>"
                f"<td>{html.escape(p.device or '—')}</td><td>{len(p.records)}</td><td>{len(d.figures)}</td></tr>"
            )
        return f'<div class="scroll"><table>{head}{"".join(rows)}</table></div>'

    # ------------------------------------------------------------------------------------------ pages
    def subpage(self, name: str) -> str:
        """The page of a paper (its claims report first), of the leaderboard or of the other tables."""
        page_dir = Path(PAGES_DIR)
        docs = sorted(self.site.on_page(name), key=lambda d: (d.path.name != "leaderboard.md", d.path.as_posix()))
        parts = []
        title = TITLES.get(name, name)
        if name in self.site.reports:
            title, body = self.markdown(self.site.reports[name], page_dir, drop_title=True)
            parts.append(
                f'<section id="report"><h2>Claims and verdicts ({html.escape(name)}/REPORT.md)</h2>{body}</section>'
            )
        parts.insert(0, f"<h1>{html.escape(title)}</h1><h2>Tables</h2>{self.toc(docs, page_dir)}")
        parts += [self.section(d, page_dir) for d in docs]
        loose = self.site.loose_figures.get(name, [])
        if loose:
            parts.append(
                "<section><h2>Other figures</h2>"
                + "".join(figure_html(self.results, f, page_dir) for f in loose)
                + "</section>"
            )
        return page(f"oscrepro — {title}", self.nav(page_dir), "\n".join(parts))

    def claims_page(self) -> str:
        page_dir = Path(PAGES_DIR)
        title, body = self.markdown(self.site.claims, page_dir)  # type: ignore[arg-type]
        return page(f"oscrepro — {title}", self.nav(page_dir), f"<h1>{html.escape(title)}</h1>{body}")

    def index(self) -> str:
        """The index: papers with their roll-up, the leaderboard figure, every committed table."""
        here = Path(".")
        rows = []
        for paper in self.site.pages():
            report = self.site.reports.get(paper)
            rollup = ""
            if report is not None:
                line = next(
                    (ln for ln in (self.results / report).read_text().splitlines() if ln.startswith("**Roll-up:**")), ""
                )
                rollup = rewrite_links(md_to_html(line), report, lambda t: self.url(t, here))
            n_docs = len(self.site.on_page(paper))
            n_figs = sum(len(d.figures) for d in self.site.on_page(paper)) + len(self.site.loose_figures.get(paper, []))
            rows.append(
                f'<tr><td><a href="{self.page_path(paper).as_posix()}">{html.escape(TITLES.get(paper, paper))}'
                f"</a></td><td>{n_docs}</td><td>{n_figs}</td><td>{rollup}</td></tr>"
            )
        board = Path("leaderboard.png")
        board_html = figure_html(self.results, board, here) if (self.results / board).exists() else ""
        claims = (
            f'<p>Every claim and its verdict: <a href="{self.page_path("claims").as_posix()}">CLAIMS</a>.</p>'
            if self.site.claims
            else ""
        )
        body = (
            "<h1>oscrepro — reproduction results</h1><p>Every committed table, figure and claims report under "
            "<code>results/</code>, rendered by <code>make report</code> (no training). Numbers are as the "
            "tables state them; each table's provenance (budget, commit, device, run records) comes from its "
            "own header.</p>"
            f'{claims}<h2>Papers and pages</h2><div class="scroll"><table><tr><th>Page</th><th>Tables</th>'
            f"<th>Figures</th><th>Claims roll-up</th></tr>{''.join(rows)}</table></div>"
            f"<h2>Leaderboard</h2>{board_html}"
            f"<h2>Every committed table</h2>{self.toc(self.site.documents, here)}"
        )
        return page("oscrepro — results", self.nav(here), body)

    def render(self) -> dict[Path, str]:
        """Every page's HTML by its results-relative path (the index first)."""
        out = {self.page_path("index"): self.index()}
        if self.site.claims is not None:
            out[self.page_path("claims")] = self.claims_page()
        for name in self.site.pages():
            out[self.page_path(name)] = self.subpage(name)
        return out

    def write(self, out_dir: str | Path | None = None) -> list[Path]:
        """Write every page under ``out_dir`` (default: the results dir; another dir must hold a copy of it, the
        links are relative); returns their paths, the index first."""
        root = Path(out_dir) if out_dir is not None else self.results
        (root / PAGES_DIR).mkdir(parents=True, exist_ok=True)
        paths = []
        for rel, text in self.render().items():
            (root / rel).write_text(text)
            paths.append(root / rel)
        return paths
