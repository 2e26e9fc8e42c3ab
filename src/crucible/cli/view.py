"""`crucible view`: a local web viewer of jobs, tasks and trials (follows running jobs)."""

from __future__ import annotations

from pathlib import Path

import typer

from crucible.cli.common import JobsDirOpt, console, fail
from crucible.errors import ExitCode


def register(app: typer.Typer) -> None:
    app.command("view")(view)


def view(
    jobs_dir: Path | None = JobsDirOpt,
    port: int = typer.Option(8765, "--port", "-p", help="Port to listen on (0: any free port)."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind. Trial logs are served: keep it local."
    ),
    no_open: bool = typer.Option(False, "--no-open", help="Do not open a browser."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log every request."),
    token_file: Path | None = typer.Option(
        None,
        "--token-file",
        help="Read the access token from this file (mode 600), or, when it does not exist, "
        "write the new random token there (for scripts). Default: a new token each start.",
    ),
) -> None:
    """Browse jobs, then tasks, then trials: instruction, trajectory, verifier
    output, rewards and timings. Pages refresh while a job runs. Ctrl-C stops.

    Every request needs the token printed in the URL (as Jupyter does), even on
    127.0.0.1: local sandboxes and other processes reach loopback too. The browser
    gets it once from the URL, then keeps it in a cookie; scripts send
    `Authorization: Bearer TOKEN`."""
    from crucible.reports.viewer import ViewerServer
    from crucible.store.layout import default_jobs_dir
    from crucible.webauth.token import TokenError, new_token, read_token_file, write_token_file

    root = (jobs_dir or default_jobs_dir()).resolve()
    token = new_token()
    try:
        if token_file is not None and token_file.exists():
            token = read_token_file(token_file)
        elif token_file is not None:
            write_token_file(token_file, token)
    except (TokenError, OSError) as exc:
        fail(ExitCode.USAGE, "usage", f"--token-file: {exc}")
    try:
        server = ViewerServer(root, host, port, verbose=verbose, token=token)
    except OSError as exc:
        fail(ExitCode.ERROR, "bind", f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    if not root.is_dir():
        console.print(f"[yellow]note[/]: {root} does not exist yet; jobs appear when it does.")
    if host not in ("127.0.0.1", "localhost", "::1"):
        console.print(
            f"[yellow]warning[/]: listening on {host}: anyone who can reach it reads the logs."
        )
    console.print(f"crucible viewer on [bold]{server.url}[/] (jobs: {root}); Ctrl-C to stop")
    if not no_open:
        import webbrowser

        webbrowser.open(server.url)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
