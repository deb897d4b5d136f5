"""Check the report's pages without a browser: every local link and image must name a file that exists, and every
``#fragment`` an element id of the page it points to. ``make report`` runs it on the pages it wrote and fails on the
first problem list; the tests run it too (tests/integration/test_report.py).
"""

from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

URL_ATTRS = {("a", "href"), ("img", "src"), ("link", "href"), ("script", "src")}


class _Refs(HTMLParser):
    """Collects (tag, url) of the links and images of a page and the ids it defines."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id":
                self.ids.add(value)
            if (tag, name) in URL_ATTRS:
                self.refs.append((tag, value))


def parse(text: str) -> _Refs:
    """The links, images and ids of one HTML page."""
    refs = _Refs()
    refs.feed(text)
    return refs


def local_refs(text: str) -> list[tuple[str, str]]:
    """(tag, url) of a page's relative links and images (no scheme, not absolute, not only a fragment)."""
    return [
        (t, u) for t, u in parse(text).refs if not re.match(r"^[a-z][a-z0-9+.-]*:", u) and not u.startswith(("/", "#"))
    ]


def broken_links(pages: dict[Path, str], root: Path) -> list[str]:
    """``page: <tag> url (why)`` for every local link or image of ``pages`` (root-relative path -> HTML) whose file
    does not exist under ``root`` (nor is one of ``pages``) or whose fragment names no id of its target page; ``[]``
    when all resolve."""
    ids = {rel: parse(text).ids for rel, text in pages.items()}
    out = []
    for rel, text in pages.items():
        for page_ref in [u for t, u in parse(text).refs if u.startswith("#")]:
            if unquote(page_ref[1:]) not in ids[rel]:
                out.append(f"{rel}: <a> {page_ref} (no such id on the page)")
        for tag, url in local_refs(text):
            parts = urlsplit(url)
            target = Path(os.path.normpath(rel.parent / unquote(parts.path)))
            if target.parts[:1] == ("..",) and not (root / target).resolve().is_relative_to(root.resolve().parent):
                out.append(f"{rel}: <{tag}> {url} (outside the checkout)")
            elif target not in pages and not (root / target).is_file():
                out.append(f"{rel}: <{tag}> {url} (no file {target})")
            elif parts.fragment:
                known = ids.get(target)
                if known is None and target.suffix == ".html":
                    known = parse((root / target).read_text(errors="replace")).ids
                if known is not None and unquote(parts.fragment) not in known:
                    out.append(f"{rel}: <{tag}> {url} (no id {parts.fragment!r} in {target})")
    return out
