"""`crucible serve`: the grading service for RL trainers (serve/, docs/serve.md)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import typer

from crucible.cli.common import (
    ENV_PARAM_HELP,
    CreateRateOpt,
    ExecutorOpt,
    JobsDirOpt,
    MaxBuildsOpt,
    MaxStartingOpt,
    RayAddressOpt,
    SharedStoreOpt,
    err_console,
    fail,
    fail_from,
    write_text,
)
from crucible.cli.common import parse_params as _parse_params
from crucible.cli.run_output import print_invalid as _print_invalid
from crucible.cli.task_env import TaskEnvFileOpt, TaskEnvOpt, task_env_names
from crucible.errors import ExitCode
from crucible.records.defaults import DEFAULT_CONCURRENCY, DEFAULT_ENV, DEFAULT_MAX_RETRIES
from crucible.serve.sessions import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_MAX_SESSIONS


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        paths: list[Path] = typer.Argument(..., help="Task directories, or folders of tasks."),
        env: str = typer.Option(
            None, "--env", "-e", help=f"Sandbox provider. [default: {DEFAULT_ENV}]"
        ),
        env_param: list[str] = typer.Option([], "--env-param", help=ENV_PARAM_HELP),
        host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
        port: int = typer.Option(8765, "--port", "-p", help="Port to bind (0: any free one)."),
        jobs_dir: Path = JobsDirOpt,
        job_name: str = typer.Option(
            None,
            "--job-name",
            help="The service's job id; an existing one is resumed (finished grades "
            "answered from disk, unfinished ones run again).",
        ),
        concurrency: int = typer.Option(
            None,
            "--concurrency",
            "-c",
            help=f"Sandboxes at once (grades and sessions). [default: {DEFAULT_CONCURRENCY}]",
        ),
        create_rate: float = CreateRateOpt,
        max_starting: int = MaxStartingOpt,
        max_builds: int = MaxBuildsOpt,
        executor: str = ExecutorOpt,
        ray_address: str = RayAddressOpt,
        shared_store: str = SharedStoreOpt,
        max_retries: int = typer.Option(
            None,
            "--max-retries",
            help=f"Retries of a grade after sandbox/model failures. [default: {DEFAULT_MAX_RETRIES}]",
        ),
        trial_timeout: float = typer.Option(
            None, "--trial-timeout", help="Wall limit of one grade's trial in seconds."
        ),
        task_env: list[str] = TaskEnvOpt,
        task_env_file: Path = TaskEnvFileOpt,
        no_network: bool = typer.Option(
            None, "--no-network", help="Grade every task without network."
        ),
        token_file: Path = typer.Option(
            None,
            "--token-file",
            help="File holding the bearer token (chmod 600); else one is generated and printed.",
        ),
        tls_cert: Path = typer.Option(None, "--tls-cert", help="TLS certificate (PEM)."),
        tls_key: Path = typer.Option(None, "--tls-key", help="TLS private key (PEM)."),
        insecure: bool = typer.Option(
            False, "--insecure", help="Allow a bind beyond loopback without TLS."
        ),
        max_body_mb: float = typer.Option(
            64.0, "--max-body-mb", help="Largest request body in MiB (413 beyond)."
        ),
        max_pending: int = typer.Option(
            10_000, "--max-pending", help="Grades queued or running at once (429 beyond)."
        ),
        max_sessions: int = typer.Option(
            DEFAULT_MAX_SESSIONS, "--max-sessions", help="Sessions open at once (429 beyond)."
        ),
        session_idle_timeout: float = typer.Option(
            DEFAULT_IDLE_TIMEOUT_S,
            "--session-idle-timeout",
            help="Seconds without a request before a session is torn down.",
        ),
        warm: int = typer.Option(
            0,
            "--warm",
            help="Sandboxes kept started per task sandbox, for grades and sessions to take.",
        ),
        as_json: bool = typer.Option(
            False, "--json", help="Print one JSON line at start: url, token, job_id, tasks."
        ),
    ) -> None:
        """Serve tasks to RL trainers: POST /v1/grade grades submissions in sandboxes,
        /v1/sessions runs multi-turn sessions in them.

        Every grade is a trial of one job (JOBS_DIR/JOB_ID), so `crucible runs`, `report`
        and `view` see them. A bearer token is always required; binding beyond loopback
        needs --tls-cert/--tls-key or --insecure. SIGTERM or Ctrl-C stops it cleanly;
        restarted with the same --job-name, it answers finished grades from disk and runs
        the unfinished ones again. See docs/serve.md.
        """
        from pydantic import ValidationError

        from crucible.engine.launch import LaunchRefused
        from crucible.engine.request import RunRequest
        from crucible.errors import CrucibleError
        from crucible.serve.server import ServeOptions
        from crucible.serve.server import serve as run_service
        from crucible.serve.wiring import SessionOptions

        if max_sessions < 1 or session_idle_timeout <= 0 or warm < 0:
            fail(ExitCode.USAGE, "usage", "--max-sessions is 1 or more, "
                 "--session-idle-timeout above 0, --warm 0 or more", as_json=as_json)  # fmt: skip

        try:
            req = RunRequest(
                paths=paths, env=env, env_params=_parse_params(env_param, "--env-param", as_json),
                jobs_dir=jobs_dir, job_name=job_name, concurrency=concurrency,
                create_rate=create_rate, max_starting=max_starting, max_builds=max_builds,
                max_retries=max_retries, executor=executor, ray_address=ray_address,
                shared_store=shared_store,
                trial_timeout=trial_timeout, no_network=no_network,
                task_env=task_env_names(task_env, task_env_file, as_json),
            )  # fmt: skip
        except ValidationError as exc:
            fail(ExitCode.USAGE, "usage", f"serve options: {exc}", as_json=as_json)
        opts = ServeOptions(host=host, port=port, token_file=token_file, tls_cert=tls_cert,
                            tls_key=tls_key, insecure=insecure, max_body_mb=max_body_mb,
                            max_pending=max_pending,
                            sessions=SessionOptions(max_sessions=max_sessions,
                                                    idle_timeout_s=session_idle_timeout,
                                                    warm=warm))  # fmt: skip

        def ready(url: str, token: str, job_id: str, tasks: list[str]) -> None:
            if as_json:
                line = {"url": url, "token": token, "job_id": job_id, "tasks": tasks}
                sys.stdout.write(json.dumps(line) + "\n")
                sys.stdout.flush()
                return
            err_console.print(
                f"crucible serve: {url} (job {job_id}, {len(tasks)} task(s)); docs at {url}/docs",
                highlight=False,
            )
            write_text(f"CRUCIBLE_SERVE_URL={url}\nCRUCIBLE_SERVE_TOKEN={token}\n")

        try:
            code = asyncio.run(
                run_service(
                    req, opts, on_ready=ready, on_invalid=None if as_json else _print_invalid
                )
            )
        except LaunchRefused as exc:
            fail(exc.code, exc.error, exc.message, hint=exc.hint, as_json=as_json)
        except CrucibleError as exc:
            fail_from(exc, as_json=as_json)
        raise typer.Exit(code)
