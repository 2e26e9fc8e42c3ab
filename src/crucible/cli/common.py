"""What every command shares: consoles, exit codes, errors (JSON under --json)."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console

from crucible.errors import AuthError, CrucibleError, ExitCode, ProviderUnavailable

console = Console()
err_console = Console(stderr=True)

EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 auth, 5 backend "
    "(a provider or service did not answer)."
)

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
        err_console.print(f"[bold red]error[/]: {message}", highlight=False)
        if hint:
            err_console.print(f"[dim]hint[/]: {hint}", highlight=False)
    raise typer.Exit(code)


def fail_from(exc: CrucibleError, *, as_json: bool = False) -> NoReturn:
    """Map a crucible error onto the stable exit codes."""
    if isinstance(exc, AuthError):
        fail(ExitCode.AUTH, "auth", exc.message, hint=exc.hint, as_json=as_json)
    if isinstance(exc, ProviderUnavailable):
        fail(ExitCode.BACKEND, "backend", exc.message, hint=exc.hint, as_json=as_json)
    fail(ExitCode.ERROR, str(exc.kind), exc.message, hint=exc.hint, as_json=as_json)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()
