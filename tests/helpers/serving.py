"""The grading service's tests' parts: tasks written into tmp_path, grade items, and
`Served` (what tests/serve/conftest.py's `serving` fixture yields: the URL and token, an
httpx client with the token, the service, and `creates`, the sandboxes the real
provider was asked to make, through a thin counting wrapper around its `create`), and
`service_thread`, the same service in a thread of its own for synchronous clients."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from crucible.engine.request import RunRequest
from crucible.sandboxes.base import Sandbox, SandboxSpec
from crucible.serve.pool import PooledProvider
from crucible.serve.server import Running, ServeOptions, running_service
from crucible.serve.service import GradeService
from crucible.serve.session_ops import SessionLimits
from crucible.serve.sessions import SessionManager
from crucible.serve.wiring import SessionOptions
from tests.helpers.wait import wait_until

# What the examples' hello-file checks: /app/hello.txt holding exactly this line.
HELLO = "Hello, crucible!\n"
HELLO_TEST = (
    "mkdir -p /logs/verifier\n"
    "if [ -f /app/hello.txt ] && printf 'Hello, crucible!\\n' | cmp -s - /app/hello.txt; then\n"
    "  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n"
)


def write_task(
    root: Path, name: str, *, test: str = HELLO_TEST, toml: str = "", network: str = "no-network"
) -> Path:
    """A task folder `root/name` like examples/tasks/hello-file, with `test` as its test."""
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "environment").mkdir()
    (d / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n\nWORKDIR /app\n")
    (d / "instruction.md").write_text("Write /app/hello.txt.\n")
    (d / "tests" / "test.sh").write_text("#!/usr/bin/env bash\n" + test)
    (d / "task.toml").write_text(
        'schema_version = "1.1"\n[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n'
        f'[environment]\ncpus = 1\nmemory_mb = 256\nnetwork_mode = "{network}"\n' + toml
    )
    return d


def hello_item(grade_id: str, content: str = HELLO, task: str = "hello") -> dict[str, Any]:
    return {"id": grade_id, "task": {"id": task},
            "submission": {"type": "files", "files": {"/app/hello.txt": content}}}  # fmt: skip


@dataclass
class Served:
    url: str
    token: str
    service: GradeService
    http: httpx.AsyncClient
    running: Running
    creates: list[SandboxSpec] = field(default_factory=list)

    async def grade(self, *items: dict[str, Any], wait_s: float = 120.0) -> httpx.Response:
        return await self.http.post("/v1/grade", json={"items": list(items), "wait_s": wait_s})


def count_creates(service: GradeService, creates: list[SandboxSpec]) -> None:
    provider = service.provider
    real = provider.create

    async def counting(spec: SandboxSpec) -> Sandbox:
        creates.append(spec)
        return await real(spec)

    provider.create = counting  # type: ignore[method-assign]


Serving = Callable[..., Any]


@dataclass
class ServiceThread:
    """The real service (serve.server.running_service) run in a thread of its own, for
    tests that drive it with the synchronous ServiceClient: `call` runs a coroutine in its
    loop. `provider` is the planned (local) provider, under the warm pool if any."""

    url: str
    token: str
    running: Running
    loop: asyncio.AbstractEventLoop

    @property
    def service(self) -> GradeService:
        return self.running.service

    @property
    def manager(self) -> SessionManager:
        return self.running.sessions

    @property
    def pool(self) -> PooledProvider:
        assert isinstance(self.service.provider, PooledProvider)
        return self.service.provider

    @property
    def provider(self) -> Any:
        p = self.service.provider
        return p.inner if isinstance(p, PooledProvider) else p

    @property
    def job_dir(self) -> Path:
        return self.service.job_dir

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


@contextmanager
def service_thread(
    tmp_path: Path,
    tasks: list[Path],
    *,
    job: str = "sessions",
    concurrency: int = 4,
    max_sessions: int = 8,
    idle_timeout_s: float = 300.0,
    limits: SessionLimits | None = None,
    warm: int = 0,
    max_body_mb: float = 64.0,
) -> Iterator[ServiceThread]:
    req = RunRequest(paths=tasks, env="local", jobs_dir=tmp_path / "jobs", job_name=job,
                     concurrency=concurrency, max_retries=0)  # fmt: skip
    opts = ServeOptions(port=0, max_body_mb=max_body_mb,
                        sessions=SessionOptions(max_sessions=max_sessions,
                                                idle_timeout_s=idle_timeout_s, limits=limits,
                                                warm=warm))  # fmt: skip
    loop = asyncio.new_event_loop()
    up: list[Running] = []
    failed: list[BaseException] = []
    stop = asyncio.Event()

    async def main() -> None:
        try:
            async with running_service(req, opts) as r:
                up.append(r)
                await stop.wait()
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        wait_until(lambda: bool(up or failed), "the service to start")
        if failed:
            raise failed[0]
        yield ServiceThread(up[0].url, up[0].token, up[0], loop)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join()
        loop.close()
        if failed and up:
            raise failed[0]
