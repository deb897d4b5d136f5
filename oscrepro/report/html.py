"""Markdown to HTML for the report: tables scroll instead of overflowing, every relative link and image is rewritten
from the markdown file's folder to the page's (a link to another committed table goes to its section on its page),
and figures carry the caption their PNG holds (:func:`oscrepro.analysis.figures.save_figure` writes it).

Links stay relative, so the pages open offline from ``file://``; a link with a scheme (``https:``) is left as it is.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Callable
from pathlib import Path

import markdown

# page-relative URL of a results-relative path (a committed table maps to its page's section)
Resolver = Callable[[Path], str]

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1200px; padding: 0 1.2em 3em; color: #1b1b1b; }
nav { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #ddd; padding: .5em 0; z-index: 1; }
nav a { margin-right: 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.3em; margin-top: 2em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.1em; }
section.doc { margin-top: 2.5em; }
.scroll { overflow-x: auto; margin: .6em 0; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #f1f3f5; }
dl.prov { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; background: #f7f7f9;
          border: 1px solid #e1e1e8; padding: .6em .9em; font-size: 13px; }
dl.prov dt { font-weight: 600; } dl.prov dd { margin: 0; }
.warn { color: #a40000; font-weight: 600; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 13px; color: #444; }
details { margin: .3em 0; } code { background: #f3f3f3; padding: 0 3px; }
blockquote { color: #444; border-left: 3px solid #ccc; margin-left: 0; padding-left: .8em; }
"""

_URL = re.compile(r'(href|src)="([^"#][^"]*?)(#[^"]*)?"')


def md_to_html(text: str) -> str:
    """Markdown (GitHub-style tables, fenced code) to HTML, every table wrapped in a horizontally scrolling box."""
    body = markdown.markdown(text, extensions=["tables", "fenced_code", "sane_lists"], output_format="html")
    return body.replace("<table>", '<div class="scroll"><table>').replace("</table>", "</table></div>")


def rewrite_links(body: str, source: Path, resolve: Resolver) -> str:
    """Rewrite the relative ``href``/``src`` URLs of HTML rendered from the results-relative markdown file
    ``source``: each is resolved from ``source``'s folder and handed to ``resolve``. Absolute URLs (with a scheme
    or a leading ``/``) and in-page anchors stay as they are."""

    def repl(m: re.Match[str]) -> str:
        attr, url, frag = m.group(1), html.unescape(m.group(2)), m.group(3) or ""
        if re.match(r"^[a-z][a-z0-9+.-]*:", url) or url.startswith("/"):
            return m.group(0)
        target = Path(os.path.normpath(source.parent / url))
        new = resolve(target)
        if "#" in new:  # the resolver chose the section: the markdown's own fragment no longer applies
            frag = ""
        return f'{attr}="{html.escape(new + frag, quote=True)}"'

    return _URL.sub(repl, body)


def relative_url(target: Path, page_dir: Path) -> str:
    """``target`` (results-relative) as a URL relative to ``page_dir`` (results-relative), ``/``-separated."""
    return Path(os.path.relpath(target, page_dir)).as_posix()


def png_caption(path: Path) -> str | None:
    """The caption a PNG carries in its ``Description`` text chunk (``None`` without one)."""
    try:
        from PIL import Image

        with Image.open(path) as img:
            return img.text.get("Description")  # type: ignore[attr-defined]
    except (OSError, AttributeError):
        return None


def figure_html(results: Path, png: Path, page_dir: Path) -> str:
    """One ``<figure>``: the image (lazy-loaded, relative URL), its file name and its stored caption."""
    url = html.escape(relative_url(png, page_dir), quote=True)
    caption = png_caption(results / png)
    text = f"<code>{html.escape(png.as_posix())}</code>" + (f": {html.escape(caption)}" if caption else "")
    return (
        f'<figure id="{html.escape(png.as_posix())}"><a href="{url}"><img src="{url}" loading="lazy" '
        f'alt="{html.escape(png.name)}"></a><figcaption>{text}</figcaption></figure>'
    )


def page(title: str, nav: list[tuple[str, str]], body: str) -> str:
    """A whole HTML page: title, a sticky navigation bar of ``(label, url)`` and the body."""
    links = " ".join(f'<a href="{html.escape(url, quote=True)}">{html.escape(label)}</a>' for label, url in nav)
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}'
        f'</title>\n<meta name="viewport" content="width=device-width, initial-scale=1">\n<style>{STYLE}'
        f"</style>\n</head>\n<body>\n<nav>{links}</nav>\n{body}\n</body>\n</html>\n"
    )
