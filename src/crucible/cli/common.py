"""What every command shares: consoles, exit codes, errors (JSON under --json)."""

from __future__ import annotations

import json
import os
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console, ConsoleOptions, RenderableType
from rich.markup import escape
from rich.segment import Segment
from rich.text import Text
from typer.core import TyperCommand

from crucible.errors import AuthError, CrucibleError, ExitCode, ProviderUnavailable
from crucible.records.text import storable_text, terminal_safe


class SafeConsole(Console):
    """A console that never hands a terminal a control character of the text it prints.

    Every string a command shows may come from a sandbox, a task or a model (a stage's
    reason quotes the submission's stderr; task names, judge reasons, log tails), so the
    text of every segment passes `terminal_safe` after layout, whatever the renderable
    (a table cell, a progress line, a markup string). What is removed takes no cells,
    so tables stay aligned. crucible's own styles are not text and stay; a link style
    (OSC 8, from markup a name smuggled in) is dropped: no command prints links.
    Rich's own control segments (cursor moves of the progress display) pass as they are.
    """

    def render_str(self, text: str, **kwargs: Any) -> Text:
        # Before rich reads it: its Text drops BEL itself, which would leave an OSC
        # unterminated for the segment filter to take too much after.
        return super().render_str(terminal_safe(text), **kwargs)

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            if seg.control:
                yield seg
                continue
            text, style = terminal_safe(seg.text), seg.style
            if style is not None and style.link:
                style = style.update_link(None)
            yield seg if text is seg.text and style is seg.style else Segment(text, style)


def _console(stderr: bool) -> Console:
    # Piped output (CI logs, files) gets room for wide tables instead of rich's 80 columns.
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and "COLUMNS" not in os.environ
    return SafeConsole(stderr=stderr, width=160 if wide else None)


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
        text = storable_text(s)  # err_console strips control characters (SafeConsole)
        if as_json:
            sys.stderr.write(
                json.dumps({"warning": "trial_record_skipped", "message": text}) + "\n"
            )
        else:
            err_console.print(
                f"[yellow]warning[/]: trial record skipped: {escape(text)}", highlight=False
            )


def print_json(data: Any) -> None:
    # json.dumps escapes every control character and everything past ASCII (ensure_ascii),
    # so JSON output is terminal-safe as it is; lone surrogates become \\udcff escapes.
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def write_text(text: str, *, stderr: bool = False) -> None:
    """Plain text (log lines, a Markdown report) to stdout, through `terminal_safe`:
    what prints without rich prints through here."""
    stream = sys.stderr if stderr else sys.stdout
    stream.write(terminal_safe(text))
    stream.flush()


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


# Pacing options `run` and `serve` share (a job's and the service's sandboxes and builds).
CreateRateOpt = typer.Option(
    None,
    "--create-rate",
    help="Sandbox creations per second, job-wide (default: the provider's own pacing).",
)
MaxStartingOpt = typer.Option(
    None, "--max-starting", help="Sandboxes still starting at once, job-wide."
)
MaxBuildsOpt = typer.Option(
    None,
    "--max-builds",
    min=1,
    help="Image builds running at once, job-wide, on every provider "
    "(a cancel or shutdown stops them). [default: half the cores]",
)

# Where trials run: `run` and `serve` share them (engine/executor.py, docs/ray.md).
ExecutorOpt = typer.Option(
    "local",
    "--executor",
    help="Where trials run: local (this machine) or ray (the nodes of a Ray cluster). "
    "[default: local]",
    show_default=False,
)
RayAddressOpt = typer.Option(
    None,
    "--ray-address",
    help="The Ray cluster to join with --executor ray (e.g. 10.0.0.1:6379; "
    "default: RAY_ADDRESS, else a one-node Ray started here).",
)
SharedStoreOpt = typer.Option(
    None,
    "--shared-store",
    help="With --executor ray: a folder every node and the head mount, for trial "
    "folders too large to send back inline.",
)


def parse_params(items: list[str], what: str, as_json: bool) -> dict[str, str]:
    """`key=value` options (--env-param, --agent-kwarg) as a dict; a bad one exits 2."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(ExitCode.USAGE, "usage", f"{what} {item!r} is not key=value", as_json=as_json)
        out[key.strip()] = value
    return out


def read_toml(path: Path | None, what: str, as_json: bool) -> dict[str, Any]:
    """A TOML file given by an option ({} when none); a missing or broken one exits."""
    if path is None:
        return {}
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        fail(ExitCode.NOT_FOUND, "not_found", f"{what} {path} does not exist", as_json=as_json)
    except (OSError, UnicodeDecodeError) as exc:
        fail(ExitCode.USAGE, "usage", f"{what} {path}: {exc}", as_json=as_json)
    except tomllib.TOMLDecodeError as exc:
        fail(ExitCode.USAGE, "usage", f"{what} {path}: {exc}", as_json=as_json)


# The --env-param names each built-in provider reads (docs/reference/env-params.md; a
# test checks this against the providers). An unknown one is an error listing these.
ENV_PARAM_NAMES = {
    "local": "cpu, memory, timeout, env_variables, userland, image_tool, base_image, cgroups, "
    "runtime_dir",
    "docker": "image, cpu, memory, timeout, env_variables, host, compose_timeout",
    "modal": "app_name, environment_name, image, named_image, timeout, idle_timeout, cpu, "
    "memory, gpu, region, env_variables, create_rate, max_starting, create_attempts, config",
}
ENV_PARAM_HELP = (
    "Provider parameter key=value (repeatable). "
    + "; ".join(f"{name}: {names}" for name, names in ENV_PARAM_NAMES.items())
    + " (docs/reference/env-params.md)."
)
