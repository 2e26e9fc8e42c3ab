"""Starting and stopping the service: plan (engine/launch.py, as `crucible run` does),
the token, the bind rules, uvicorn, and a clean stop on SIGTERM/SIGINT.

The stop cancels the running grades first (their records stay unfinished, so a restart
on the same job re-runs them; their waiting requests answer `pending`), lets uvicorn
close its connections, then closes every sandbox and the provider.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
from collections.abc import Callable, Generator, Iterable
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
from crucible.serve.app import create_app
from crucible.serve.limits import DEFAULT_MAX_BODY_MB
from crucible.serve.service import DEFAULT_MAX_PENDING, GradeService, Refused, ServiceOptions
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
    routers: list[APIRouter] = field(default_factory=list)


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


def check_names(plan: LaunchPlan) -> None:
    seen: dict[str, Path] = {}
    for t in plan.tasks:
        if t.name in seen:
            raise LaunchRefused(
                ExitCode.USAGE,
                "usage",
                f"two tasks are named {t.name!r} ({seen[t.name]} and {t.path}): "
                "a grade names its task, so names must be unique",
            )
        seen[t.name] = t.path


async def plan_service(req: RunRequest, **kw: Any) -> LaunchPlan:
    """The launch plan of a service: agent `submission`, tampering counted 0."""
    req = req.model_copy(update={"agent": "submission", "tampered": req.tampered or "zero"})
    plan = await prepare_launch(req, agent=SubmissionAgent(TextSubmission(text="")), **kw)
    try:
        check_names(plan)
    except BaseException:
        await plan.provider.aclose()
        raise
    return plan


class _Server(uvicorn.Server):
    """uvicorn, with the service's own stop on SIGTERM/SIGINT (uvicorn's would re-raise
    the signal after it stops, before the sandboxes are closed)."""

    on_stop: Callable[[], None] = staticmethod(lambda: None)

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.up = asyncio.Event()  # set once bound (or once startup gave up)

    async def startup(self, sockets: list[Any] | None = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.up.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        loop = asyncio.get_running_loop()
        sigs = (signal.SIGINT, signal.SIGTERM)
        for sig in sigs:
            loop.add_signal_handler(sig, self.on_stop)
        try:
            yield
        finally:
            for sig in sigs:
                loop.remove_signal_handler(sig)


async def serve(
    req: RunRequest,
    opts: ServeOptions,
    *,
    on_ready: OnReady,
    on_invalid: Any = None,
    extra_metrics: Iterable[Callable[[], str]] = (),
) -> int:
    check_bind(opts)
    token = service_token(opts)
    plan = await plan_service(req, on_invalid=on_invalid)
    service = GradeService(
        plan.cfg,
        plan.tasks,
        plan.provider,
        plan.jobs_dir,
        ServiceOptions(
            max_retries=plan.options.max_retries,
            trial_timeout_sec=plan.options.trial_timeout_sec,
            create_rate=plan.options.create_rate,
            max_starting=plan.options.max_starting,
            max_pending=opts.max_pending,
        ),
    )
    try:
        try:
            await service.start()
        except Refused as exc:
            raise LaunchRefused(ExitCode.ERROR, "busy", exc.message) from exc
        app = create_app(service, token, routers=opts.routers,
                         max_body_bytes=int(opts.max_body_mb * 1024 * 1024),
                         extra_metrics=extra_metrics)  # fmt: skip
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
        server = _Server(config)
        stopping: list[asyncio.Task[None]] = []

        async def stop() -> None:
            await service.cancel_running()
            server.should_exit = True

        def on_stop() -> None:
            if stopping:  # a second signal: stop now
                server.force_exit = True
                return
            stopping.append(asyncio.ensure_future(stop()))

        server.on_stop = on_stop  # type: ignore[method-assign]
        run = asyncio.create_task(server.serve())
        up = asyncio.create_task(server.up.wait())
        await asyncio.wait({run, up}, return_when=asyncio.FIRST_COMPLETED)
        up.cancel()
        if server.started:
            port = server.servers[0].sockets[0].getsockname()[1]
            scheme = "https" if opts.tls_cert else "http"
            host = f"[{opts.host}]" if ":" in opts.host else opts.host
            on_ready(f"{scheme}://{host}:{port}", token, plan.cfg.job_id, sorted(service.by_name))
        await run
        await asyncio.gather(*stopping, return_exceptions=True)
    finally:
        await service.close()
        await plan.provider.aclose()
    return 0
