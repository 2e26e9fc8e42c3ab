"""Task images for the `local` provider: built or found once, unpacked once, shared by all trials.

A content-addressed rootfs cache (default_cache_dir(), shared by every job)
holds one directory per image id:

    <cache>/<image id>/rootfs/      the image's root filesystem (a sandbox's read-only lower layer)
    <cache>/<image id>/image.json   RootfsEntry: where it came from and its config (ENV, WORKDIR,
                                    USER, ENTRYPOINT, CMD); written last, so it marks a complete entry
    <cache>/by-env/<digest>         the image id a task environment's digest was built into
    <cache>/.locks/                 one flock per key: one build or unpack at a time across processes

Within one provider (one job) each image is resolved by a single shared task,
however many trials ask at once (as the docker provider's ImageCache does); a
failed build is the task's (`TaskInvalid`, remembered for the job), a tool or
engine failure is not. Every provider holds a shared lock on the entries it
uses, so `gc()` (run by `crucible sandboxes cleanup`) removes only entries no
job is using. The tools themselves live in imagetools.py."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import hashlib
import logging
import os
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from crucible.errors import ResourcesUnavailable, SandboxFailed, TaskInvalid
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.buildgate import own_gate
from crucible.sandboxes.docker.build import env_tag, spec_image_key
from crucible.sandboxes.local.imagetools import (
    INSTALL_HINT,
    ImageConfig,
    ImageTool,
    find_tool,
    find_tools,
)
from crucible.tasks.taskfs import refuse_context

log = logging.getLogger(__name__)

ENTRY_FILE = "image.json"
PROGRESS_EVERY_SEC = 15.0


class RootfsEntry(BaseModel):
    schema_version: int = 1
    image_id: str
    tool: str
    source: str  # "build <env digest>" or "image <ref>"
    config: ImageConfig
    created_at: str


@dataclass(frozen=True)
class Rootfs:
    path: Path  # the tree to use as /
    entry: RootfsEntry


def default_cache_dir() -> Path:
    """Shared by every job of this user: CRUCIBLE_ROOTFS_DIR, else /var/cache/crucible/rootfs
    for root (world-traversable, unlike /root), else ~/.cache/crucible/rootfs."""
    env = os.environ.get("CRUCIBLE_ROOTFS_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/crucible/rootfs")
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "crucible" / "rootfs"


def _hexid(value: str) -> str:
    return value.removeprefix("sha256:")


def _flock(path: Path, how: int, *, create: bool = False) -> int:
    """Lock a directory (an entry) or a lock file (made when `create`)."""
    flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_CREAT if create else os.O_DIRECTORY)
    fd = os.open(path, flags, 0o600)
    try:
        fcntl.flock(fd, how)
    except BaseException:
        os.close(fd)
        raise
    return fd


class RootfsCache:
    """The directory layout above; blocking helpers, run on threads by ImageStore.

    `owner`: the host uid a sandbox's one mapped uid stands for; every file of an unpacked
    tree is given to it (a file of any other owner would be nobody's inside), and the
    entry is named `<image id>-u<owner>`. None keeps the image's owners.
    """

    def __init__(self, root: Path, owner: int | None = None) -> None:
        self.root = root
        self.owner = owner

    def entry_dir(self, image_id: str) -> Path:
        suffix = "" if self.owner is None else f"-u{self.owner}"
        return self.root / f"{_hexid(image_id)}{suffix}"

    def chown_tree(self, tree: Path) -> None:
        """Blocking: give every entry of a freshly unpacked tree to `owner` (links not followed)."""
        if self.owner is None:
            return
        uid = gid = self.owner
        os.lchown(tree, uid, gid)
        for dirpath, dirnames, filenames in os.walk(tree):
            for name in dirnames + filenames:
                os.lchown(os.path.join(dirpath, name), uid, gid)

    def get(self, image_id: str) -> Rootfs | None:
        d = self.entry_dir(image_id)
        try:
            entry = RootfsEntry.model_validate_json((d / ENTRY_FILE).read_text())
        except (OSError, ValueError):
            return None
        return Rootfs(d / "rootfs", entry)

    def env_image(self, digest: str) -> str | None:
        with contextlib.suppress(OSError):
            return (self.root / "by-env" / _hexid(digest)).read_text().strip() or None
        return None

    def set_env_image(self, digest: str, image_id: str) -> None:
        d = self.root / "by-env"
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{_hexid(digest)}.{os.getpid()}"
        tmp.write_text(_hexid(image_id))
        tmp.replace(d / _hexid(digest))

    def lock(self, key: str) -> int:
        """Blocking: an exclusive lock for building or unpacking `key` (close the fd to release)."""
        d = self.root / ".locks"
        d.mkdir(parents=True, exist_ok=True)
        return _flock(
            d / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.lock", fcntl.LOCK_EX, create=True
        )

    def hold(self, image_id: str) -> int | None:
        """Blocking: a shared lock that keeps gc() off this entry; None if it vanished."""
        try:
            fd = _flock(self.entry_dir(image_id), fcntl.LOCK_SH)
        except FileNotFoundError:
            return None
        if self.get(image_id) is None:  # gc() removed it before we locked
            os.close(fd)
            return None
        return fd

    def gc(self) -> int:
        """Remove every entry no provider holds, and index files that point nowhere."""
        if not self.root.is_dir():
            return 0
        removed = 0
        for d in self.root.iterdir():
            if d.name.startswith(".") or d.name == "by-env" or not d.is_dir() or d.is_symlink():
                continue
            try:
                fd = _flock(d, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # in use by a running job
            except OSError:
                continue
            try:
                trash = self.root / f".trash-{d.name}-{os.getpid()}"
                d.rename(trash)
            finally:
                os.close(fd)
            shutil.rmtree(trash, ignore_errors=True)
            removed += 1
        index = self.root / "by-env"
        if index.is_dir():
            for f in index.iterdir():
                with contextlib.suppress(OSError):
                    if self.get(f.read_text().strip()) is None:
                        f.unlink()
        for d in self.root.glob(".trash-*"):  # left by an interrupted gc or unpack
            shutil.rmtree(d, ignore_errors=True)
        return removed


class ImageStore:
    """Resolves specs to unpacked rootfs trees for one provider, each key at most once."""

    def __init__(self, cache: RootfsCache, tool: str = "auto") -> None:
        self.cache = cache
        self.tool_pref = tool
        self.log_dir: Path | None = None  # the job folder, when the engine tells the provider
        self._tool: ImageTool | None = None
        self._tasks: dict[tuple[str, str], asyncio.Task[Rootfs]] = {}
        self._held: dict[str, int] = {}
        self.builds_run = 0  # builds actually started (tests check the once-per-digest rule)
        self.unpacks_run = 0
        # A few unpacks at a time; builds wait on the job's gate (buildgate.py), a provider's.
        self._busy = asyncio.Semaphore(max(1, (os.cpu_count() or 2) // 2))
        self.gate = own_gate()

    def tool(self) -> ImageTool:
        if self._tool is None:
            self._tool = find_tool(self.tool_pref)
        if self._tool is None:
            which = "an OCI tool" if self.tool_pref == "auto" else repr(self.tool_pref)
            raise ResourcesUnavailable(
                f"this task runs in its own image, and {which} to build or find it is not "
                "available on this machine (crucible never runs it on the host's userland instead)",
                hint=INSTALL_HINT,
            )
        return self._tool

    async def resolve(self, spec: SandboxSpec) -> Rootfs:
        key = spec_image_key(spec)
        if key is None:
            raise TaskInvalid(f"task {spec.task_name!r} names no image")
        task = self._tasks.get(key)
        if task is None:
            task = asyncio.ensure_future(self._resolve(key, spec))
            self._tasks[key] = task
            task.add_done_callback(functools.partial(self._forget_transient, key))
        # Shielded: one trial giving up must not cancel the build others wait on.
        return await asyncio.shield(task)

    def _forget_transient(self, key: tuple[str, str], task: asyncio.Task[Rootfs]) -> None:
        if task.cancelled() or not isinstance(task.exception(), TaskInvalid | None):
            self._tasks.pop(key, None)

    async def _resolve(self, key: tuple[str, str], spec: SandboxSpec) -> Rootfs:
        kind, value = key
        if kind == "build":  # warm: a digest built before needs no tool at all
            known = self.cache.env_image(value)
            found = await self._held_entry(known) if known else None
            if found is not None:
                return found
        lock = await asyncio.to_thread(self.cache.lock, f"{kind}:{value}")
        try:
            if kind == "build":
                known = self.cache.env_image(value)  # another process may have just built it
                found = await self._held_entry(known) if known else None
                if found is not None:
                    return found
                assert spec.dockerfile_dir is not None
                tool = self.tool()
                image_id = await self._build(tool, spec, value, spec.dockerfile_dir)
            else:
                tool, image_id = await self._find(value, spec.build_timeout_sec)
            rootfs = await self._unpack(tool, image_id, f"{kind} {value}")
            if kind == "build":
                await asyncio.to_thread(self.cache.set_env_image, value, image_id)
            return rootfs
        finally:
            os.close(lock)

    async def _held_entry(self, image_id: str) -> Rootfs | None:
        if image_id not in self._held:
            fd = await asyncio.to_thread(self.cache.hold, image_id)
            if fd is None:
                return None
            self._held[image_id] = fd
        return self.cache.get(image_id)

    async def _find(self, ref: str, timeout: float) -> tuple[ImageTool, str]:
        """The first tool that has `ref` on this machine (Buildah's storage, then Docker's),
        else the first tool after pulling it."""
        tools = find_tools(self.tool_pref) or [self.tool()]  # tool() raises: none at all
        for tool in tools:
            image_id = await tool.find(ref)
            if image_id is not None:
                return tool, image_id
        say = _progress()
        say(f"pulling {ref} with {tools[0].name}")
        why = await tools[0].pull(ref, timeout)
        image_id = None if why else await tools[0].find(ref)
        if image_id is not None:
            return tools[0], image_id
        names = " or ".join(t.name for t in tools)
        # The machine lacks it (no registry, no load): not the task's fault.
        raise ResourcesUnavailable(
            f"image {ref!r} is not on this machine ({names}) and pulling it failed: {why}",
            hint=f"pull or load it with {names}, or run the task with --env docker",
        )

    def _log_path(self, spec: SandboxSpec, digest: str) -> Path:
        base = self.log_dir / "builds" if self.log_dir else self.cache.root / ".logs"
        base.mkdir(parents=True, exist_ok=True)
        return base / f"{spec.task_name.replace('/', '_')}-{_hexid(digest)[:12]}.log"

    async def _build(self, tool: ImageTool, spec: SandboxSpec, digest: str, context: Path) -> str:
        if not (context / "Dockerfile").is_file():
            raise TaskInvalid(f"its image cannot be built: {context}/Dockerfile is missing")
        refuse_context(context)  # no link out of the context reaches the builder
        tag = env_tag(digest)
        existing = await tool.find(tag)
        if existing is not None:  # built before (e.g. by the docker provider on this engine)
            return existing
        self.builds_run += 1
        path = self._log_path(spec, digest)
        path.write_text(f"# {tool.name} build of {context} as {tag}\n")
        say = _progress()
        say(f"building the image of [bold]{spec.task_name}[/] with {tool.name} (log: {path})")
        started = time.monotonic()
        ticker = asyncio.ensure_future(_tick(say, spec.task_name, path, started))
        try:
            image_id = await self.gate().run(spec.task_name, lambda: tool.build(
                context, tag, path, spec.build_timeout_sec, spec.builds_with_network
            ), path)  # fmt: skip
        except TaskInvalid:
            say(f"[red]image build failed[/] for {spec.task_name} (log: {path})")
            raise
        finally:
            ticker.cancel()
        say(f"built the image of {spec.task_name} in {time.monotonic() - started:.1f}s")
        return image_id

    async def _unpack(self, tool: ImageTool, image_id: str, source: str) -> Rootfs:
        found = await self._held_entry(image_id)
        if found is not None:
            return found
        lock = await asyncio.to_thread(self.cache.lock, f"unpack:{image_id}")
        try:
            found = await self._held_entry(image_id)
            if found is not None:
                return found
            self.unpacks_run += 1
            say, started = _progress(), time.monotonic()
            say(f"unpacking image {_hexid(image_id)[:12]} ({source}) into {self.cache.root}")
            config = await tool.config(image_id)
            final = self.cache.entry_dir(image_id)
            tmp = self.cache.root / f".trash-unpack-{_hexid(image_id)[:16]}-{os.getpid()}"
            await asyncio.to_thread(shutil.rmtree, tmp, True)
            # 0700 until chown_tree (a chown drops setuid): the export keeps the image's
            # owners and modes, so a task's setuid-root file is one for any local user.
            tmp.mkdir(mode=0o700, parents=True)
            (tmp / "rootfs").mkdir()
            try:
                async with self._busy:
                    await tool.export(image_id, tmp / "rootfs")
                await asyncio.to_thread(self.cache.chown_tree, tmp / "rootfs")
                tmp.chmod(0o755)
                entry = RootfsEntry(
                    image_id=_hexid(image_id),
                    tool=tool.name,
                    source=source,
                    config=config,
                    created_at=datetime.now(UTC).isoformat(),
                )
                (tmp / ENTRY_FILE).write_text(entry.model_dump_json(indent=2))
                await asyncio.to_thread(shutil.rmtree, final, True)
                tmp.rename(final)
                say(f"unpacked image {_hexid(image_id)[:12]} in {time.monotonic() - started:.1f}s")
            except BaseException:
                await asyncio.to_thread(shutil.rmtree, tmp, True)
                raise
        finally:
            os.close(lock)
        found = await self._held_entry(image_id)
        if found is None:
            raise SandboxFailed(f"the unpacked image {image_id[:12]} vanished")
        return found

    def close(self) -> None:
        for fd in self._held.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._held.clear()


def _progress():  # type: ignore[no-untyped-def]
    from rich.console import Console
    from rich.markup import escape

    from crucible.records.text import terminal_safe

    console = Console(stderr=True)

    def say(msg: str) -> None:  # msg quotes a task's build output: hostile text
        log.info("%s", msg)
        console.print(f"[dim]local:[/] {escape(terminal_safe(msg))}", highlight=False)

    return say


async def _tick(say, task_name: str, path: Path, started: float) -> None:  # type: ignore[no-untyped-def]
    from crucible.sandboxes.local.imagetools import log_tail

    while True:
        await asyncio.sleep(PROGRESS_EVERY_SEC)
        last = log_tail(path, 1)[-120:]
        say(f"still building {task_name} ({time.monotonic() - started:.0f}s): {last}")
