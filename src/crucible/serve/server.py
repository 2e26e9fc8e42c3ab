"""Starting and stopping the service: plan (engine/launch.py, as `crucible run` does),
the token, the bind rules, uvicorn, and a clean stop on SIGTERM/SIGINT.

The stop cancels the running grades first (their records stay unfinished, so a restart
on the same job re-runs them; their waiting requests answer `pending`), lets uvicorn
close its connections, then closes the sessions, every sandbox, the warm pool and the
provider. Sessions (`/v1/sessions`) and the warm pool are serve/wiring.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
from collections.abc import AsyncIterator, Callable, Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import APIRouter

from crucible.agents.submission import SubmissionAgent
from crucible.engine.launch import LaunchPlan, LaunchRefused, prepare_launch
from crucible.engine.request import RunRequest
from crucible.errors import ExitCode
from crucible.records.submission import TextSubmission
from crucible.sandboxes.buildgate import BuildGate
from crucible.serve.app import create_app
from crucible.serve.common import DEFAULT_MAX_PENDING, Refused, ServiceOptions
from crucible.serve.limits import DEFAULT_MAX_BODY_MB
from crucible.serve.service import GradeService
from crucible.serve.session_routes import sessions_router
from crucible.serve.sessions import SessionManager
from crucible.serve.wiring import (
    SessionOptions,
    parts_metrics,
    pooled,
    session_manager,
    warm_up,
)
from crucible.webauth.token import new_token, read_token_file

# A ready server's facts: (url, token, job id, task names).
OnReady = Callable[[str, str, str, list[str]], None]


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8765
    token_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    insecure: bool = False
    max_body_mb: float = DEFAULT_MAX_BODY_MB
    max_pending: int = DEFAULT_MAX_PENDING
    sessions: SessionOptions = field(default_factory=SessionOptions)  # and --warm
    # Other parts' routes (sessions): each makes its routers from the started service.
    routers: list[Callable[[GradeService], Iterable[APIRouter]]] = field(default_factory=list)
    extra_metrics: list[Callable[[], str]] = field(default_factory=list)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(opts: ServeOptions) -> None:
    """Beyond loopback the token would cross the network: TLS, or an explicit --insecure."""
    if bool(opts.tls_cert) != bool(opts.tls_key):
        raise LaunchRefused(ExitCode.USAGE, "usage", "--tls-cert and --tls-key go together")
    if not is_loopback(opts.host) and not opts.tls_cert and not opts.insecure:
        raise LaunchRefused(
            ExitCode.USAGE,
            "usage",
            f"binding {opts.host} (beyond loopback) sends the token in clear text",
            hint="give --tls-cert and --tls-key, or pass --insecure on a network you trust",
        )


def service_token(opts: ServeOptions) -> str:
    if opts.token_file is None:
        return new_token()
    from crucible.webauth.token import TokenError

    try:
        return read_token_file(opts.token_file)
    except TokenError as exc:
        raise LaunchRefused(ExitCode.USAGE, "usage", str(exc)) from exc


async def plan_service(req: RunRequest, **kw: Any) -> LaunchPlan:
    """The launch plan of a service: agent `submission`, tampering counted 0. Two tasks
    of one name are refused there (a task check's `duplicate task name`): a grade names
    its task."""
    req = req.model_copy(update={"agent": "submission", "tampered": req.tampered or "zero"})
    return await prepare_launch(req, agent=SubmissionAgent(TextSubmission(text="")), **kw)


class _Server(uvicorn.Server):
    """uvicorn, with the service's own stop on SIGTERM/SIGINT (uvicorn's would re-raise
    the signal after it stops, before the sandboxes are closed); none in-process."""

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[], None] | None) -> None:
        super().__init__(config)
        self.up = asyncio.Event()  # set once bound (or once startup gave up)
        self.on_signal = on_signal

    async def startup(self, sockets: list[Any] | None = None) -> None:
        try:
            await super().startup(sockets)
        except SystemExit:  # uvicorn's way out of a failed bind (it logged why)
            self.should_exit = True
        finally:
            self.up.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if self.on_signal is None:
            yield
            return
        loop = asyncio.get_running_loop()
        sigs = (signal.SIGINT, signal.SIGTERM)
        for sig in sigs:
            loop.add_signal_handler(sig, self.on_signal)
        try:
            yield
        finally:
            for sig in sigs:
                loop.remove_signal_handler(sig)


@dataclass
class Running:
    """A started service: where it listens, its token, the service, and its stop."""

    url: str
    token: str
    service: GradeService
    plan: LaunchPlan
    stop_requested: asyncio.Event
    sessions: SessionManager


def _service(plan: LaunchPlan, opts: ServeOptions) -> GradeService:
    o = plan.options
    # One build gate for the service's image builds (--max-builds), closed at shutdown.
    plan.provider.build_gate = BuildGate(o.max_builds)
    return GradeService(
        plan.cfg,
        plan.tasks,
        pooled(plan.provider, opts.sessions.warm),
        plan.jobs_dir,
        ServiceOptions(max_retries=o.max_retries, trial_timeout_sec=o.trial_timeout_sec,
                       create_rate=o.create_rate, max_starting=o.max_starting,
                       max_pending=opts.max_pending),
        executor=plan.executor,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def running_service(
    req: RunRequest, opts: ServeOptions, *, on_invalid: Any = None, signals: bool = False
) -> AsyncIterator[Running]:
    """Plan, start and bind the service; on exit (or a signal, with `signals`), stop it:
    running grades cancelled, connections closed, sandboxes and provider closed."""
    check_bind(opts)
    token = service_token(opts)
    plan = await plan_service(req, on_invalid=on_invalid)
    service = _service(plan, opts)
    stop_requested = asyncio.Event()
    server: _Server | None = None
    run: asyncio.Task[None] | None = None
    try:
        try:
            await service.start()
        except Refused as exc:
            raise LaunchRefused(ExitCode.ERROR, "busy", exc.message) from exc
        sessions = session_manager(service, opts.sessions)
        warm_up(service, sessions)
        routers = [sessions_router(sessions), *(r for make in opts.routers for r in make(service))]
        app = create_app(service, token, routers=routers,
                         max_body_bytes=int(opts.max_body_mb * 1024 * 1024),
                         extra_metrics=[lambda: parts_metrics(service, sessions),
                                        *opts.extra_metrics])  # fmt: skip
        config = uvicorn.Config(
            app,
            host=opts.host,
            port=opts.port,
            ssl_certfile=str(opts.tls_cert) if opts.tls_cert else None,
            ssl_keyfile=str(opts.tls_key) if opts.tls_key else None,
            log_level="warning",
            timeout_graceful_shutdown=10,
            lifespan="off",
        )

        def on_signal() -> None:
            if stop_requested.is_set() and server is not None:  # a second signal: now
                server.force_exit = True
            stop_requested.set()

        server = _Server(config, on_signal if signals else None)
        run = asyncio.create_task(server.serve())
        up = asyncio.create_task(server.up.wait())
        await asyncio.wait({run, up}, return_when=asyncio.FIRST_COMPLETED)
        up.cancel()
        if not server.started:  # uvicorn logged why (a port in use) and exits its task
            await asyncio.gather(run, return_exceptions=True)
            run = None
            raise LaunchRefused(
                ExitCode.ERROR,
                "error",
                f"could not bind {opts.host}:{opts.port}",
                hint="is the port in use? --port 0 takes any free one",
            )
        port = server.servers[0].sockets[0].getsockname()[1]
        scheme = "https" if opts.tls_cert else "http"
        host = f"[{opts.host}]" if ":" in opts.host else opts.host
        yield Running(f"{scheme}://{host}:{port}", token, service, plan, stop_requested, sessions)
    finally:
        await service.cancel_running()  # waiting requests answer `pending` at once
        if server is not None and run is not None:
            server.should_exit = True
            await asyncio.gather(run, return_exceptions=True)
        await service.close()  # sessions closed first, then the sandboxes drained
        await service.provider.aclose()  # the warm pool's sandboxes, then the provider


async def serve(req: RunRequest, opts: ServeOptions, *, on_ready: OnReady,
                on_invalid: Any = None) -> int:  # fmt: skip
    """`crucible serve`: run until SIGTERM or SIGINT."""
    async with running_service(req, opts, on_invalid=on_invalid, signals=True) as r:
        on_ready(r.url, r.token, r.plan.cfg.job_id, sorted(r.service.by_name))
        await r.stop_requested.wait()
    return 0
