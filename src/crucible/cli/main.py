"""The typer app. Command modules are imported here but keep their heavy
imports inside the commands, so `crucible --help` stays fast."""

from __future__ import annotations

import importlib

import typer
from typer.core import TyperCommand

from crucible.cli.common import EXIT_CODES_HELP, JsonUsageCommand

app = typer.Typer(
    name="crucible",
    help=(
        "Run agent tasks (Harbor format) and their verifiers at scale, in sandboxes, "
        "into rewards and reports.\n\n" + EXIT_CODES_HELP
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# Each module exposes `register(app)`.
COMMAND_MODULES = [
    "run",
    "datasets",
    "tasks",
    "sandboxes",
    "doctor",
    "report",
    "view",
    "runs",
    "skills",
    "docs",
    "contracts",
    "modal",
    "serve",
    "generate",
]

for _name in COMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"crucible.cli.{_name}")
    except ModuleNotFoundError as exc:  # a command group not built yet
        if exc.name != f"crucible.cli.{_name}":
            raise
        continue
    _mod.register(app)


def _json_usage_errors(typer_app: typer.Typer) -> None:
    """Every command reports usage errors as JSON under --json (exit code 2)."""
    for info in typer_app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = JsonUsageCommand
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _json_usage_errors(group.typer_instance)


_json_usage_errors(app)


def _version(value: bool) -> None:
    if value:
        import platform

        from crucible import __version__

        typer.echo(f"crucible {__version__} (Python {platform.python_version()})")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        "-V",
        help="Print the version and exit.",
        is_eager=True,
        callback=_version,
    ),
) -> None:
    pass


def main() -> None:
    from crucible.cli.help import polish

    command = typer.main.get_command(app)
    polish(command)
    command(prog_name="crucible")


if __name__ == "__main__":
    main()
