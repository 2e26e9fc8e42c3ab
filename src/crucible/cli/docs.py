"""`crucible docs`: index documentation, query it, read pages in bounded windows."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from crucible.cli.common import JsonOpt, console, fail, print_json
from crucible.errors import ExitCode

IndexOpt = typer.Option(
    None, "--index", help="Index folder (default: $CRUCIBLE_DOCS_INDEX, else ./.crucible/docs)."
)


def _index_dir(index: Path | None) -> Path:
    from crucible.docs.index import default_index_dir

    return index if index is not None else default_index_dir()


def register(app: typer.Typer) -> None:
    docs = typer.Typer(
        help="A local documentation index: build it, query it, read pages.", no_args_is_help=True
    )
    app.add_typer(docs, name="docs")

    @docs.command("index")
    def index_cmd(
        source: str | None = typer.Argument(
            None, help="A folder of .md/.html pages, one page, or an llms.txt-style list."
        ),
        package: str | None = typer.Option(
            None,
            "--package",
            help="Instead of SOURCE: the API reference of an installed Python package "
            "(its docstrings and signatures; nothing is fetched).",
        ),
        out: Path | None = typer.Option(None, "--out", help="Index folder (default: as --index)."),
        as_json: bool = JsonOpt,
    ) -> None:
        """Build (or rebuild) an index from SOURCE, or from an installed package (--package)."""
        from crucible.docs.index import build_index, build_package_index
        from crucible.docs.sources import SourceError

        if (source is None) == (package is None):
            fail(
                ExitCode.USAGE,
                "usage",
                "give SOURCE or --package NAME, not both"
                if source
                else "give SOURCE or --package NAME",
                hint="crucible docs index ./sdk-docs   |   crucible docs index --package modal",
                as_json=as_json,
            )
        target = _index_dir(out)
        try:
            stats = (
                build_package_index(package, target)
                if package is not None
                else build_index(str(source), target)
            )
        except SourceError as exc:  # a package's: what to install (docs/package.py)
            hint = getattr(exc, "hint", None)
            fail(ExitCode.NOT_FOUND, "not_found", str(exc), hint=hint, as_json=as_json)
        if stats.n_pages == 0:
            fail(
                ExitCode.ERROR,
                "empty",
                f"no pages found in {source or 'package ' + str(package)}",
                hint="pages are .md, .html, .txt or .rst files" if source else None,
                as_json=as_json,
            )
        if as_json:
            print_json(stats.model_dump())
            return
        console.print(
            f"indexed [bold]{stats.n_pages}[/] pages ({stats.n_chars:,} chars) of "
            f"{escape(stats.source)} into {stats.index}",
            highlight=False,
        )
        for problem in stats.problems:
            console.print(f"[yellow]skipped[/]: {escape(problem)}", highlight=False)

    @docs.command("query")
    def query_cmd(
        keys: list[str] = typer.Argument(..., help="Search keys (words, identifiers, phrases)."),
        limit: int = typer.Option(5, "--limit", "-n", min=1, help="Pages to return."),
        index: Path | None = IndexOpt,
        as_json: bool = JsonOpt,
    ) -> None:
        """The most relevant pages for KEY..., best first."""
        from crucible.docs.index import DocsIndexMissing
        from crucible.docs.query import search

        try:
            hits = search(_index_dir(index), keys, limit)
        except DocsIndexMissing as exc:
            fail(ExitCode.NOT_FOUND, "not_found", str(exc), as_json=as_json)
        except ValueError as exc:
            fail(ExitCode.USAGE, "usage", str(exc), as_json=as_json)
        if as_json:
            print_json([h.model_dump() for h in hits])
            return
        if not hits:
            console.print("no matching pages")
            return
        from rich.table import Table

        table = Table(show_lines=False)
        table.add_column("score", justify="right")
        table.add_column("page")
        table.add_column("title")
        table.add_column("snippet", overflow="fold")
        for h in hits:
            table.add_row(f"{h.score:.2f}", h.path, h.title, h.snippet)
        console.print(table)

    @docs.command("show")
    def show_cmd(
        page: str = typer.Argument(
            ..., help="Page path (as `docs query` prints it), file stem or title."
        ),
        offset: int = typer.Option(0, "--offset", min=0, help="First line to show (0-based)."),
        limit: int = typer.Option(
            120, "--limit", min=1, help="Lines to show (a window is also capped at 16,000 chars)."
        ),
        index: Path | None = IndexOpt,
        as_json: bool = JsonOpt,
    ) -> None:
        """A bounded window of one page; `next_offset` says where to continue."""
        from crucible.docs.index import DocsIndexMissing
        from crucible.docs.show import PageNotFound, show_page

        try:
            window = show_page(_index_dir(index), page, offset, limit)
        except (DocsIndexMissing, PageNotFound) as exc:
            fail(ExitCode.NOT_FOUND, "not_found", str(exc), as_json=as_json)
        if as_json:
            print_json(window.model_dump())
            return
        end = window.next_offset if window.next_offset is not None else window.n_lines
        console.print(
            f"[bold]{window.title}[/] ({window.path}) lines {window.offset}-{end} of {window.n_lines}",
            highlight=False,
        )
        console.out(window.text, highlight=False)
        if window.next_offset is not None:
            console.print(f"[dim]… more: --offset {window.next_offset}[/]", highlight=False)
