"""`crucible modal run`: a Modal program run offline, without an account (modalrt/)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from crucible.cli.common import EXIT_CODES_HELP, fail, write_text
from crucible.errors import ExitCode

MODAL_EXIT_HELP = (
    "Exit codes: 0 ok, 1 the program failed (its traceback is printed), 2 usage, "
    "3 file not found, 6 needs a GPU (a GPU function needed CUDA and this machine has none)."
)

modal_app = typer.Typer(
    name="modal",
    help="Run Modal programs on this machine, offline, with a trace of what ran remotely.\n\n"
    + EXIT_CODES_HELP,
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(modal_app, name="modal")


@modal_app.command(
    "run",
    epilog=MODAL_EXIT_HELP,
    context_settings={
        "allow_extra_args": True,
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
    },
)
def run_cmd(
    ctx: typer.Context,
    target: str = typer.Argument(..., metavar="FILE[::ENTRYPOINT]", help="The Modal program."),
    trace: Path | None = typer.Option(None, "--trace", help="Write the run's trace here (JSON)."),
    secrets: Path | None = typer.Option(
        None,
        "--secrets",
        help="TOML file of \\[name] tables for Secret.from_name (default ~/.crucible/secrets.toml).",
    ),
    state_dir: Path | None = typer.Option(
        None,
        "--state-dir",
        help="Volumes, Dicts and Queues live here (default ~/.crucible/modalrt).",
    ),
    script: bool = typer.Option(
        False,
        "--script",
        help="Run FILE as `python FILE` would (for programs that call app.run()).",
    ),
    max_containers: int = typer.Option(
        4, "--max-containers", min=1, help="Containers per function when the program sets none."
    ),
    timeout: float | None = typer.Option(
        None, "--timeout", help="Stop the program after this many seconds."
    ),
) -> None:
    """Run FILE's local entrypoint (or ENTRYPOINT: an entrypoint, a function, or Cls.method)
    with the arguments after it (`--name value`), printing the program's own output.

    Remote calls (.remote, .map, .spawn ...) run in separate processes; Volumes,
    Dicts and Queues are local stores; secrets come from --secrets. A GPU function
    runs on the CPU when its code allows it.
    """
    from crucible.modalrt.api import run_program, split_target

    program, entry = split_target(target)
    if not program.is_file():
        fail(ExitCode.NOT_FOUND, "not_found", f"no such file: {program}")
    result = run_program(
        program,
        entry,
        list(ctx.args),
        state_dir=state_dir,
        secrets_file=secrets,
        trace_path=trace,
        script=script,
        timeout=timeout,
        max_containers=max_containers,
    )
    sys.stdout.flush()
    raise typer.Exit(result.exit_code)


@modal_app.command("serve", epilog=MODAL_EXIT_HELP)
def serve_cmd(
    program: Path = typer.Argument(..., help="The Modal program."),
    trace: Path | None = typer.Option(None, "--trace", help="Write the run's trace here (JSON)."),
    secrets: Path | None = typer.Option(None, "--secrets", help="TOML file of \\[name] tables."),
    state_dir: Path | None = typer.Option(None, "--state-dir", help="Volumes, Dicts, Queues."),
) -> None:
    """Serve FILE's web endpoints on 127.0.0.1 until Ctrl-C, printing each endpoint's URL."""
    import signal
    import threading

    from crucible.modalrt.serve import ServeError, serve_program

    if not program.is_file():
        fail(ExitCode.NOT_FOUND, "not_found", f"no such file: {program}")
    try:
        with serve_program(
            program, state_dir=state_dir, secrets_file=secrets, trace_path=trace, echo=True
        ) as served:
            for name, url in served.urls.items():
                write_text(f"{name}: {url}\n")
            sys.stdout.flush()
            stop = threading.Event()
            # Ctrl-C or SIGTERM ends the block, which stops the program and writes the trace.
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            try:
                stop.wait()
            except KeyboardInterrupt:
                pass
    except ServeError as exc:
        fail(ExitCode.ERROR, "serve", str(exc))
