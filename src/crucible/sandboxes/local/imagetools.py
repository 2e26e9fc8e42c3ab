"""The OCI tools the `local` provider obtains task images with: Buildah, else a Docker engine.

crucible never interprets a Dockerfile: a tool builds it (or finds a prebuilt
image on this machine, or pulls it), reports the image's content id and its config, and
hands over the image's root filesystem with whiteouts already applied (Buildah:
a copy of its merged mount; Docker: a flattened `export` of a container that is
never started, unpacked by safetar.py). Each backend is one small class; which
one runs is chosen by `find_tools` in the order daemonless first.

Blocking tool calls run as subprocesses (Buildah) or on a thread (docker-py);
every build streams its whole log into a file the caller names.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import functools
import json
import os
import shutil
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from crucible.errors import SandboxFailed
from crucible.sandboxes.local.buildlog import build_failed
from crucible.sandboxes.local.buildlog import log_tail as log_tail  # images.py reads it here
from crucible.sandboxes.proc import dies_with_parent

TOOL_NAMES = ("buildah", "docker")
INSTALL_HINT = (
    "install an OCI tool: `apt-get install -y buildah` (daemonless; then import a base image, "
    "see scripts/setup-images.sh) or run a Docker engine; or run the task with `--env docker`"
)


class ImageConfig(BaseModel):
    """What of an image's config the sandbox honours (OCI names, lower-cased)."""

    env: list[str] = Field(default_factory=list)  # "KEY=VALUE"
    workdir: str = ""
    user: str = ""
    entrypoint: list[str] = Field(default_factory=list)
    cmd: list[str] = Field(default_factory=list)

    @classmethod
    def from_oci(cls, cfg: dict[str, Any] | None) -> ImageConfig:
        cfg = cfg or {}
        return cls(
            env=[str(e) for e in cfg.get("Env") or []],
            workdir=str(cfg.get("WorkingDir") or ""),
            user=str(cfg.get("User") or ""),
            entrypoint=[str(e) for e in cfg.get("Entrypoint") or []],
            cmd=[str(e) for e in cfg.get("Cmd") or []],
        )


class ImageTool(abc.ABC):
    """One way to obtain images. Image ids are the tool's content digests (hex)."""

    name = ""

    @abc.abstractmethod
    async def build(
        self, context: Path, tag: str, log: Path, timeout: float, network: bool = False
    ) -> str:
        """Build context/Dockerfile; return the image id. TaskInvalid when the build fails.
        Its steps reach a network only when `network` (the task allows it)."""

    @abc.abstractmethod
    async def find(self, ref: str) -> str | None:
        """The id of an image already on this machine, or None (nothing is pulled)."""

    @abc.abstractmethod
    async def pull(self, ref: str, timeout: float) -> str | None:
        """Pull `ref` from its registry; None when it worked, else why not."""

    @abc.abstractmethod
    async def config(self, image_id: str) -> ImageConfig: ...

    @abc.abstractmethod
    async def export(self, image_id: str, dest: Path) -> None:
        """Fill the empty directory `dest` with the image's root filesystem."""


async def _run(*argv: str, log: Path | None = None, timeout: float = 120.0) -> tuple[int, str]:
    """Run a tool; its output goes to `log` (appended) or is returned."""
    out: Any = asyncio.subprocess.PIPE
    fh = None
    if log is not None:
        fh = log.open("ab")
        out = fh
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=dies_with_parent(),  # a forced exit leaves no tool running
        )
    except OSError as exc:
        if fh is not None:
            fh.close()
        raise SandboxFailed(f"could not run {argv[0]}: {exc}") from exc
    try:
        data, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except (TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        await proc.wait()
        raise
    finally:
        if fh is not None:
            fh.close()
    return proc.returncode or 0, (data or b"").decode(errors="replace")


class Buildah(ImageTool):
    """Daemonless: `buildah build`, each RUN step in an OCI container whose root is an
    unprivileged host uid range, the whole build in a network namespace of its own
    (buildiso.py: never the host's root, pid or network namespace)."""

    name = "buildah"

    def __init__(self, path: str) -> None:
        self.path = path

    async def build(
        self, context: Path, tag: str, log: Path, timeout: float, network: bool = False
    ) -> str:
        from crucible.sandboxes.local import buildahbuild, buildiso, builduser

        dockerfile = context / "Dockerfile"
        buildiso.refuse_host_mounts(dockerfile)
        if not buildiso.rootful():  # this user's own rootless Buildah and storage
            return await buildahbuild.build(
                self.path, context, tag, log, timeout, network, None, None
            )
        user = builduser.require_user()
        stage = await asyncio.to_thread(builduser.Stage, user)
        try:
            ctx = await asyncio.to_thread(stage.context, context)
            await builduser.hand_bases(stage, self.path, dockerfile.read_text(errors="replace"))
            image_id = await buildahbuild.build(
                self.path, ctx, tag, log, timeout, network, user, stage
            )
            await builduser.hand_back(stage, self.path, image_id, tag)
            return image_id
        finally:
            await asyncio.to_thread(stage.close)

    async def _inspect(self, ref: str) -> dict[str, Any] | None:
        rc, out = await _run(self.path, "inspect", "--type", "image", ref)
        if rc != 0:
            return None
        try:
            data: dict[str, Any] = json.loads(out)
        except ValueError as exc:
            raise SandboxFailed(f"buildah inspect {ref}: unreadable output: {exc}") from exc
        return data

    async def pull(self, ref: str, timeout: float) -> str | None:
        try:
            rc, out = await _run(self.path, "pull", "--quiet", ref, timeout=timeout)
        except TimeoutError:
            return f"buildah pull took more than {timeout:g}s"
        return None if rc == 0 else out.strip()[-500:]

    async def find(self, ref: str) -> str | None:
        data = await self._inspect(ref)
        return None if data is None else str(data.get("FromImageID") or "") or None

    async def config(self, image_id: str) -> ImageConfig:
        data = await self._inspect(image_id)
        if data is None:
            raise SandboxFailed(f"buildah lost image {image_id[:12]}")
        return ImageConfig.from_oci((data.get("OCIv1") or {}).get("config"))

    async def export(self, image_id: str, dest: Path) -> None:
        rc, out = await _run(self.path, "from", "--pull-never", "--quiet", image_id)
        if rc != 0:
            raise SandboxFailed(f"buildah from {image_id[:12]} failed: {out.strip()[-500:]}")
        ctr = out.strip().splitlines()[-1]
        try:
            rc, out = await _run(self.path, "mount", ctr)
            if rc != 0:
                raise SandboxFailed(f"buildah mount failed: {out.strip()[-500:]}")
            merged = out.strip().splitlines()[-1]
            # cp -a never follows the tree's links and keeps owners, modes and xattrs.
            rc, out = await _run(
                "cp", "-a", "--reflink=auto", f"{merged}/.", str(dest), timeout=1800
            )
            if rc != 0:
                raise SandboxFailed(f"copying the image's rootfs failed: {out.strip()[-500:]}")
        finally:
            await _run(self.path, "umount", ctr)
            await _run(self.path, "rm", ctr)


class Docker(ImageTool):
    """A Docker engine through docker-py (the one the docker provider uses)."""

    name = "docker"

    def __init__(self, api: Any) -> None:
        self.api = api

    async def build(
        self, context: Path, tag: str, log: Path, timeout: float, network: bool = False
    ) -> str:
        from crucible.sandboxes.docker.build import _BuildControl

        ctl = _BuildControl()
        job = asyncio.ensure_future(asyncio.to_thread(self._build, context, tag, log, ctl, network))
        try:
            error = await asyncio.wait_for(asyncio.shield(job), timeout)
        except (TimeoutError, asyncio.CancelledError) as exc:
            ctl.abort()  # cutting the stream makes the engine cancel the build
            await asyncio.gather(job, return_exceptions=True)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise build_failed(
                f"the build took more than {timeout:g}s (build_timeout_sec)", log
            ) from None
        if error is not None:
            raise build_failed(error, log)
        found = await self.find(tag)
        if found is None:
            raise SandboxFailed(f"the engine built {tag} but does not list it")
        return found

    def _build(self, context: Path, tag: str, log: Path, ctl: Any, network: bool) -> str | None:
        import docker.errors

        error: str | None = None
        with log.open("a", errors="replace") as fh:
            try:
                # Each step runs in one of the engine's containers; without network, in
                # one with no network at all.
                stream = self.api.build(
                    path=str(context), tag=tag, pull=False, rm=True, forcerm=True, decode=True,
                    network_mode=None if network else "none",
                )  # fmt: skip
                ctl.attach(stream)
                for chunk in stream:
                    if "stream" in chunk:
                        fh.write(str(chunk["stream"]))
                    if "error" in chunk:
                        error = str(chunk.get("error") or chunk.get("errorDetail")).strip()
                        fh.write(f"ERROR: {error}\n")
            except docker.errors.APIError as exc:
                error = str(exc)  # the engine refused the context or Dockerfile
                fh.write(f"ERROR: {error}\n")
            except (docker.errors.DockerException, OSError) as exc:
                if ctl.aborted:
                    return "aborted"
                raise SandboxFailed(f"the engine failed while building {tag}: {exc}") from exc
        return error

    async def find(self, ref: str) -> str | None:
        import docker.errors

        try:
            info = await asyncio.to_thread(self.api.inspect_image, ref)
        except docker.errors.NotFound:
            return None
        except docker.errors.DockerException as exc:
            raise SandboxFailed(f"the engine failed to inspect {ref}: {exc}") from exc
        return str(info["Id"]).removeprefix("sha256:")

    async def pull(self, ref: str, timeout: float) -> str | None:
        import docker.errors
        from docker.utils import parse_repository_tag

        repo, tag = parse_repository_tag(ref)
        try:
            await asyncio.wait_for(asyncio.to_thread(self.api.pull, repo, tag or "latest"), timeout)
        except TimeoutError:
            return f"docker pull took more than {timeout:g}s"
        except docker.errors.DockerException as exc:
            return str(exc)[-500:]
        return None

    async def config(self, image_id: str) -> ImageConfig:
        info = await asyncio.to_thread(self.api.inspect_image, f"sha256:{image_id}")
        return ImageConfig.from_oci(info.get("Config"))

    async def export(self, image_id: str, dest: Path) -> None:
        from crucible.sandboxes.local.safetar import extract_stream

        def work() -> None:
            # Created, never started: its filesystem is the image's, flattened.
            cid = self.api.create_container(f"sha256:{image_id}", command=["/nonexistent"])["Id"]
            try:
                extract_stream(self.api.export(cid), dest)
            finally:
                self.api.remove_container(cid, force=True)

        try:
            await asyncio.to_thread(work)
        except OSError as exc:
            raise SandboxFailed(f"unpacking image {image_id[:12]} failed: {exc}") from exc


@functools.cache
def _docker_api() -> Any | None:
    try:
        import docker

        api = docker.APIClient(version="auto", timeout=30)
        api.ping()
        return api
    except Exception:
        return None


def find_tools(prefer: str = "auto") -> list[ImageTool]:
    """The usable tools, in order: Buildah (daemonless), then a Docker engine that answers."""
    tools: list[ImageTool] = []
    for name in TOOL_NAMES if prefer == "auto" else (prefer,):
        if name == "buildah":
            path = shutil.which("buildah")
            if path:
                tools.append(Buildah(path))
        elif name == "docker":
            api = _docker_api()
            if api is not None:
                tools.append(Docker(api))
    return tools


def find_tool(prefer: str = "auto") -> ImageTool | None:
    """The tool that builds: the first usable one."""
    tools = find_tools(prefer)
    return tools[0] if tools else None
