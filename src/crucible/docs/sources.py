"""Reading documentation sources into pages: markdown, HTML, and llms.txt lists.

A source is a folder (every .md/.markdown/.mdx/.html/.htm/.txt/.rst below
it), one page file, or an llms.txt-style file whose markdown links name the
pages (relative paths are read from disk, http(s) URLs fetched). HTML is
turned into plain text with headings kept as markdown `#` lines, so pages of
both kinds read and window alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

PAGE_SUFFIXES = {".md", ".markdown", ".mdx", ".html", ".htm", ".txt", ".rst"}
HTML_SUFFIXES = {".html", ".htm"}
MAX_LINE = 1000  # long lines are wrapped so a window of N lines stays bounded

_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.DOTALL)
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)


@dataclass
class Page:
    path: str  # identity within the index: a path relative to the source, or a URL
    title: str
    text: str  # normalised text the windows are cut from
    headings: str  # heading lines, weighted above body text in ranking


class SourceError(ValueError):
    """A source that cannot be read."""


class _HTMLText(HTMLParser):
    _SKIP = {"script", "style", "nav", "footer", "noscript", "svg", "head"}
    _BLOCK = {
        "p",
        "div",
        "section",
        "article",
        "li",
        "tr",
        "br",
        "table",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "blockquote",
        "hr",
    }

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False
        self._heading: int | None = None
        self._pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in self._SKIP:
            self._skip += 1
        elif re.fullmatch(r"h[1-6]", tag):
            self._heading = int(tag[1])
            self.parts.append("\n\n" + "#" * self._heading + " ")
        elif tag == "pre":
            self._pre += 1
            self.parts.append("\n```\n")
        elif tag == "li":
            self.parts.append("\n- ")
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in self._SKIP:
            self._skip = max(self._skip - 1, 0)
        elif re.fullmatch(r"h[1-6]", tag):
            self._heading = None
            self.parts.append("\n\n")
        elif tag == "pre":
            self._pre = max(self._pre - 1, 0)
            self.parts.append("\n```\n")
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        if self._skip:
            return
        if self._pre:
            self.parts.append(data)
        else:
            collapsed = re.sub(r"\s+", " ", data)
            if self._heading is not None:
                collapsed = collapsed.strip()
            self.parts.append(collapsed)


def html_to_text(html: str) -> tuple[str, str]:
    """(title, text) of an HTML page."""
    parser = _HTMLText()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    text = "\n".join(line.rstrip() for line in text.splitlines())
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return parser.title.strip(), text


def _wrap_long_lines(text: str) -> str:
    out: list[str] = []
    for line in text.splitlines():
        while len(line) > MAX_LINE:
            cut = line.rfind(" ", 0, MAX_LINE)
            cut = cut if cut > MAX_LINE // 2 else MAX_LINE
            out.append(line[:cut])
            line = line[cut:].lstrip(" ")
        out.append(line)
    return "\n".join(out)


def make_page(path: str, raw: str, *, html: bool, fallback_title: str) -> Page:
    title = ""
    if html:
        title, text = html_to_text(raw)
    else:
        text = raw.replace("\r\n", "\n")
        fm = _FRONT_MATTER.match(text)
        if fm:
            text = text[fm.end() :]
            m = re.search(r"^title:\s*[\"']?(.+?)[\"']?\s*$", fm.group(1), re.MULTILINE)
            if m:
                title = m.group(1)
    headings = [m.group(2) for m in _HEADING.finditer(text)]
    if not title:
        title = headings[0] if headings else fallback_title
    return Page(
        path=path,
        title=title.strip(),
        text=_wrap_long_lines(text.strip()),
        headings="\n".join(headings),
    )


def _fallback_title(name: str) -> str:
    stem = Path(name.rstrip("/")).stem or name
    return re.sub(r"[-_]+", " ", stem).strip() or name


def read_file_page(file: Path, rel: str) -> Page:
    try:
        raw = file.read_text(errors="replace")
    except OSError as exc:
        raise SourceError(f"cannot read {file}: {exc}") from exc
    return make_page(
        rel, raw, html=file.suffix.lower() in HTML_SUFFIXES, fallback_title=_fallback_title(rel)
    )


def llms_links(text: str) -> list[tuple[str, str]]:
    """(title, target) of every markdown link in an llms.txt-style file, in order, once each."""
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for m in _LINK.finditer(text):
        target = m.group(2).split("#", 1)[0]
        if target and target not in seen:
            seen.add(target)
            out.append((m.group(1).strip(), target))
    return out


def is_llms_list(file: Path, text: str) -> bool:
    """An llms.txt file by name, or a text whose links point at page files or URLs."""
    if file.name.lower().startswith("llms") and file.suffix.lower() in {".txt", ".md"}:
        return bool(llms_links(text))
    links = llms_links(text)
    if len(links) < 2:
        return False
    pagey = [
        t
        for _, t in links
        if t.startswith(("http://", "https://")) or Path(t).suffix.lower() in PAGE_SUFFIXES
    ]
    # A page that merely links elsewhere is still a page: call it a list only if
    # its lines are mostly links.
    lines = [
        ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(("#", ">"))
    ]
    return len(pagey) >= len(links) * 0.8 and len(links) >= len(lines) * 0.6


def _fetch(url: str, timeout: float) -> tuple[str, bool]:
    import httpx

    response = httpx.get(url, timeout=timeout, follow_redirects=True)
    response.raise_for_status()
    ctype = response.headers.get("content-type", "")
    return response.text, "html" in ctype or url.lower().endswith((".html", ".htm"))


def read_source(source: Path | str, *, fetch_timeout: float = 30.0) -> tuple[list[Page], list[str]]:
    """Every page of a source, and a list of problems (pages that could not be read)."""
    problems: list[str] = []
    src = str(source)
    if src.startswith(("http://", "https://")):
        try:
            raw, _ = _fetch(src, fetch_timeout)
        except Exception as exc:  # any fetch failure is reported, not raised mid-index
            raise SourceError(f"cannot fetch {src}: {exc}") from exc
        return _pages_from_list(src, raw, None, problems, fetch_timeout), problems
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(
            p
            for p in path.rglob("*")
            if p.is_file()
            and p.suffix.lower() in PAGE_SUFFIXES
            and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
        pages = []
        for f in files:
            try:
                pages.append(read_file_page(f, f.relative_to(path).as_posix()))
            except SourceError as exc:
                problems.append(str(exc))
        return pages, problems
    if path.is_file():
        raw = path.read_text(errors="replace")
        if is_llms_list(path, raw):
            return _pages_from_list(str(path), raw, path.parent, problems, fetch_timeout), problems
        return [read_file_page(path, path.name)], problems
    raise SourceError(f"no such file or folder: {path}")


def _pages_from_list(
    origin: str, raw: str, base: Path | None, problems: list[str], fetch_timeout: float
) -> list[Page]:
    from urllib.parse import urljoin

    pages: list[Page] = []
    for title, target in llms_links(raw):
        if not target.startswith(("http://", "https://")) and base is None:
            target = urljoin(origin, target)
        try:
            if target.startswith(("http://", "https://")):
                body, html = _fetch(target, fetch_timeout)
                page = make_page(target, body, html=html, fallback_title=title)
            else:
                assert base is not None
                page = read_file_page((base / target).resolve(), target)
            if not page.title or page.title == _fallback_title(target):
                page.title = title
            pages.append(page)
        except Exception as exc:  # one unreadable page must not lose the others
            problems.append(f"{target}: {exc}")
    if not pages and problems:
        raise SourceError(f"no page of {origin} could be read: {problems[0]}")
    return pages
