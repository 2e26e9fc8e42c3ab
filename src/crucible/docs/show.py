"""Reading one page of an index in bounded windows of lines (and characters)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from crucible.docs.index import open_index

DEFAULT_LIMIT = 120  # lines
MAX_CHARS = 16_000  # a window never carries more text than this


class PageNotFound(LookupError):
    pass


class Window(BaseModel):
    path: str
    title: str
    offset: int  # first line shown (0-based)
    n_lines: int  # lines in the whole page
    next_offset: int | None  # where the next window starts; None at the end
    text: str


def resolve_page(index_dir: Path, page: str) -> tuple[str, str, str]:
    """(path, title, text) for a page named by path, a path suffix, a stem or a title."""
    db = open_index(index_dir)
    try:
        row = db.execute("SELECT path, title, text FROM pages WHERE path = ?", (page,)).fetchone()
        if row is None:
            rows = db.execute("SELECT path, title, text FROM pages").fetchall()
            want = page.strip().strip("/").lower()

            def stem(p: str) -> str:
                name = p.rstrip("/").rsplit("/", 1)[-1].lower()
                return name.rsplit(".", 1)[0] if "." in name else name

            for test in (
                lambda r: r["path"].lower().endswith("/" + want),
                # an API page named by its tail: `Function.map` for `modal.Function.map`
                lambda r: r["path"].lower().endswith("." + want),
                lambda r: stem(r["path"]) == want or stem(r["path"]) == stem(want),
                lambda r: r["title"].lower() == want,
            ):
                found = [r for r in rows if test(r)]
                if len(found) == 1:
                    row = found[0]
                    break
                if len(found) > 1:
                    names = ", ".join(sorted(r["path"] for r in found)[:10])
                    raise PageNotFound(f"page {page!r} is ambiguous: {names}")
        if row is None:
            raise PageNotFound(
                f"no page {page!r} in the index; find pages with `crucible docs query`"
            )
        return row["path"], row["title"], row["text"]
    finally:
        db.close()


def show_page(
    index_dir: Path,
    page: str,
    offset: int = 0,
    limit: int = DEFAULT_LIMIT,
    max_chars: int = MAX_CHARS,
) -> Window:
    path, title, text = resolve_page(index_dir, page)
    lines = text.splitlines()
    start = min(max(offset, 0), len(lines))
    end = min(start + max(limit, 1), len(lines))
    taken: list[str] = []
    size = 0
    i = start
    while i < end:
        # Always at least one line, so a window always makes progress.
        if taken and size + len(lines[i]) + 1 > max_chars:
            break
        taken.append(lines[i])
        size += len(lines[i]) + 1
        i += 1
    return Window(
        path=path,
        title=title,
        offset=start,
        n_lines=len(lines),
        next_offset=i if i < len(lines) else None,
        text="\n".join(taken),
    )
