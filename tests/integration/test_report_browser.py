"""The report in a real headless browser (Debian's ``chromium``, installed by ``make browser``): every page loads from
``file://``, every image decodes, every link reaches a file (and its ``#section``), and a screenshot of the index is
taken. Run by ``make test-browser`` in CI; excluded from ``make test`` (``slow``) because it needs chromium.

A copy of ``results/`` gets the pages, each with a small script appended that, once the page has loaded, forces the
lazy images to load, waits for them, requests every link target (XHR on ``file://`` with
``--allow-file-access-from-files``) and writes what failed into a ``<pre id="browser-check">`` that ``--dump-dom``
prints. Without chromium the test FAILS, naming ``make browser``: it never skips.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from oscrepro.report.build import Report

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RESULTS = Path(__file__).resolve().parents[2] / "results"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--allow-file-access-from-files",
    "--hide-scrollbars",
]

CHECK = """
<script>
window.addEventListener("load", async () => {
  const out = {images: 0, broken_images: [], links: 0, broken_links: []};
  const imgs = [...document.images];
  imgs.forEach(i => { i.loading = "eager"; });
  // load / error events: img.decode() never settles under --virtual-time-budget
  await Promise.all(imgs.map(i => i.complete ? null : new Promise(done => {
    i.addEventListener("load", done);
    i.addEventListener("error", done);
  })));
  for (const i of imgs) {
    out.images++;
    if (!(i.complete && i.naturalWidth > 0)) out.broken_images.push(i.getAttribute("src"));
  }
  const files = new Map();  // file URL -> [hashes wanted]
  for (const a of document.querySelectorAll("a[href]")) {
    const href = a.getAttribute("href");
    if (/^[a-z][a-z0-9+.-]*:/i.test(href)) continue;
    out.links++;
    const url = new URL(href, location.href);
    const file = url.href.split("#")[0];
    if (!files.has(file)) files.set(file, []);
    if (url.hash) files.get(file).push(decodeURIComponent(url.hash.slice(1)));
  }
  const load = file => new Promise(done => {
    const xhr = new XMLHttpRequest();
    xhr.open("GET", file);
    xhr.onload = () => done(xhr.responseText);
    xhr.onerror = () => done(null);
    xhr.send();
  });
  await Promise.all([...files].map(async ([file, hashes]) => {
    const text = file === location.href.split("#")[0] ? document.documentElement.outerHTML : await load(file);
    if (text === null) { out.broken_links.push(file); return; }
    if (hashes.length) {
      const doc = new DOMParser().parseFromString(text, "text/html");
      for (const h of hashes) if (!doc.getElementById(h)) out.broken_links.push(file + "#" + h);
    }
  }));
  const pre = document.createElement("pre");
  pre.id = "browser-check";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def chromium() -> str:
    """The chromium binary; the test fails loudly without it (``make browser`` installs it)."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail(
            "chromium is not installed: run `make browser` (apt-get install -y chromium); the report's "
            "browser test never skips"
        )
    return exe


def test_without_chromium_the_test_fails_not_skips(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(pytest.fail.Exception, match="make browser"):
        chromium()


def run_chromium(exe: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run([exe, *FLAGS, *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, list[Path]]:
    """A copy of the results with the report's pages written into it, each page carrying the check script."""
    root = tmp_path_factory.mktemp("site") / "results"
    shutil.copytree(RESULTS, root, ignore=shutil.ignore_patterns("index.html", "report"))
    pages = Report(RESULTS).write(root)
    for p in pages:
        p.write_text(p.read_text().replace("</body>", CHECK + "</body>"))
    return root, pages


def browser_check(exe: str, page: Path) -> dict:
    """What the check script found on ``page`` once chromium loaded it."""
    out = run_chromium(exe, "--virtual-time-budget=30000", "--dump-dom", page.as_uri())
    assert out.returncode == 0, f"{page}: chromium exited {out.returncode}: {out.stderr[-2000:]}"
    m = re.search(r'<pre id="browser-check">(.*?)</pre>', out.stdout, re.S)
    assert m, f"{page}: the check did not run (page did not load?): {out.stdout[:500]}"
    return json.loads(html.unescape(m.group(1)))


def test_the_check_catches_a_broken_image_and_link(site):
    """The browser check can fail: a missing image, file and section are each reported."""
    exe = chromium()
    root, _ = site
    bad = root / "report" / "bad.html"
    bad.write_text(
        '<html><body><img loading="lazy" src="../nope.png"><img src="../leaderboard.png">'
        '<a href="fqo.html#no-such-section">x</a><a href="../missing.md">y</a><a href="fqo.html">z</a>'
        + CHECK
        + "</body></html>"
    )
    check = browser_check(exe, bad)
    assert check["images"] == 2 and check["broken_images"] == ["../nope.png"]
    assert sorted(check["broken_links"]) == sorted(
        [(root / "missing.md").as_uri(), (root / "report" / "fqo.html").as_uri() + "#no-such-section"]
    )


def test_every_page_loads_with_its_images_and_links(site):
    exe = chromium()
    root, pages = site
    assert len(pages) >= 8
    for page in pages:
        check = browser_check(exe, page)
        assert check["broken_images"] == [], f"{page.relative_to(root)}: images that did not load"
        assert check["broken_links"] == [], f"{page.relative_to(root)}: links that lead nowhere"
        assert check["links"] > 5
    index = next(p for p in pages if p.name == "index.html")
    assert "leaderboard.png" in index.read_text()


def test_screenshot_of_the_index(site, tmp_path):
    exe = chromium()
    root, pages = site
    shot = Path(os.environ.get("OSCREPRO_REPORT_SCREENSHOT", tmp_path / "index.png"))
    out = run_chromium(
        exe,
        f"--screenshot={shot}",
        "--window-size=1280,2000",
        "--virtual-time-budget=10000",
        (root / "index.html").as_uri(),
    )
    assert out.returncode == 0 and shot.exists(), out.stderr[-2000:]
    with Image.open(shot) as img:
        assert img.size == (1280, 2000)
        colours = img.convert("RGB").getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 50, "the screenshot is blank"
