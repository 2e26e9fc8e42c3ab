"""One Docker container as a Sandbox: commands as execs, files as tar streams.

Made by `DockerProvider.create` (crucible.sandboxes.docker.provider), whose thread pool
and client it uses (through an `EngineClient`). A container that vanished or stopped turns any call into
`SandboxFailed`; a command that fails is an `ExecResult`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from typing import Any

from crucible.errors import ProviderUnavailable, SandboxFailed
from crucible.sandboxes.base import DEFAULT_OUTPUT_CAP, ExecResult, Sandbox, SandboxSpec
from crucible.sandboxes.docker.client import Companions, EngineClient, remove_container
from crucible.sandboxes.docker.exec import KILL_SCRIPT, MARKER_VAR, OOM_COUNT_CMD, ExecStream
from crucible.sandboxes.docker.grading import DockerGrading, ended
from crucible.sandboxes.docker.hostblock import HostForwards
from crucible.sandboxes.proc import decode

log = logging.getLogger(__name__)

HINT_SDK = "pip install 'crucible[docker]'"

# How long an exec's stream may stay open after its processes were killed (an
# escaped process can hold it) before we cut it.
DRAIN_AFTER_KILL_SEC = 5.0


def sdk() -> Any:
    try:
        import docker
    except ImportError as e:
        raise ProviderUnavailable(
            "the docker provider needs the docker Python SDK, which is not installed",
            hint=HINT_SDK,
        ) from e
    return docker


def short(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text if len(text) < 600 else text[:600] + "..."


class DockerSandbox(HostForwards, DockerGrading, Sandbox):
    """One running container."""

    companions: Companions | None = None  # set for a compose task's main

    def __init__(
        self,
        engine: EngineClient,
        spec: SandboxSpec,
        cid: str,
        name: str,
        default_user: str = "",
        kit: str | None = None,
    ) -> None:
        self.spec = spec
        self.kit = kit  # where the grading kit is bound (exec.KIT_MOUNT), or None
        self.id = cid
        self.name = name
        self._engine = engine
        self._closed = False
        self._oom_seen = 0
        # The image's USER: commands run as it unless told otherwise. The
        # container itself runs as root, so that our own sweeps keep the
        # capabilities to kill whatever the agent started.
        self.default_user = default_user

    # -- helpers ----------------------------------------------------------------

    @property
    def _api(self) -> Any:
        return self._engine.api()

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self._closed or self._api is None:
            raise SandboxFailed(f"sandbox {self.name} is closed")
        return await self._engine.call(fn, *args, **kwargs)

    async def _state(self) -> dict[str, Any] | None:
        """The container's State as the engine reports it; None when it cannot say."""
        try:
            return dict((await self._engine.call(self._api.inspect_container, self.id))["State"])
        except Exception:
            return None

    async def _lost(self, err: BaseException) -> SandboxFailed:
        """A SandboxFailed that says what became of the container."""
        state = await self._state()
        what = "container gone" if state is None else ended(state)
        return SandboxFailed(f"sandbox {self.name} failed ({what}): {short(err)}")

    # -- exec -------------------------------------------------------------------

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
        docker = sdk()
        argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
        data = input.encode() if isinstance(input, str) else input
        marker = uuid.uuid4().hex
        started = time.monotonic()
        try:
            exec_id = (
                await self._call(
                    self._api.exec_create,
                    self.id,
                    argv,
                    stdin=data is not None,
                    environment={**(env or {}), MARKER_VAR: marker},
                    workdir=cwd or self.spec.workdir,
                    user=user or self.default_user,
                )
            )["Id"]
            stream: ExecStream = await self._call(ExecStream, self._api, exec_id)
        except docker.errors.APIError as e:
            if await self._running():
                # The engine refused this command (no such cwd or user, say): the command's failure.
                return ExecResult(
                    exit_code=126, stderr=short(e), duration_sec=time.monotonic() - started
                )
            raise await self._lost(e) from e
        except (docker.errors.DockerException, OSError) as e:
            raise await self._lost(e) from e

        loop = asyncio.get_running_loop()
        pump = loop.run_in_executor(self._engine.pool, stream.pump, max(output_cap, 0))
        feeder = (
            loop.run_in_executor(self._engine.pool, stream.feed, data) if data is not None else None
        )
        timed_out = False
        try:
            try:
                out, err, truncated = await asyncio.wait_for(asyncio.shield(pump), timeout)
            except TimeoutError:
                timed_out = True
                await self._kill("exec", marker)
                try:
                    out, err, truncated = await asyncio.wait_for(
                        asyncio.shield(pump), DRAIN_AFTER_KILL_SEC
                    )
                except TimeoutError:
                    stream.abort()
                    out, err, truncated = await pump
        except asyncio.CancelledError:
            # The trial was cancelled: do not leave the command running.
            stream.abort()
            await asyncio.shield(self._kill_quietly(marker))
            raise
        finally:
            if feeder is not None:
                if not feeder.done():
                    stream.abort()  # the command ended without reading all its input
                await asyncio.gather(feeder, return_exceptions=True)
            stream.close()

        exit_code = await self._exit_code(exec_id, timed_out)
        if (exit_code < 0 or exit_code >= 128) and not await self._running():
            # Killed with its container (an engine restart, a removal, pid 1 dying).
            raise await self._lost(RuntimeError(f"a command ended with {exit_code}"))
        stderr = decode(err)
        if exit_code == 137 and not timed_out:
            note = await self._oom_note()
            if note:
                sep = "" if not stderr or stderr.endswith("\n") else "\n"
                stderr = f"{stderr}{sep}{note}"
        return ExecResult(
            exit_code=exit_code,
            stdout=decode(out),
            stderr=stderr,
            timed_out=timed_out,
            truncated=truncated,
            duration_sec=time.monotonic() - started,
        )

    async def _running(self) -> bool:
        state = await self._state()
        return bool(state and state.get("Running"))

    async def _exit_code(self, exec_id: str, timed_out: bool) -> int:
        docker = sdk()
        # The stream can end a moment before the engine records the exit.
        for _ in range(50):
            try:
                info = await self._call(self._api.exec_inspect, exec_id)
            except (docker.errors.DockerException, OSError) as e:
                raise await self._lost(e) from e
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            await asyncio.sleep(0.02)
        if timed_out:
            return 137
        if not await self._running():
            raise await self._lost(RuntimeError("the container stopped during a command"))
        return -1

    async def _oom_note(self) -> str | None:
        """Say so when the memory cgroup's OOM killer fired since we last looked."""
        try:
            res = await self._run_quiet(OOM_COUNT_CMD)
        except SandboxFailed:
            return None
        m = re.search(r"^oom_kill (\d+)", res[0], re.MULTILINE)
        if not m:
            return None
        count = int(m.group(1))
        fired = count > self._oom_seen
        self._oom_seen = count
        if not fired:
            return None
        return (
            f"crucible: out of memory: the sandbox's memory limit ({self.spec.memory_mb} MB) "
            "was reached and the kernel killed the process"
        )

    async def _run_quiet(self, argv: list[str], timeout: float = 30.0) -> tuple[str, int]:
        """A short root exec of ours (no marker, no stdin); (stdout+stderr, exit code)."""
        docker = sdk()
        try:
            exec_id = (await self._call(self._api.exec_create, self.id, argv, user="0"))["Id"]
            out = await asyncio.wait_for(self._call(self._api.exec_start, exec_id), timeout)
            info = await self._call(self._api.exec_inspect, exec_id)
        except (docker.errors.DockerException, OSError, TimeoutError) as e:
            raise await self._lost(e) from e
        return decode(out or b""), int(info.get("ExitCode") or 0)

    async def _kill(self, mode: str, marker: str = "") -> None:
        argv = [*self._sweep_sh(), "crucible-kill", mode, marker]
        try:
            _, code = await self._run_quiet(argv)
            if code == 0:
                return
        except SandboxFailed:
            if not await self._running():
                raise
        # Most likely the pids limit is exhausted (a fork bomb) and the sweep
        # cannot start or fork: lend it a few pids, then restore the limit.
        log.debug("kill sweep in %s failed; retrying with a raised pids limit", self.name)
        await self._set_pids_limit(self.spec.pids_limit + 64)
        try:
            await self._run_quiet(argv)
        finally:
            await self._set_pids_limit(self.spec.pids_limit)

    def _sweep_sh(self) -> list[str]:
        """The kill sweep's shell: the kit's static bash (BASH_ENV unset; grep is busybox's),
        else the image's sh. Under busybox's sh the sweep after a fork bomb killed the next
        exec in 1 run of 2 (`fork_bomb` conformance check, exit 137)."""
        if not self.kit:
            return ["sh", "-c", KILL_SCRIPT]
        kit = self.kit
        script = f'grep() {{ "{kit}/busybox" grep "$@"; }}\n{KILL_SCRIPT}'
        return [f"{kit}/busybox", "env", "-u", "BASH_ENV", f"{kit}/bash", "-c", script]

    async def _kill_quietly(self, marker: str) -> None:
        try:
            await self._kill("exec", marker)
        except Exception as e:  # the sandbox may already be gone
            log.debug("kill after cancel failed: %s", e)

    async def _set_pids_limit(self, n: int) -> None:
        api = self._api
        try:
            res = await self._call(
                api._post_json, api._url("/containers/{0}/update", self.id), data={"PidsLimit": n}
            )
            await self._engine.call(api._raise_for_status, res)
        except Exception as e:
            log.debug("pids limit update failed: %s", e)

    async def kill_all(self) -> None:
        await self._kill("all")

    # -- engine file calls (the files themselves: docker/archive.py) ------------

    async def _put(self, where: str, data: Any, what: str) -> None:
        docker = sdk()
        try:
            ok = await self._call(self._api.put_archive, self.id, where, data)
        except docker.errors.NotFound as e:
            raise await self._lost(e) from e
        except docker.errors.APIError as e:
            if await self._running():
                raise OSError(f"cannot write {what} in the sandbox: {short(e)}") from e
            raise await self._lost(e) from e
        except (docker.errors.DockerException, OSError) as e:
            raise await self._lost(e) from e
        if not ok:
            raise OSError(f"cannot write {what} in the sandbox")

    async def _get(self, path: str, shown: str | None = None, with_stat: bool = False) -> Any:
        docker = sdk()
        try:
            chunks, st = await self._call(self._api.get_archive, self.id, path)
        except docker.errors.NotFound as e:
            if await self._running():
                raise FileNotFoundError(shown or path) from e
            raise await self._lost(e) from e
        except docker.errors.APIError as e:
            if await self._running():
                raise OSError(f"cannot read {path} in the sandbox: {short(e)}") from e
            raise await self._lost(e) from e
        except (docker.errors.DockerException, OSError) as e:
            raise await self._lost(e) from e
        return (chunks, st) if with_stat else chunks

    # -- lifecycle --------------------------------------------------------------

    def service(self, name: str) -> Sandbox | None:
        return self.companions.service(name) if self.companions is not None else None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.close_forwards()
        api, docker = self._api, sdk()
        try:
            if api is not None:  # a removal already under way is waited for
                await remove_container(self._engine.call, api, self.id)
        except (docker.errors.DockerException, OSError) as e:
            # `cleanup --job` catches what is left; closing never raises.
            log.warning("could not remove container %s: %s", self.name, short(e))
        finally:
            if self.companions is not None:
                await self.companions.down()
