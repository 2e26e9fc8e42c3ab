"""A small service of the test's own around the sessions router: real uvicorn on 127.0.0.1,
a bearer token, a real local provider (host userland), the SessionManager in uvicorn's loop.

    with session_server(tmp_path, [task]) as srv:
        client = ServiceClient(srv.url, srv.token)
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import Depends, FastAPI, Header, HTTPException
from tests.helpers.wait import wait_until

from crucible.sandboxes.base import Provider
from crucible.serve.session_ops import SessionLimits
from crucible.serve.session_routes import sessions_router
from crucible.serve.sessions import SessionManager
from crucible.tasks.models import Task


@dataclass
class SessionServer:
    url: str
    token: str
    manager: SessionManager
    provider: Provider
    job_dir: Path
    loop: asyncio.AbstractEventLoop

    def call(self, coro: Any) -> Any:
        """Run a coroutine in the server's loop (where the manager lives), from the test."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


def bearer(token: str) -> Any:
    def check(authorization: str | None = Header(default=None)) -> None:
        if authorization != f"Bearer {token}":
            raise HTTPException(status_code=401, detail="a bearer token is required")

    return Depends(check)


@contextmanager
def session_server(
    tmp_path: Path,
    tasks: list[Task],
    *,
    slots: int = 4,
    max_sessions: int = 8,
    idle_timeout_s: float = 300.0,
    limits: SessionLimits | None = None,
    provider: Provider | None = None,
) -> Iterator[SessionServer]:
    from crucible.sandboxes.local.provider import LocalProvider

    job_id = f"sessions-{secrets.token_hex(4)}"
    token = secrets.token_urlsafe(16)
    job_dir = tmp_path / "jobs" / job_id
    job_dir.mkdir(parents=True)
    provider = provider or LocalProvider(userland="host")
    manager = SessionManager({t.name: t for t in tasks}, provider, job_dir=job_dir, job_id=job_id,
                             slots=asyncio.Semaphore(slots), max_sessions=max_sessions,
                             idle_timeout_s=idle_timeout_s, limits=limits)  # fmt: skip
    loops: list[asyncio.AbstractEventLoop] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        loops.append(asyncio.get_running_loop())
        await provider.preflight()
        try:
            yield
        finally:
            await manager.aclose()
            await provider.cleanup(job_id)
            await provider.aclose()

    app = FastAPI(lifespan=lifespan)
    app.include_router(sessions_router(manager, [bearer(token)]))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           lifespan="on"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), "the server to start")
        assert server.started, "the server did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        yield SessionServer(f"http://127.0.0.1:{port}", token, manager, provider, job_dir,
                            loops[0])  # fmt: skip
    finally:
        server.should_exit = True
        thread.join()
