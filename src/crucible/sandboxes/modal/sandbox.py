"""A live Modal Sandbox (`ModalSandbox`): exec with capped output, kill_all,
and an idempotent close that terminates it (file transfer: files.py).

What an exec has to work around on Modal (issue 18, defects 1, 6, 7):
- the summed length of an exec's arguments is capped at 64 KiB
  (modal/sandbox/_common.py:104-111, :225-234): a longer command goes in a
  script file, run by `sh`;
- one stdin write may hold at most 16 MiB before drain (modal/io_streams.py:636,
  :752; 2 MiB on the path through the server, :633, :698): input goes in 1 MiB
  writes, each drained;
- env names outside [A-Za-z_][A-Za-z0-9_]* are refused (modal/sandbox/_common.py:
  115-126): those are set through `env NAME=VALUE` in front of the command;
- the exec timeout kills only the direct process: the provider then kills
  whatever the command started (procs.kill_marked_script);
- kill_all spares the sandbox's init and entrypoint (procs.kill_all_script);
- an exec that fails because the sandbox outlived its `timeout` is reported as
  such (resources_unavailable: a retry would end the same way).
"""

from __future__ import annotations

import asyncio
import math
import shlex
import time
import uuid
from typing import Any

from crucible.errors import CrucibleError, ResourcesUnavailable, SandboxFailed
from crucible.sandboxes.base import DEFAULT_OUTPUT_CAP, ExecResult, SandboxSpec
from crucible.sandboxes.modal.client import SandboxClient
from crucible.sandboxes.modal.files import ModalFiles
from crucible.sandboxes.modal.params import scrub_env, split_env
from crucible.sandboxes.modal.procs import MARKER_VAR, kill_all_script, kill_marked_script
from crucible.sandboxes.modal.sdk import Sdk

ARG_MAX = 2**16  # modal/sandbox/_common.py:111
STDIN_CHUNK = 1 << 20  # under both stdin buffer limits


async def _drain(sdk: Sdk, stream: Any, cap: int) -> tuple[bytes, bool]:
    """Read a byte stream to its end, keeping at most `cap` bytes."""
    kept = bytearray()
    truncated = False
    async for chunk in sdk.aiter(stream, "StreamReader.__aiter__"):
        data = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
        room = cap - len(kept)
        if len(data) > room:
            truncated = True
            if room > 0:
                kept += data[:room]
        else:
            kept += data
    return bytes(kept), truncated


def _arg_len(argv: list[str]) -> int:
    return sum(len(a) for a in argv)


class ModalSandbox(ModalFiles):
    """A live Modal Sandbox. `close()` terminates it; idempotent."""

    # Extra wall time over an exec's own timeout before the host gives up on it.
    EXEC_GRACE_SEC = 30.0

    def __init__(
        self,
        client: SandboxClient,
        handle: Any,
        spec: SandboxSpec,
        *,
        lifetime: float,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.spec = spec
        self._client = client
        self._sdk = client.sdk
        self._sb = handle
        self._closed = False
        self._close_task: asyncio.Task[None] | None = None
        self._ends_at = time.monotonic() + lifetime
        self._lifetime = lifetime
        # env names Modal refuses at create, applied to every exec instead
        self._extra_env = dict(extra_env or {})
        self._spare: list[str] = []  # pid:starttime of the sandbox's own processes

    @property
    def sandbox_id(self) -> str:
        return str(self._sdk.prop(self._sb, "Sandbox.object_id"))

    def _failed(self, what: str, exc: BaseException) -> CrucibleError:
        if time.monotonic() >= self._ends_at:
            # Its life ran out while the attempt used it: from the agent phase on, that is
            # the attempt's time (blame.py), not a gap a stalling agent could aim for.
            self.lifetime_ended = f"it reached its timeout of {self._lifetime:.0f}s"
            return ResourcesUnavailable(
                f"modal sandbox {what} failed: the sandbox reached its {self._lifetime:.0f}s "
                f"timeout ({type(exc).__name__}: {exc})",
                hint="raise --env-param timeout (at most 86400)",
            )
        return SandboxFailed(f"modal sandbox {what} failed: {type(exc).__name__}: {exc}")

    async def _argv(
        self, command: str | list[str], user: str | None, env: dict[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        """The argv and env= for Modal: refused env names and long commands worked around."""
        env_ok, env_other = split_env({**self._extra_env, **env})
        prefix: list[str] = []
        if user and user not in ("root", "0"):
            prefix = ["runuser", "-u", user, "--"]
        if env_other:
            prefix += ["env", *(f"{k}={v}" for k, v in env_other.items())]
        core = ["sh", "-c", command] if isinstance(command, str) else [str(a) for a in command]
        if _arg_len(prefix + core) > ARG_MAX - 1024:
            body = command if isinstance(command, str) else "exec " + shlex.join(core)
            script = f"/tmp/.crucible-cmd-{uuid.uuid4().hex}.sh"
            await self._write(script, f'rm -f -- "$0"\n{body}\n'.encode())
            core = ["sh", script]
        return prefix + core, env_ok

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
        if self._closed:
            raise SandboxFailed("exec on a closed modal sandbox")
        exec_env = scrub_env(env or {}, self._client.secret_values())
        marker = uuid.uuid4().hex
        if timeout is not None:
            exec_env[MARKER_VAR] = marker
        argv, env_ok = await self._argv(command, user, exec_env)
        kwargs: dict[str, Any] = {
            "workdir": self._abs(cwd) if cwd else self.spec.workdir,
            "text": False,
        }
        if env_ok:
            kwargs["env"] = env_ok
        if timeout is not None:
            # Modal's exec timeout is whole seconds; it kills the command and wait() gives -1.
            kwargs["timeout"] = max(1, math.ceil(timeout))
        started = time.monotonic()
        data = input.encode() if isinstance(input, str) else input

        async def run() -> tuple[int, bytes, bool, bytes, bool]:
            proc = await self._sdk.aio(self._sb, "Sandbox.exec", *argv, **kwargs)
            stdin = self._sdk.prop(proc, "ContainerProcess.stdin")
            for at in range(0, len(data or b""), STDIN_CHUNK):
                assert data is not None
                self._sdk.sync(stdin, "StreamWriter.write", data[at : at + STDIN_CHUNK])
                await self._sdk.aio(stdin, "StreamWriter.drain")
            # Always close stdin, so a command that reads it sees EOF instead of hanging.
            self._sdk.sync(stdin, "StreamWriter.write_eof")
            await self._sdk.aio(stdin, "StreamWriter.drain")
            (out, out_cut), (err, err_cut), code = await asyncio.gather(
                _drain(self._sdk, self._sdk.prop(proc, "ContainerProcess.stdout"), output_cap),
                _drain(self._sdk, self._sdk.prop(proc, "ContainerProcess.stderr"), output_cap),
                self._sdk.aio(proc, "ContainerProcess.wait"),
            )
            return int(code), out, out_cut, err, err_cut

        guard = None if timeout is None else timeout + self.EXEC_GRACE_SEC
        try:
            code, out, out_cut, err, err_cut = await asyncio.wait_for(run(), guard)
        except TimeoutError:
            await self._end_marked(marker)
            return ExecResult(
                exit_code=-1,
                stderr="exec did not finish within its timeout (host-side guard)",
                timed_out=True,
                duration_sec=time.monotonic() - started,
            )
        except Exception as exc:
            if self._sdk.is_exc(exc, "ExecTimeoutError"):
                await self._end_marked(marker)
                return ExecResult(
                    exit_code=-1, timed_out=True, duration_sec=time.monotonic() - started
                )
            raise self._failed("exec", exc) from exc
        # Modal reports an exec that ran past its deadline as return code -1.
        timed_out = code == -1 and timeout is not None
        if timed_out:
            await self._end_marked(marker)
        return ExecResult(
            exit_code=code,
            stdout=out.decode("utf-8", errors="replace"),
            stderr=err.decode("utf-8", errors="replace"),
            timed_out=timed_out,
            truncated=out_cut or err_cut,
            duration_sec=time.monotonic() - started,
        )

    async def _end_marked(self, marker: str) -> None:
        """Kill what a timed-out exec left running (Modal killed only its direct process)."""
        res = await self.exec(["sh", "-c", kill_marked_script(marker)], timeout=None, cwd="/")
        if not res.ok:
            raise SandboxFailed(f"modal sandbox: ending a timed-out exec failed: {res.stderr}")

    async def _check(self, command: str, what: str) -> ExecResult:
        res = await self.exec(["sh", "-c", command], timeout=600, cwd="/")
        if not res.ok:
            raise SandboxFailed(
                f"modal sandbox {what} failed ({res.exit_code}): {res.stderr.strip()[:500]}"
            )
        return res

    def spare(self, procs: list[str]) -> None:
        """The sandbox's own processes (pid:starttime), listed at creation: never killed."""
        self._spare = list(procs)

    async def kill_all(self) -> None:
        res = await self.exec(["sh", "-c", kill_all_script(self._spare)], timeout=120, cwd="/")
        if not res.ok:
            raise SandboxFailed(f"modal kill_all failed ({res.exit_code}): {res.stderr[:300]}")

    async def ended_by_contents(self) -> str | None:
        # Ended, not terminated by us and not at its timeout (124): its entrypoint
        # exited, and what runs inside can make it (kill it, fill the memory). A
        # terminate from outside crucible (an operator's) also reads 137: counted.
        if self._closed or time.monotonic() >= self._ends_at:
            return None
        try:
            code = await self._sdk.aio(self._sb, "Sandbox.poll")
        except Exception:
            return None
        if code is None or code == 124:
            return None
        return f"its entrypoint ended with exit code {code}"

    async def close(self) -> None:
        if self._close_task is None:
            self._closed = True
            self._close_task = asyncio.ensure_future(self._client.terminate(self._sb))
        # Shielded: a cancelled trial still waits for (and never abandons) the terminate.
        await asyncio.shield(self._close_task)
