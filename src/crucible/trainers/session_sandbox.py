"""A grading-service session as a crucible Sandbox, so the terminal agent can roll out in it.

    async with AsyncServiceClient(url, token) as client:
        sandbox = await SessionSandbox.open(client, "hello-file")
        try:
            ctx = AgentContext(task=task, sandbox=sandbox, logs_dir=logs, timeout_sec=600)
            result = await TerminalAgent(model="policy", client=my_engine).run(ctx)
            graded = await sandbox.grade()
        finally:
            await sandbox.close()

Every call is the session's HTTP API (serve/session_routes.py): exec, upload,
download, grade, close. Commands run as the task's agent user, which the service
chooses (`agent_user=` says which, e.g. task.config.agent.user): a request for
another user, or for root when it is not given, is refused here, never sent. The
service caps what one exec returns; the sandbox's network is what the task says,
which the session does not report, so it is given (`network=`, default none).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from crucible.records.serve import GradeResult, SessionInfo
from crucible.sandboxes.base import (
    DEFAULT_OUTPUT_CAP,
    ExecResult,
    NetworkMode,
    Sandbox,
    SandboxSpec,
)
from crucible.trainers.client import AsyncServiceClient, ServiceError

_MAX_EXEC_S = 3600.0  # the service's own cap on an exec's timeout


class SessionSandbox(Sandbox):
    def __init__(
        self,
        client: AsyncServiceClient,
        info: SessionInfo,
        *,
        agent_user: str | None = None,
        network: NetworkMode = "none",
    ) -> None:
        self.client = client
        self.info = info
        self.agent_user = agent_user
        self.spec = SandboxSpec(task_name=info.task_id, workdir=info.workdir, network=network)
        self._closed = False

    @classmethod
    async def open(
        cls,
        client: AsyncServiceClient,
        task: str,
        *,
        task_hash: str | None = None,
        agent_user: str | None = None,
        network: NetworkMode = "none",
    ) -> SessionSandbox:
        info = await client.open_session(task, task_hash=task_hash)
        return cls(client, info, agent_user=agent_user, network=network)

    async def exec(
        self,
        command: str | list[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        input: bytes | str | None = None,
        user: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> ExecResult:
        if (
            user is not None
            and user != self.agent_user
            and (self.agent_user is not None or user in ("root", "0"))
        ):
            raise PermissionError(
                f"a session runs commands as the task's agent user only, not {user!r}"
            )
        text_in = input.decode("utf-8", "replace") if isinstance(input, bytes) else input
        t0 = time.monotonic()
        got = await self.client.exec(
            self.info.id,
            command,
            timeout_s=min(max(timeout or 60.0, 1.0), _MAX_EXEC_S),
            cwd=cwd,
            env=env,
            input=text_in,
        )
        return ExecResult(
            exit_code=got.exit_code,
            stdout=got.stdout[:output_cap],
            stderr=got.stderr[:output_cap],
            timed_out=got.timed_out,
            truncated=got.truncated or len(got.stdout) > output_cap or len(got.stderr) > output_cap,
            duration_sec=time.monotonic() - t0,
        )

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        await self.client.upload(self.info.id, path, data, mode)

    async def read_file(self, path: str) -> bytes:
        try:
            return await self.client.download(self.info.id, path)
        except ServiceError as exc:
            if exc.status == 404:
                raise FileNotFoundError(path) from None
            raise

    async def upload_dir(self, src: Path, dst: str) -> None:
        for rel, data in await asyncio.to_thread(_host_files, src):
            await self.write_file(f"{dst.rstrip('/')}/{rel}", data)

    async def download_dir(self, src: str, dst: Path) -> None:
        listing = await self.exec(["find", src, "-type", "f", "-print0"], timeout=120)
        base = src.rstrip("/") + "/"
        for name in filter(None, listing.stdout.split("\0")):
            if name.startswith(base):
                data = await self.read_file(name)
                await asyncio.to_thread(_place, dst, name[len(base) :], data)

    async def kill_all(self) -> None:
        raise NotImplementedError(
            "a session has no route to kill its processes: grade it, then close it"
        )

    async def grade(self, grade_id: str | None = None) -> GradeResult:
        """Grade what the rollout left (the session's grade route)."""
        return await self.client.grade_session(self.info.id, grade_id)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self.client.close_session(self.info.id)
        except ServiceError:
            pass  # already gone (idle timeout, closed by the service)


def _host_files(src: Path) -> list[tuple[str, bytes]]:
    return [
        (p.relative_to(src).as_posix(), p.read_bytes())
        for p in sorted(src.rglob("*"))
        if p.is_file() and not p.is_symlink()
    ]


def _place(dst: Path, rel: str, data: bytes) -> None:
    """Write one downloaded file under `dst`; a name that would land outside it is skipped."""
    target = (dst / rel).resolve()
    if not target.is_relative_to(dst.resolve()):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
