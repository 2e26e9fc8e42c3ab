"""The built docs site in headless Chromium: the search box finds "separate verifier" (its
index is loaded by a web worker, so this needs a real browser over HTTP), and every page
opens with a title and a heading. With CRUCIBLE_DOCS_SHOTS=DIR, screenshots of three pages
are written there."""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sitebuild import DOCS, BuiltSite
from tests.reports.cdpclient import Browser, require_chromium
from tests.reports.pngpixels import dark_share

pytestmark = pytest.mark.browser
SHOTS = {"quickstart": "quickstart/", "verifiers": "concepts/verifiers/", "cli": "reference/cli/"}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site_url(built_site: BuiltSite) -> Iterator[str]:
    assert built_site.result.returncode == 0, built_site.result.stderr[-4000:]
    handler = functools.partial(_Quiet, directory=str(built_site.path))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join()


def page_paths() -> list[str]:
    """Every page's URL path under the site, from the Markdown files of docs/."""
    out = []
    for md in sorted(DOCS.rglob("*.md")):
        rel = md.relative_to(DOCS).as_posix()
        out.append("" if rel == "index.md" else rel.removesuffix(".md") + "/")
    return out


def save_shot(folder: Path, name: str, png: bytes) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.png").write_bytes(png)


async def open_page(b: Browser, url: str) -> None:
    await b.send("Page.navigate", {"url": url})
    await b.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")


async def test_search_finds_separate_verifier(site_url: str) -> None:
    async with Browser(require_chromium()) as b:
        await open_page(b, site_url)
        await b.eval("document.querySelector('input.md-search__input').focus()")
        await b.send("Input.insertText", {"text": "separate verifier"})
        hits = await b.wait_for(
            "(() => { const items = [...document.querySelectorAll('.md-search-result__item a')];"
            " return items.length ? items.map(a => [a.getAttribute('href'), a.textContent]) : null;"
            " })()",
            timeout=30,
        )
        assert any("concepts/verifiers/" in href for href, _ in hits), hits
        assert any("separate verifier" in text.lower() for _, text in hits), hits
        assert not b.exceptions, b.exceptions


async def test_every_page_has_a_title(site_url: str) -> None:
    shots_dir = os.environ.get("CRUCIBLE_DOCS_SHOTS")
    seen: dict[str, str] = {}
    async with Browser(require_chromium()) as b:
        await b.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        )
        for path in page_paths():
            await open_page(b, site_url + path)
            title = await b.eval("document.title")
            h1 = await b.eval(
                "(() => { const h = document.querySelector('article h1');"
                " return h ? h.textContent.replace('¶', '').trim() : ''; })()"
            )
            assert title and title.strip().endswith("crucible"), (path, title)
            assert h1, (path, "no heading")
            seen[path] = title
            for name, shot_path in SHOTS.items():
                if path == shot_path:
                    png = await b.screenshot()
                    assert dark_share(png) > 0.01, (path, "the page rendered no text")
                    if shots_dir:
                        save_shot(Path(shots_dir), name, png)
        assert not b.exceptions, b.exceptions
    assert len(seen) == len(page_paths()) >= 25
    assert len(set(seen.values())) == len(seen), "two pages share a title"
