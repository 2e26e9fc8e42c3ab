"""What every command shares: consoles, exit codes, errors (JSON under --json)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand

from crucible.errors import AuthError, CrucibleError, ExitCode, ProviderUnavailable


def _console(stderr: bool) -> Console:
    # Piped output (CI logs, files) gets room for wide tables instead of rich's 80 columns.
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, width=160 if wide else None)


console = _console(stderr=False)
err_console = _console(stderr=True)

EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 auth, 5 backend "
    "(a provider or service did not answer)."
)

JOBS_DIR_HELP = "Where jobs live. [default: $CRUCIBLE_JOBS_DIR, else ./jobs]"
JobsDirOpt = typer.Option(None, "--jobs-dir", help=JOBS_DIR_HELP)

JsonOpt = typer.Option(
    False, "--json", help="Machine-readable output on stdout; errors as JSON on stderr."
)


def fail(
    code: int,
    error: str,
    message: str,
    *,
    hint: str | None = None,
    as_json: bool = False,
) -> NoReturn:
    """Report an error on stderr (a JSON object under --json) and exit with `code`."""
    if as_json:
        sys.stderr.write(json.dumps({"error": error, "message": message, "hint": hint}) + "\n")
    else:
        # Messages and hints are plain text: rich must not read `crucible[docker]` as markup.
        err_console.print(f"[bold red]error[/]: {escape(message)}", highlight=False)
        if hint:
            err_console.print(f"[dim]hint[/]: {escape(hint)}", highlight=False)
    raise typer.Exit(code)


def fail_from(exc: CrucibleError, *, as_json: bool = False) -> NoReturn:
    """Map a crucible error onto the stable exit codes."""
    if isinstance(exc, AuthError):
        fail(ExitCode.AUTH, "auth", exc.message, hint=exc.hint, as_json=as_json)
    if isinstance(exc, ProviderUnavailable):
        fail(ExitCode.BACKEND, "backend", exc.message, hint=exc.hint, as_json=as_json)
    fail(ExitCode.ERROR, str(exc.kind), exc.message, hint=exc.hint, as_json=as_json)


def warn_skipped(skipped: Iterable[object], *, as_json: bool = False) -> None:
    """One warning on stderr per bad trial record a view left out (store/trial_load.py):
    its path and why (a JSON line under --json). Stdout stays what was asked for."""
    for s in dict.fromkeys(str(s) for s in skipped):  # once each, in order
        text = s.encode("utf-8", "backslashreplace").decode()
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
        if as_json:
            sys.stderr.write(
                json.dumps({"warning": "trial_record_skipped", "message": text}) + "\n"
            )
        else:
            err_console.print(
                f"[yellow]warning[/]: trial record skipped: {escape(text)}", highlight=False
            )


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


try:  # typer >= 0.22 ships its own copy of click
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - older typer on plain click
    from click.exceptions import UsageError  # type: ignore[assignment,no-redef]


class JsonUsageCommand(TyperCommand):
    """A command whose usage errors are a JSON object on stderr when --json is given.

    Exit code stays 2 (click's usage code), with or without --json.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        want_json = "--json" in args
        try:
            return super().parse_args(ctx, args)
        except UsageError as exc:
            if not want_json:
                raise
            sys.stderr.write(
                json.dumps(
                    {
                        "error": "usage",
                        "message": exc.format_message(),
                        "hint": f"see `{ctx.command_path} --help`",
                    }
                )
                + "\n"
            )
            raise typer.Exit(ExitCode.USAGE) from exc
