"""Which userland a `local` sandbox runs on: its task's image, or the host's.

`--env-param userland=auto|image|host`: auto runs a task with an image
(environment/Dockerfile or [environment].docker_image) on that image and a
task without one on the host's userland (bwrap.py's fast host mode); image
runs every task on an image (`base_image` for those without one); host runs
every task on the host's userland. A task that needs an image is never run on
the host's userland by default: when no tool can provide the image, its
trials end `resources_unavailable` (images.py). This module is the provider's
one handle on image mode: images.py obtains the trees, imagemode.py runs on them.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from crucible.errors import ProviderUnavailable, SandboxFailed
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local.imagemode import ImageMode, host_kit
from crucible.sandboxes.local.images import ImageStore, Rootfs, RootfsCache, default_cache_dir

USERLANDS = ("auto", "image", "host")


class Userlands:
    """Per provider (one job): picks each spec's userland and prepares image mode."""

    def __init__(
        self, userland: str, image_tool: str, base_image: str, runtime_dir: Path, bash: str
    ) -> None:
        if userland not in USERLANDS:
            raise ProviderUnavailable(
                f"unknown userland {userland!r}", hint=f"--env-param userland={'|'.join(USERLANDS)}"
            )
        self.userland = userland
        self.base_image = base_image
        self.runtime_dir = runtime_dir
        self.bash = bash
        self.store = ImageStore(RootfsCache(default_cache_dir()), image_tool)
        # The host uid a sandbox's root maps to, when it is not ours (None: ours): image
        # trees and writable layers are then given to it (images.RootfsCache).
        self.sandbox_host_uid: int | None = None
        self._kit: Path | None = None  # imagemode.host_kit, made at the first image sandbox
        self._reachable: set[Path] = set()  # trees checked against sandbox_host_uid

    def image_spec(self, spec: SandboxSpec) -> SandboxSpec | None:
        """The spec to resolve an image for, or None for the host's userland."""
        if self.userland == "host":
            return None
        if spec.image is None and spec.dockerfile_dir is None:
            if self.userland == "image":
                return spec.model_copy(update={"image": self.base_image})
            return None
        return spec

    async def prepare(self, specs: list[SandboxSpec], log_dir: Path | None) -> None:
        """Build or unpack every image a job needs once, before its fan-out; a failure
        is left for each trial's create() to report."""
        self.store.log_dir = log_dir
        todo = [s for s in map(self.image_spec, specs) if s is not None]
        await asyncio.gather(*(self._resolve(s) for s in todo), return_exceptions=True)

    async def rootfs(self, spec: SandboxSpec, log_dir: Path | None) -> Rootfs | None:
        """The tree a sandbox for `spec` runs on; None for the host's userland."""
        image_spec = self.image_spec(spec)
        if image_spec is None:
            return None
        self.store.log_dir = self.store.log_dir or log_dir
        return await self._resolve(image_spec)

    async def _resolve(self, spec: SandboxSpec) -> Rootfs:
        # Only one uid is mapped inside (the image's USER, or root): a file of any other
        # owner would be nobody's there, so every file of the tree is the mapped host uid's.
        owner = self.sandbox_host_uid
        self.store.cache.owner = os.geteuid() if owner is None else owner
        return await self.store.resolve(spec)

    async def mode(self, rootfs: Rootfs, layers: Path) -> ImageMode:
        """Image mode for one sandbox, its writable layers kept under `layers`."""
        if self._kit is None:  # once per provider: the host's shells do not change mid-job
            self._kit = await asyncio.to_thread(host_kit, self.runtime_dir, self.bash)
        owner = self.sandbox_host_uid
        top = rootfs.layers[-1]  # every layer of the stack has the same parents
        if owner is not None and owner != os.geteuid() and top not in self._reachable:
            # bwrap runs as that uid: it must search every directory on the way to the tree.
            for d in reversed(top.parents):
                if not os.stat(d).st_mode & stat.S_IXOTH:
                    raise SandboxFailed(
                        f"the sandboxes' host uid {owner} cannot reach the image cache: "
                        f"{d} is not searchable by other users",
                        hint="make it o+x, or set CRUCIBLE_ROOTFS_DIR to a directory whose "
                        "parents are",
                    )
            self._reachable.add(top)
        return ImageMode(rootfs, layers, self._kit, owner=self.sandbox_host_uid)

    def gc(self) -> int:
        return self.store.cache.gc()

    def close(self) -> None:
        self.store.close()
