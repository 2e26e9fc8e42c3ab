"""Images for the docker provider: prebuilt ones checked (pulled if absent), task ones built once.

A compose sidecar's build is keyed the same way, by its context's digest and its
Dockerfile, args and target. A task's environment/ is built as `crucible-env:<digest[:16]>`, keyed by the
content digest of environment/, so a rebuilt-but-unchanged task reuses its
image across jobs. Within one provider (one job) each image is resolved by a
single shared task, however many trials ask at once. A build that fails is a
property of the task (`TaskInvalid`) and is remembered, so later trials of
that task fail fast; an engine that fails (`SandboxFailed`) is not remembered,
so a retry tries again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hashlib
import json
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from crucible.errors import SandboxFailed, TaskInvalid
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.buildgate import BuildGate, own_gate
from crucible.tasks.compose_fields import Build
from crucible.tasks.taskfs import refuse_context

log = logging.getLogger(__name__)

T = TypeVar("T")
Runner = Callable[..., Awaitable[Any]]

ENV_REPO = "crucible-env"
LOG_TAIL_LINES = 40


def env_tag(digest: str) -> str:
    return f"{ENV_REPO}:{digest.removeprefix('sha256:')[:16]}"


def spec_image_key(spec: SandboxSpec) -> tuple[str, str] | None:
    """("image", ref) or ("build", digest) for a spec; None when it names neither."""
    if spec.image:
        return ("image", spec.image)
    if spec.dockerfile_dir is not None:
        digest = spec.environment_digest
        if not digest:
            from crucible.tasks.loader import tree_digest

            digest = tree_digest(spec.dockerfile_dir)
        return ("build", digest)
    return None


class ImageCache:
    """Resolves specs to local image refs, building or pulling each one at most once."""

    def __init__(self, api: Any, run: Runner, gate: Callable[[], BuildGate] | None = None) -> None:
        self._api = api
        self._run = run  # runs a blocking call on the provider's thread pool
        self._gate = gate or own_gate()  # the job's limit on builds at once (buildgate.py)
        self.log_dir: Path | None = None  # the job folder: build logs go to its builds/
        self._tasks: dict[tuple[str, str], asyncio.Task[str]] = {}
        self._users: dict[str, str] = {}
        self.builds_run = 0  # builds actually started (tests check the once-per-digest rule)

    async def resolve(self, spec: SandboxSpec) -> str:
        key = spec_image_key(spec)
        if key is None:
            raise TaskInvalid(
                f"task {spec.task_name!r} names no image: neither [environment].docker_image "
                "nor environment/Dockerfile"
            )
        if key[0] == "image":
            return await self.image(key[1])
        assert spec.dockerfile_dir is not None
        context, timeout = spec.dockerfile_dir, spec.build_timeout_sec
        net = spec.builds_with_network
        return await self._once(key, lambda: self._ensure_built(key[1], context, timeout, net))

    async def image(self, ref: str) -> str:
        """A prebuilt image, pulled once if the engine lacks it."""
        return await self._once(("image", ref), lambda: self._ensure_pulled(ref))

    async def built(self, build: Build, timeout: float, network: bool = False) -> str:
        """A compose service's image, built once per content (context, Dockerfile, args);
        its steps reach a network only when the task allows it."""
        from crucible.tasks.loader import tree_digest

        recipe = json.dumps([build.dockerfile, sorted(build.args.items()), build.target])
        digest = hashlib.sha256(f"{tree_digest(build.context)}\0{recipe}".encode()).hexdigest()
        return await self._once(
            ("build", digest),
            lambda: self._ensure_built(digest, build.context, timeout, network, build),
        )

    async def _once(self, key: tuple[str, str], make: Callable[[], Awaitable[str]]) -> str:
        task = self._tasks.get(key)
        if task is None:
            task = asyncio.ensure_future(make())
            self._tasks[key] = task
            task.add_done_callback(functools.partial(self._forget_transient, key))
        # Shielded: one trial giving up must not cancel the build others wait on.
        return await asyncio.shield(task)

    def _forget_transient(self, key: tuple[str, str], task: asyncio.Task[str]) -> None:
        failed = task.cancelled() or task.exception() is not None
        if failed and (task.cancelled() or not isinstance(task.exception(), TaskInvalid)):
            self._tasks.pop(key, None)

    async def user_of(self, ref: str) -> str:
        """The image's USER ("" for root), looked up once per image."""
        if ref not in self._users:
            info = await self._run(self._api.inspect_image, ref)
            self._users[ref] = str((info.get("Config") or {}).get("User") or "")
        return self._users[ref]

    async def _exists(self, ref: str) -> bool:
        import docker.errors

        try:
            await self._run(self._api.inspect_image, ref)
            return True
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.NotFound:
            return False

    async def _ensure_pulled(self, ref: str) -> str:
        import docker.errors
        from docker.utils import parse_repository_tag

        if await self._exists(ref):
            return ref
        repo, tag = parse_repository_tag(ref)
        try:
            await self._run(self._api.pull, repo, tag or "latest")
        except docker.errors.NotFound as e:
            raise TaskInvalid(
                f"image {ref!r} is not on this engine and its registry does not have it: {e}"
            ) from e
        except docker.errors.DockerException as e:
            raise SandboxFailed(
                f"image {ref!r} is not on this engine and pulling it failed: {e}",
                hint="pull or load the image on the engine (docker pull / docker load)",
            ) from e
        if not await self._exists(ref):
            raise SandboxFailed(f"image {ref!r} is still absent after a pull")
        return ref

    async def _ensure_built(
        self,
        digest: str,
        context: Path,
        timeout: float,
        network: bool,
        recipe: Build | None = None,
    ) -> str:
        tag = env_tag(digest)
        if await self._exists(tag):
            return tag
        dockerfile = recipe.dockerfile if recipe else "Dockerfile"
        if not (context / dockerfile).is_file():
            raise TaskInvalid(f"its image cannot be built: {context}/{dockerfile} is missing")
        refuse_context(context)  # no link out of the context reaches the engine
        self.builds_run += 1
        path = self._log_path(tag)

        async def run() -> None:
            ctl = _BuildControl()
            started = time.monotonic()
            log.info("building %s from %s (log: %s)", tag, context, path)
            build = asyncio.ensure_future(
                self._run(self._build, context, tag, digest, timeout, ctl, network, recipe, path)
            )
            try:
                await asyncio.wait_for(asyncio.shield(build), timeout)
            except (TimeoutError, asyncio.CancelledError) as e:
                # Cutting the connection is what makes the engine cancel a build (and
                # kill and remove its step's container).
                ctl.abort()
                await asyncio.gather(build, return_exceptions=True)
                if isinstance(e, asyncio.CancelledError):
                    raise
                raise TaskInvalid(
                    f"its image cannot be built: the build of {context} took more than "
                    f"{timeout:g}s (build_timeout_sec)"
                ) from e
            log.info("built %s in %.1fs", tag, time.monotonic() - started)

        await self._gate().run(str(context), run, path)
        return tag

    def _log_path(self, tag: str) -> Path | None:
        if self.log_dir is None:
            return None
        base = self.log_dir / "builds"
        base.mkdir(parents=True, exist_ok=True)
        path = base / f"{tag.replace(':', '-')}.log"
        path.write_text(f"# docker build as {tag}\n")
        return path

    def _build(
        self,
        context: Path,
        tag: str,
        digest: str,
        timeout: float,
        ctl: _BuildControl,
        network: bool,
        recipe: Build | None = None,
        path: Path | None = None,
    ) -> None:
        """Blocking: stream the build (into `path`, when given), keep the log's tail, raise
        TaskInvalid on failure."""
        with path.open("a", errors="replace") if path else contextlib.nullcontext() as fh:
            self._stream(context, tag, digest, timeout, ctl, network, recipe, fh)

    def _stream(
        self,
        context: Path,
        tag: str,
        digest: str,
        timeout: float,
        ctl: _BuildControl,
        network: bool,
        recipe: Build | None,
        fh: Any,
    ) -> None:
        import docker.errors

        tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        error: str | None = None
        try:
            stream = self._api.build(
                path=str(context),
                tag=tag,
                dockerfile=recipe.dockerfile if recipe else None,
                buildargs=dict(recipe.args) if recipe else None,
                target=recipe.target if recipe else None,
                pull=False,  # base images come from the local engine only
                rm=True,
                forcerm=True,
                decode=True,
                timeout=timeout + 60.0,  # per read; the total is bounded by the caller
                labels={"crucible.environment_digest": digest},
                # The engine's builder runs each step in a container of its own (pid, mount
                # and network namespaces, pivot_root); without network, one with none.
                network_mode=None if network else "none",
                use_config_proxy=False,  # nothing of the host's docker config goes in
            )
            ctl.attach(stream)
            for chunk in stream:
                if "stream" in chunk:
                    tail.extend(line for line in str(chunk["stream"]).splitlines() if line.strip())
                    if fh is not None:
                        fh.write(str(chunk["stream"]))
                if "error" in chunk:
                    error = str(chunk.get("error") or chunk.get("errorDetail"))
                    if fh is not None:
                        fh.write(f"ERROR: {error}\n")
        except docker.errors.APIError as e:
            # Refused requests (no or bad Dockerfile, bad context) are the task's fault.
            error = str(e)
        except (docker.errors.DockerException, OSError) as e:
            if ctl.aborted:
                return
            raise SandboxFailed(f"the engine failed while building {tag}: {e}") from e
        if ctl.aborted:
            return
        if error is None:
            return
        log_tail = "\n".join(tail)
        raise TaskInvalid(
            f"its image cannot be built: {error.strip()}\n--- build log (last lines) ---\n{log_tail}"
        )


class _BuildControl:
    """Lets the event loop cut a build's HTTP stream that a worker thread is blocked on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._response: Any = None
        self.aborted = False

    def attach(self, stream: Any) -> None:
        # docker-py's build() returns a generator over the response; the
        # response is its argument, so it is in the (not yet started) frame.
        frame = getattr(stream, "gi_frame", None)
        response = frame.f_locals.get("response") if frame is not None else None
        with self._lock:
            self._response = response
            if self.aborted:
                _cut(response)

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            _cut(self._response)


def _cut(response: Any) -> None:
    if response is None:
        return
    sock = getattr(
        getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None), "raw", None
    )
    sock = getattr(sock, "_sock", sock)
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        response.close()
    except Exception:
        pass
