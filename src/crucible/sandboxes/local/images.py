"""Task images for the `local` provider: built or found once, unpacked once, shared by all trials.

A content-addressed rootfs cache (default_cache_dir(), shared by every job)
holds one directory per image id, and one per layer (layers.py):

    <cache>/<image id>/layers.json  RootfsEntry: where it came from, its config (ENV, WORKDIR,
                                    USER, ENTRYPOINT, CMD) and its layers; written last, so it
                                    marks a complete entry
    <cache>/.layers/<diff id>/      one layer, unpacked once for every image that has it: an
                                    image's layers are a sandbox's read-only lower layers
    <cache>/<image id>/image.json   instead, a flat entry: its whole tree in rootfs/, for an
    <cache>/<image id>/rootfs/      image whose stack is too long for one overlay mount
                                    (layers.MAX_LOWER_CHARS), or a tool that gives no layers
    <cache>/by-env/<digest>         the image id a task environment's digest was built into
    <cache>/.locks/                 one flock per key: one build or unpack at a time across processes

Within one provider (one job) each image is resolved by a single shared task,
however many trials ask at once (as the docker provider's ImageCache does); a
failed build is the task's (`TaskInvalid`, remembered for the job), a tool or
engine failure is not. Every provider holds a shared lock on the entries it
uses, so `gc()` (run by `crucible sandboxes cleanup`) removes only entries no
job is using, and then the layers no entry names. The tools themselves live in imagetools.py."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

from crucible.errors import ResourcesUnavailable, SandboxFailed, TaskInvalid
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.buildgate import own_gate
from crucible.sandboxes.docker.build import env_tag, spec_image_key
from crucible.sandboxes.local import imagesave
from crucible.sandboxes.local.imagetools import (
    INSTALL_HINT,
    ImageConfig,
    ImageTool,
    find_tool,
    find_tools,
)
from crucible.sandboxes.local.layers import stack_ids
from crucible.sandboxes.local.rootfs import ENTRY_FILE as ENTRY_FILE
from crucible.sandboxes.local.rootfs import LAYERED_FILE
from crucible.sandboxes.local.rootfs import Rootfs as Rootfs
from crucible.sandboxes.local.rootfs import RootfsCache as RootfsCache
from crucible.sandboxes.local.rootfs import RootfsEntry as RootfsEntry
from crucible.sandboxes.local.rootfs import default_cache_dir as default_cache_dir
from crucible.sandboxes.local.rootfs import hexid as _hexid
from crucible.tasks.taskfs import refuse_context

log = logging.getLogger(__name__)

PROGRESS_EVERY_SEC = 15.0


class ImageStore:
    """Resolves specs to unpacked rootfs trees for one provider, each key at most once."""

    def __init__(self, cache: RootfsCache, tool: str = "auto", layered: bool = True) -> None:
        self.cache = cache
        self.layered = layered  # False: every image unpacked flat, as before layers.py
        self.tool_pref = tool
        self.log_dir: Path | None = None  # the job folder, when the engine tells the provider
        self._tool: ImageTool | None = None
        self._tasks: dict[tuple[str, str], asyncio.Task[Rootfs]] = {}
        self._held: dict[str, int] = {}
        self.builds_run = 0  # builds actually started (tests check the once-per-digest rule)
        self.unpacks_run = 0
        self.layers_made = 0
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
            ids = stack_ids(await imagesave.layer_ids(tool, image_id) or [])
            if self.layered and ids and self.cache.layer_store().fits(ids):
                found = await self._unpack_layers(tool, image_id, source, config, ids)
                say(f"unpacked image {_hexid(image_id)[:12]} in {time.monotonic() - started:.1f}s")
                return found
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
                await asyncio.to_thread(self._write_entry, tmp, image_id, tool, source, config, [])
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

    def _write_entry(
        self, tmp: Path, image_id: str, tool: ImageTool, source: str, config: ImageConfig,
        layers: list[str],
    ) -> None:  # fmt: skip
        """Blocking: write tmp's entry file and clear the entry's place for tmp's rename."""
        entry = RootfsEntry(
            image_id=_hexid(image_id), tool=tool.name, source=source, config=config,
            created_at=datetime.now(UTC).isoformat(), layers=layers,
        )  # fmt: skip
        (tmp / (LAYERED_FILE if layers else ENTRY_FILE)).write_text(entry.model_dump_json(indent=2))
        shutil.rmtree(self.cache.entry_dir(image_id), ignore_errors=True)

    async def _unpack_layers(
        self, tool: ImageTool, image_id: str, source: str, config: ImageConfig, ids: list[str]
    ) -> Rootfs:
        """The layers the cache lacks, unpacked from the tool's store one by one where it
        can be read here (imagesave.direct), else from its archive; then the entry."""
        store = self.cache.layer_store()
        share = await asyncio.to_thread(store.share)  # gc() leaves every layer alone meanwhile
        try:
            direct = await imagesave.direct(tool)
            async with self._busy:
                self.layers_made += await asyncio.to_thread(
                    store.unpack,
                    functools.partial(imagesave.save, tool, image_id),
                    ids,
                    self.cache.chown_tree,
                    lambda digest: self.cache.lock(f"layer:{digest}{self.cache.suffix}"),
                    direct,
                )
            tmp = self.cache.root / f".trash-unpack-{_hexid(image_id)[:16]}-{os.getpid()}"
            await asyncio.to_thread(shutil.rmtree, tmp, True)
            tmp.mkdir(parents=True)
            try:
                await asyncio.to_thread(self._write_entry, tmp, image_id, tool, source, config, ids)
                tmp.rename(self.cache.entry_dir(image_id))
            except BaseException:
                await asyncio.to_thread(shutil.rmtree, tmp, True)
                raise
            found = await self._held_entry(image_id)  # held before gc() may see its layers
        finally:
            os.close(share)
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
