"""Docs index: building from folders and llms.txt lists, ranking, windows."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import pytest

from crucible.docs.index import DocsIndexMissing, build_index
from crucible.docs.query import match_expression, search
from crucible.docs.show import PageNotFound, show_page
from crucible.docs.sources import html_to_text, read_source


@pytest.fixture
def index(docs_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / "idx"
    stats = build_index(docs_dir, out)
    assert stats.n_pages == 8  # hidden folders and non-page files are left out
    assert stats.problems == []
    return out


@pytest.mark.parametrize(
    ("keys", "first"),
    [
        (["install", "pip"], "getting-started/installation.md"),
        (["read_csv"], "guide/io.md"),
        (["quiver.read_csv", "dtype"], "guide/io.md"),
        (["join", "two", "frames", "on", "a", "key"], "guide/merging.md"),
        (["429", "backoff", "retry"], "guide/rate-limits.md"),
        (["API", "token", "Authorization", "header"], "api/auth.html"),
        (["histogram"], "api/plotting.htm"),
        (["rotate tokens"], "api/auth.html"),
    ],
)
def test_relevant_page_first(index: Path, keys: list[str], first: str) -> None:
    hits = search(index, keys, limit=5)
    assert hits, keys
    assert hits[0].path == first, [h.path for h in hits]
    assert hits[0].score > 0
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))


def test_snippet_title_and_limit(index: Path) -> None:
    hits = search(index, ["install"], limit=2)
    assert len(hits) == 2
    assert hits[0].title == "Installation"  # from front matter
    assert "**" in hits[0].snippet  # the matched term is marked
    assert search(index, ["zzzunknownword"]) == []
    assert search(index, ["...", "!!"]) == []


def test_query_text_is_inert(index: Path) -> None:
    # FTS5 operators and quotes in user input are searched as words, never parsed.
    assert match_expression(['a"b', "NEAR(x", "c*"]) == '"a b" OR "near x" OR "c"'
    search(index, ['"unbalanced', "AND", "OR", "NOT", "(", "col:val"])


def test_script_and_nav_are_not_indexed(index: Path) -> None:
    assert search(index, ["var"]) == []
    assert [h.path for h in search(index, ["Home"])] == []


def test_show_windows(index: Path) -> None:
    first = show_page(index, "reference/frame.md", offset=0, limit=50)
    assert first.title == "Frame"
    assert first.n_lines == 404
    assert first.text.splitlines()[0] == "# Frame"
    assert len(first.text.splitlines()) == 50
    assert first.next_offset == 50
    second = show_page(index, "reference/frame.md", offset=first.next_offset or 0, limit=50)
    assert second.text.splitlines()[0] == first_line_at(index, 50)
    last = show_page(index, "frame", offset=400, limit=50)  # by stem
    assert last.next_offset is None
    assert last.text.splitlines()[-1].startswith("- `Frame.method_399()`")
    # The character cap bounds a window whatever the line limit.
    capped = show_page(index, "reference/frame.md", offset=0, limit=1000, max_chars=500)
    assert len(capped.text) <= 500
    assert capped.next_offset is not None and capped.next_offset < 50


def first_line_at(index: Path, n: int) -> str:
    return show_page(index, "reference/frame.md", offset=n, limit=1).text


def test_show_resolves_titles_and_reports_unknown(index: Path) -> None:
    assert show_page(index, "Authentication").path == "api/auth.html"
    assert show_page(index, "io").path == "guide/io.md"
    text = show_page(index, "api/auth.html").text
    assert "# Authentication" in text and "## Rotating tokens" in text
    assert "quiver auth rotate --all" in text
    with pytest.raises(PageNotFound):
        show_page(index, "nope.md")


def test_missing_index(tmp_path: Path) -> None:
    with pytest.raises(DocsIndexMissing, match="crucible docs index"):
        search(tmp_path / "none", ["x"])


def test_llms_txt_list(docs_dir: Path, tmp_path: Path) -> None:
    listing = docs_dir / "llms.txt"
    listing.write_text(
        "# Quiver\n\n> A dataframe library.\n\n## Docs\n\n"
        "- [Install](getting-started/installation.md): how to install\n"
        "- [Merging](guide/merging.md#merge): joins\n"
        "- [Auth](api/auth.html)\n"
        "- [Missing](guide/missing.md)\n"
    )
    out = tmp_path / "llms-idx"
    stats = build_index(listing, out)
    assert stats.n_pages == 3
    assert len(stats.problems) == 1 and "missing.md" in stats.problems[0]
    assert search(out, ["left", "join"])[0].path == "guide/merging.md"
    db = sqlite3.connect(out / "index.sqlite")
    assert {r[0] for r in db.execute("SELECT path FROM pages")} == {
        "getting-started/installation.md",
        "guide/merging.md",
        "api/auth.html",
    }


def test_single_page_source_and_rebuild(docs_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "one"
    assert build_index(docs_dir / "guide" / "io.md", out).n_pages == 1
    assert build_index(docs_dir, out).n_pages == 8  # rebuilt in place
    pages, _ = read_source(docs_dir / "guide" / "io.md")
    assert pages[0].title == "Reading and writing files"


def test_html_to_text_keeps_structure() -> None:
    title, text = html_to_text(
        "<title>T</title><h2>Sub</h2><ul><li>one</li><li>two</li></ul><pre>a\n  b</pre>"
    )
    assert title == "T"
    assert "## Sub" in text and "- one" in text and "a\n  b" in text


def test_llms_txt_over_http(docs_dir: Path, tmp_path: Path) -> None:
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    (docs_dir / "llms.txt").write_text(
        "# Quiver\n\n- [Install](getting-started/installation.md)\n- [Auth](api/auth.html): tokens\n"
    )

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(docs_dir))
    )
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        stats = build_index(f"{base}/llms.txt", tmp_path / "http-idx")
    finally:
        server.shutdown()
        server.server_close()
    assert stats.n_pages == 2 and stats.problems == []
    hits = search(tmp_path / "http-idx", ["Bearer", "token"])
    assert hits[0].path == f"{base}/api/auth.html" and hits[0].title == "Authentication"
    assert "# Authentication" in show_page(tmp_path / "http-idx", "auth").text
