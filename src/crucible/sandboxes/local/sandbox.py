"""One live `local` sandbox: its start, the mounts it asks of bwrap, its close.

The exec transport and kill_all live in execs.py, file operations in
files.py, the host-side grading reset in grading.py (mixins of LocalSandbox).
bwrap runs as the slot's host owner, or in image mode as the image uid
(hostuid.py): never the host's root. In host mode the root is a read-only
tmpfs and the writable places are tmpfs mounts of their own, each bounded by
storage_mb where bwrap has --size, all charged to the memory cgroup
(bwrap.py); in image mode the root is the image with a private writable layer
(imagemode.py). Files are served from the host through /proc/<pid 1>/root,
opened once and walked without following links (hostfs.py). The processes
inside are described in init.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import time
from typing import TYPE_CHECKING

from crucible.errors import SandboxFailed
from crucible.records.tamper import TamperRecord
from crucible.sandboxes import netlink
from crucible.sandboxes.base import Sandbox, SandboxSpec
from crucible.sandboxes.forward import Forwards
from crucible.sandboxes.local import hostuid, pid1
from crucible.sandboxes.local.bwrap import SANDBOX_PATH, BwrapLayout, build_argv
from crucible.sandboxes.local.execs import ENV_KEY, LocalExecs, PendingExec
from crucible.sandboxes.local.files import MOUNTED, LocalFiles
from crucible.sandboxes.local.gpus import gpu_devices
from crucible.sandboxes.local.grading import LocalGrading
from crucible.sandboxes.local.host import SandboxHost
from crucible.sandboxes.local.init import (
    CTL,
    INFO_FD,
    INIT_NAME,
    INNER_FDS,
    JOIN_FDS,
    server_script,
)
from crucible.sandboxes.local.layout import root_tmpfs_mb, writable_layout
from crucible.sandboxes.local.oneshot.mem import children
from crucible.sandboxes.local.pool import MARKER, Slot
from crucible.sandboxes.local.usernet import UserNet

if TYPE_CHECKING:
    from crucible.sandboxes.local.imagemode import ImageMode

READY_TIMEOUT_SEC = 30.0


class LocalSandbox(LocalExecs, LocalFiles, LocalGrading, Sandbox):
    def __init__(
        self, host: SandboxHost, spec: SandboxSpec, slot: Slot, image: ImageMode | None = None
    ) -> None:
        self.spec = spec
        self.image = image  # None: host mode (the host's userland); else imagemode.py
        self.host = host
        self.slot = slot
        self.ctl = slot.ctl
        self.cgroup = slot.cgroup
        # The host uid/gid the sandbox's root is (never 0 when we are root): what
        # the host's own writes into the sandbox must belong to. Image mode runs as
        # the uid its image tree was given to (hostuid.IMAGE_UID when we are root).
        self.host_owner: hostuid.Owner = slot.owner
        if image is not None and image.owner is not None:
            self.host_owner = (image.owner, image.owner)
        self._our_ids = (os.geteuid(), os.getegid())
        self.bwrap_pid = 0
        self._pidfd = -1  # bwrap's (our child): reaped through it
        self._init_fd = -1  # pidfd of the sandbox's pid 1: signals never reach a recycled pid
        self._root_fd = -1  # the sandbox's / (through /proc/<init>/root, opened once)
        self._in_fd = -1
        self._out_fd = -1
        self._reading = False
        self._linebuf = b""
        self.init_pid = 0
        self.server_pid = 0
        self._execs: dict[str, PendingExec] = {}
        self._fds: set[int] = set()
        self._lost: str | None = None
        self._closed = False
        self._oom_seen = 0
        self._joined = False  # pid 1 moved itself into the slot's cgroups
        self._net: UserNet | None = None  # with network: slirp4netns on its netns (usernet.py)
        self._netns_fd = -1  # as root, with network: its slot's namespace, spawned in
        self._forwards = Forwards()  # host endpoints handed to it (forward.py)
        self._loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[None] = self._loop.create_future()
        self.base_env: dict[str, str] = {}
        workdir = os.path.normpath(spec.workdir) if spec.workdir.startswith("/") else ""
        self.workdir = workdir

    # ---- lifecycle ---------------------------------------------------------

    def _argv(self, n_join: int, n_inner: int) -> list[str]:
        spec, p = self.spec, self.host
        parts = self.workdir.split("/")[1:2]
        if (
            not self.workdir
            or spec.workdir.split("/").count("..")
            or parts[0] in (*MOUNTED, CTL[1:])
        ):
            raise SandboxFailed(
                f"workdir {spec.workdir!r} must be an absolute path outside /usr, /etc, /proc, /dev"
            )
        for key in spec.env:
            if not ENV_KEY.match(key):
                raise SandboxFailed(f"invalid environment variable name {key!r}")
        host_env = {"PATH": SANDBOX_PATH, "HOME": "/root", "LANG": "C.UTF-8", "TERM": "dumb"}
        self.base_env = {**(self.image.base_env() if self.image else host_env), **spec.env}
        size = root_tmpfs_mb(spec.storage_mb, spec.memory_mb, cgroups=self.cgroup is not None)
        mounts, dirs = writable_layout(self.workdir, self.base_env["HOME"])
        layout = BwrapLayout(
            etc_dir=p.etc_dir(spec.network == "public"),
            network=spec.network == "public",
            gpu_devices=gpu_devices() if spec.gpus > 0 else [],
            info_fd=INFO_FD,
            ro_binds={CTL: self.ctl},
            mounts=mounts,
            dirs=dirs,
            sticky=["/tmp"],
            size=size * 1024 * 1024 if size else None,
            share_net=self._netns_fd >= 0,
        )
        init = [f"{CTL}/{INIT_NAME}" if self.slot.has_init else p.sh]
        bwrap = p.bwrap()
        if self.image is not None:  # image mode: overlay root, the host's shells from a kit
            from crucible.sandboxes.local.imagemode import overlay_bwrap

            layout = self.image.adapt(layout, layout.etc_dir)
            init, bwrap = self.image.init_command(), overlay_bwrap()
        rlimits = None if self.cgroup is not None else (spec.memory_mb * 1024, spec.pids_limit)
        script = server_script(JOIN_FDS[:n_join], INNER_FDS[:n_inner], rlimits)
        return build_argv(bwrap, layout, self.base_env, [*init, "-c", script])

    async def start(self) -> None:
        if self.spec.network == "public" and hostuid.privileged():
            self._netns_fd = (await self.slot.network()).net_fd  # pool.Slot.network
        rfd, wfd = os.pipe()
        # What bwrap and pid 1 are handed, each dup2'd by posix_spawn to its own single
        # digit (init.py): first put above 9, so that no dup2 clobbers another's source.
        handed: list[int] = [_above_nine(wfd)]
        n_join = n_inner = 0
        try:
            if self.cgroup is not None:
                for path in self.cgroup.self_join_files():
                    handed.append(_above_nine(os.open(path, os.O_WRONLY | os.O_CLOEXEC)))
                    n_join += 1
                for path in self.cgroup.inner_join_files():
                    handed.append(_above_nine(os.open(path, os.O_WRONLY | os.O_CLOEXEC)))
                    n_inner += 1
            if n_join > len(JOIN_FDS) or n_inner > len(INNER_FDS):
                raise SandboxFailed("too many cgroups to hand to the sandbox's pid 1")
            argv = self._argv(n_join, n_inner)
        except BaseException:
            for fd in (rfd, *handed):
                os.close(fd)
            raise
        targets = [INFO_FD, *JOIN_FDS[:n_join], *INNER_FDS[:n_inner]]
        try:
            self._spawn(argv, list(zip(handed, targets, strict=True)))
        except OSError as exc:
            os.close(rfd)
            raise SandboxFailed(
                f"could not start bwrap: {exc}", hint="run `crucible doctor`"
            ) from exc
        finally:
            for fd in handed:
                os.close(fd)
        self._loop.add_reader(self._out_fd, self._on_server_output)
        self._reading = True
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), READY_TIMEOUT_SEC)
            info = json.loads(os.read(rfd, 65536))
        except SandboxFailed:
            err = self.slot.bwrap_errors()
            raise SandboxFailed(
                f"bwrap failed to start the sandbox: {err or 'no output'}",
                hint="user namespaces may be disabled; run `crucible doctor`",
            ) from None
        except (TimeoutError, ValueError) as exc:
            raise SandboxFailed(f"sandbox did not become ready: {exc!r}") from exc
        finally:
            os.close(rfd)
        # --as-pid-1: the child bwrap reports *is* the server.
        self.init_pid = self.server_pid = int(info["child-pid"])
        try:
            self._init_fd = os.pidfd_open(self.init_pid)
            # It printed "ready" and nothing inside can kill it: this is our sandbox's root.
            self._root_fd = os.open(
                f"/proc/{self.init_pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
            )
            if hostuid.privileged() and (self.cgroup is None or self.cgroup.mem_inner is None):
                # Files spread over several tmpfs mounts can fill the memory limit:
                # the OOM killer must then take the agent and the verifier, never
                # pid 1 (a lost sandbox would turn the attempt's 0 into an excluded
                # error). On v1 pid 1 sits outside the execs' memory group for that
                # (cgroups.MEM_HEADROOM); elsewhere we ask the OOM killer to spare it,
                # which needs CAP_SYS_RESOURCE (some hosts withhold it even from root).
                with contextlib.suppress(OSError):
                    _write_proc(f"/proc/{self.init_pid}/oom_score_adj", b"-1000")
            if self.cgroup is not None and not self._joined:
                # Only the worker may have been forked since "ready", and it has run
                # no request yet: moving both puts every later exec in the groups.
                self.cgroup.add(self.init_pid)
                for kid in children(self.init_pid):
                    self.cgroup.add(kid)
            self._pid1 = pid1.Settings.of(
                self.init_pid, self.host_owner
            )  # before any exec: what workers get
        except OSError as exc:
            raise SandboxFailed(f"could not set the sandbox up: {exc}") from exc
        if self.spec.network == "public" and self._netns_fd < 0:  # before the task's code
            self._net = UserNet(self.init_pid)
            await self._net.start()
        entrypoint = self.image.entrypoint_script() if self.image else None
        if entrypoint:
            await self._run(entrypoint, input=None, timeout=30.0, output_cap=4096)

    async def expose_url(self, url: str) -> str:
        if self._lost is not None or not self.init_pid:
            raise SandboxFailed(f"sandbox lost: {self._lost or 'not started'}")
        blocked = self._net.blocked if self._net is not None else []
        return await self._forwards.expose(self.init_pid, url, blocked)

    async def system_changes(self) -> TamperRecord | None:
        """In host mode, none: everything outside the agent's own places is a read-only
        bind (or a tmpfs of its own). In image mode, what the upper layer holds."""
        if self.image is None:
            return TamperRecord()
        # Its HOME (where only the image's code is recorded) and PATH come from base_env.
        return await asyncio.to_thread(self.image.system_changes, [self.workdir], self.base_env)

    def grading_kit(self) -> str | None:
        # Host mode: PATH is the host's read-only /usr, crucible's own tools already.
        return None if self.image is None else self.image.grading_kit()

    def _spawn(self, argv: list[str], handed: list[tuple[int, int]]) -> None:
        """bwrap, with stdin, stdout, stderr and each (fd, target) of `handed` dup2'd
        into place: nothing else of ours is inherited."""
        # posix_spawn (vfork+exec), not subprocess or asyncio's child watcher: a
        # few hundred microseconds less per sandbox, and no thread. We reap
        # through a pidfd (see _reap).
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err = self.slot.open_errlog()
        hostuid.no_stray_fds()
        net = netlink.entered(self._netns_fd) if self._netns_fd >= 0 else contextlib.nullcontext()
        try:
            with net:  # born in its slot's namespace, if it has one
                self.bwrap_pid = hostuid.spawn(
                    argv[0],
                    [MARKER + self.slot.name, *argv[1:]],
                    self.host_owner,
                    file_actions=[
                        (os.POSIX_SPAWN_DUP2, in_r, 0),
                        (os.POSIX_SPAWN_DUP2, out_w, 1),
                        (os.POSIX_SPAWN_DUP2, err, 2),
                        *((os.POSIX_SPAWN_DUP2, fd, to) for fd, to in handed),
                    ],
                )
        except BaseException:
            for fd in (in_w, out_r):
                os.close(fd)
            raise
        finally:
            for fd in (in_r, out_w, err):
                os.close(fd)
        self._in_fd, self._out_fd = in_w, out_r
        os.set_blocking(in_w, False)
        os.set_blocking(out_r, False)
        try:
            self._pidfd = os.pidfd_open(self.bwrap_pid)
        except OSError:
            self._pidfd = -1
        self.host.live.add(self)

    async def _wait_readable(self, fd: int, timeout: float) -> bool:
        """Wait for a pidfd to report its process's exit."""
        done: asyncio.Future[None] = self._loop.create_future()

        def on_exit() -> None:
            if not done.done():
                done.set_result(None)

        self._loop.add_reader(fd, on_exit)
        try:
            await asyncio.wait_for(done, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self._loop.remove_reader(fd)

    async def _reap(self) -> None:
        """Reap bwrap, which exits by itself once pid 1 is gone (killed if it lingers)."""
        pid = self.bwrap_pid
        if not pid:
            return
        if self._pidfd >= 0:
            try:
                if not await self._wait_readable(self._pidfd, 2.0):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    await self._wait_readable(self._pidfd, 10.0)
            finally:
                os.close(self._pidfd)
                self._pidfd = -1
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 (it has exited: no wait)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    if os.waitpid(pid, os.WNOHANG)[0]:  # noqa: ASYNC222 (WNOHANG)
                        break
                except ChildProcessError:
                    break
                await asyncio.sleep(0.005)
        self.bwrap_pid = 0

    def _kill_init(self) -> None:
        if self._init_fd >= 0:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self._init_fd, signal.SIGKILL)
        elif self.bwrap_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.bwrap_pid, signal.SIGKILL)  # --die-with-parent takes pid 1

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._lost = "sandbox closed"
        if self._root_fd >= 0:  # first: the last hold on its mounts then goes with pid 1,
            os.close(self._root_fd)  # which tears them down, not this thread (the loop)
            self._root_fd = -1
        self._kill_init()
        with contextlib.suppress(Exception):
            if self._init_fd >= 0:  # pid 1 exits last: then every process inside is gone
                await self._wait_readable(self._init_fd, 10.0)
            await self._reap()
        await self._forwards.close()
        if self._net is not None:  # after pid 1: the agent never outlives its network
            with contextlib.suppress(Exception):
                await self._net.close()
        self._server_gone()
        for fd in (self._in_fd, self._out_fd, self._init_fd, self._root_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._in_fd = self._out_fd = self._init_fd = self._root_fd = -1
        for fd in list(self._fds):
            self._close_fd(fd)
        self.host.live.discard(self)
        if self.image is not None:
            await asyncio.to_thread(self.image.remove_layers)
        await self.host.pool.release(self.slot)


def _above_nine(fd: int) -> int:
    """`fd` moved above 9 (close-on-exec), where no dup2 of _spawn's lands."""
    if fd > 9:
        return fd
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    finally:
        os.close(fd)


def _write_proc(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
