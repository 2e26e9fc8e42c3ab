"""Ranking pages for a query: FTS5 BM25 over title, headings and body (weighted in that order)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from pydantic import BaseModel

from crucible.docs.index import open_index

# Title words say most about what a page is; headings next; then the body.
WEIGHTS = (10.0, 4.0, 1.0)
_WORD = re.compile(r"\w+", re.UNICODE)


class Hit(BaseModel):
    path: str
    title: str
    score: float  # higher is better (negated BM25)
    snippet: str
    n_lines: int


def match_expression(keys: list[str]) -> str | None:
    """An FTS5 query: each whitespace-separated key is a phrase of its word pieces
    (so `pandas.read_csv` must appear as those words in order), ORed together so
    pages matching more keys rank higher. Quoting makes user text inert."""
    phrases: list[str] = []
    for key in keys:
        for token in key.split():
            words = _WORD.findall(token.lower())
            if words:
                phrase = '"' + " ".join(words) + '"'
                if phrase not in phrases:
                    phrases.append(phrase)
    return " OR ".join(phrases) if phrases else None


def search(index_dir: Path, keys: list[str], limit: int = 5) -> list[Hit]:
    expr = match_expression(keys)
    if expr is None:
        return []
    db = open_index(index_dir)
    try:
        rows = db.execute(
            f"""
            SELECT p.path, p.title, p.n_lines,
                   -bm25(pages_fts, {WEIGHTS[0]}, {WEIGHTS[1]}, {WEIGHTS[2]}) AS score,
                   snippet(pages_fts, 2, '**', '**', ' … ', 24) AS snip
            FROM pages_fts JOIN pages p ON p.id = pages_fts.rowid
            WHERE pages_fts MATCH ?
            ORDER BY score DESC, p.path
            LIMIT ?
            """,
            (expr, max(limit, 1)),
        ).fetchall()
    except sqlite3.OperationalError as exc:
        raise ValueError(f"bad docs query {keys!r}: {exc}") from exc
    finally:
        db.close()
    return [
        Hit(
            path=r["path"],
            title=r["title"],
            score=round(float(r["score"]), 4),
            snippet=" ".join(r["snip"].split()),
            n_lines=r["n_lines"],
        )
        for r in rows
    ]
