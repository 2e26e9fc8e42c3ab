"""Building and opening a docs index: one SQLite file with an FTS5 table (BM25).

<index-dir>/index.sqlite holds `pages` (path, title, text) and `pages_fts`
(title, headings, body) sharing rowids, plus `meta` (source, build time).
A rebuild writes a new file and renames it over the old one, so readers
never see half an index.

The package's three parts: `index.build_index(source, out)` turns a folder of
markdown/HTML pages or an llms.txt-style list into an SQLite FTS5 index (BM25
ranking), and `index.build_package_index(name, out)` does the same with the API
reference read from an installed package (package.py); `query.search(index, keys)` returns the most relevant pages first;
`show.show_page(index, page, offset, limit)` returns a bounded window of one page.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field

from crucible.docs.sources import Page, read_source

DOCS_INDEX_ENV = "CRUCIBLE_DOCS_INDEX"


def default_index_dir() -> Path:
    """$CRUCIBLE_DOCS_INDEX, else ./.crucible/docs."""
    return Path(os.environ.get(DOCS_INDEX_ENV) or ".crucible/docs")


INDEX_FILE = "index.sqlite"
SCHEMA_VERSION = "1"


class DocsIndexMissing(LookupError):
    """No usable index at a path."""


class IndexStats(BaseModel):
    index: str
    source: str
    n_pages: int
    n_chars: int
    problems: list[str] = Field(default_factory=list)


def index_file(index_dir: Path) -> Path:
    return index_dir / INDEX_FILE if index_dir.suffix != ".sqlite" else index_dir


def write_index(pages: list[Page], index_dir: Path, source: str) -> Path:
    index_dir.mkdir(parents=True, exist_ok=True)
    final = index_file(index_dir)
    tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp)
    try:
        db.executescript(
            """
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
            CREATE TABLE pages (
                id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, title TEXT NOT NULL,
                n_lines INTEGER NOT NULL, n_chars INTEGER NOT NULL, text TEXT NOT NULL);
            CREATE VIRTUAL TABLE pages_fts USING fts5(
                title, headings, body, tokenize = 'porter unicode61');
            """
        )
        seen: set[str] = set()
        for page in pages:
            if page.path in seen:  # an llms.txt may list a page twice under two anchors
                continue
            seen.add(page.path)
            cur = db.execute(
                "INSERT INTO pages (path, title, n_lines, n_chars, text) VALUES (?, ?, ?, ?, ?)",
                (page.path, page.title, len(page.text.splitlines()), len(page.text), page.text),
            )
            db.execute(
                "INSERT INTO pages_fts (rowid, title, headings, body) VALUES (?, ?, ?, ?)",
                (cur.lastrowid, page.title, page.headings, page.text),
            )
        db.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            [
                ("schema_version", SCHEMA_VERSION),
                ("source", source),
                ("built_at", datetime.now(UTC).isoformat()),
                ("n_pages", str(len(seen))),
            ],
        )
        db.commit()
    finally:
        db.close()
    os.replace(tmp, final)
    return final


def _index_pages(pages: list[Page], problems: list[str], index_dir: Path, src: str) -> IndexStats:
    path = write_index(pages, index_dir, src)
    return IndexStats(
        index=str(path),
        source=src,
        n_pages=len({p.path for p in pages}),
        n_chars=sum(len(p.text) for p in pages),
        problems=problems,
    )


def build_index(source: Path | str, index_dir: Path) -> IndexStats:
    """Read every page of `source` and write the index; problems are returned, not hidden."""
    pages, problems = read_source(source)
    src = (
        str(source)
        if str(source).startswith(("http://", "https://"))
        else str(Path(source).resolve())
    )
    return _index_pages(pages, problems, index_dir, src)


def build_package_index(package: str, index_dir: Path, **bounds: int) -> IndexStats:
    """The API reference of an installed package (docs/package.py) as an index; no network."""
    from crucible.docs.package import package_pages

    pages, problems, label = package_pages(package, **bounds)
    return _index_pages(pages, problems, index_dir, label)


def open_index(index_dir: Path) -> sqlite3.Connection:
    """Open an index read-only; raise DocsIndexMissing with a hint when there is none."""
    path = index_file(index_dir)
    if not path.is_file():
        raise DocsIndexMissing(
            f"no docs index at {path}; build one with `crucible docs index SOURCE --out {index_dir}`"
        )
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    return db
