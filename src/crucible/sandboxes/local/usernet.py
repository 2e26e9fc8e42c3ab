"""A local sandbox's route out: its own network namespace, reached through slirp4netns.

Every local sandbox has a network namespace of its own, so nothing listening on
the host's loopback, and no abstract unix socket of the host, is reachable from
inside. Without network that is all: bwrap --unshare-net, loopback only. With
network, as root, the namespace is its pool slot's, made once and used by the
slot's sandboxes in turn (UserNet.for_slot: one sandbox at a time, and nothing
of one survives into the next); otherwise bwrap's own. slirp4netns (a user-mode
TCP/IP stack) is attached to it: it makes a tap device inside, 10.0.2.100/24
with a default route via 10.0.2.2, and turns the sandbox's packets into
ordinary sockets of its own on the host. So:
- `--disable-host-loopback`: 10.0.2.2 (the gateway, which slirp maps to the
  host's 127.0.0.1 by default) refuses connections.
- The host's own addresses (every address of every interface, as the kernel's
  local table lists them when the sandbox starts) get a `prohibit` route inside
  the namespace, set from outside before the agent runs: the sandbox holds no
  capability (bwrap --cap-drop ALL, no nested user namespaces), so it cannot
  remove them, nor open raw sockets to go around them.
- No IPv6 route at all (slirp4netns without --enable-ipv6).
- DNS is slirp's forwarder, 10.0.2.3 (the sandbox's resolv.conf names it),
  which asks the host's own resolvers.
- slirp4netns runs with --enable-sandbox when we are root (an empty mount
  namespace, every capability dropped; otherwise it runs as our own user), and
  exits when its exit fd, which only this process holds, is closed: at close(),
  or by the kernel when crucible dies. Its netns is given as a path to the
  namespace file we hold open, never a pid, so it cannot join a namespace the
  sandbox made later (bwrap's nested user namespace).
What stays reachable: the host's resolvers through 10.0.2.3:53, and whatever the
host itself can reach (other machines, the internet). As root, an address the host
gains while a sandbox runs (a compose trial's new bridge) is blocked in it as it appears
(addrwatch.py); without root, only from the next sandbox on.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import signal

from crucible.errors import SandboxFailed
from crucible.sandboxes import addrwatch, netlink
from crucible.sandboxes.hostnet import host_ipv4
from crucible.sandboxes.local import hostuid

SANDBOX_ADDR = "10.0.2.100"  # slirp4netns --configure's defaults (its --cidr)
GATEWAY = "10.0.2.2"
DNS = "10.0.2.3"
TAP = "tap0"
MTU = 65520
READY_TIMEOUT_SEC = 10.0
NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace
INSTALL_HINT = (
    "install slirp4netns (Debian: `apt-get install slirp4netns iproute2`, which "
    "scripts/setup-images.sh does), or run the job with --no-network"
)


def _needed() -> tuple[str, ...]:
    # As root the prohibit routes go in through netlink.py; otherwise through `nsenter ip`.
    return ("slirp4netns",) if os.geteuid() == 0 else ("slirp4netns", "nsenter", "ip")


def missing_tools() -> list[str]:
    return [n for n in _needed() if not shutil.which(n)]


def resolv_conf() -> str:
    """The sandbox's /etc/resolv.conf: slirp's forwarder, and the host's search domains."""
    keep: list[str] = []
    with contextlib.suppress(OSError), open("/etc/resolv.conf") as f:
        keep = [ln for ln in f.read().splitlines() if ln.split()[:1] in (["search"], ["domain"])]
    return "\n".join([f"nameserver {DNS}", *keep]) + "\n"


class UserNet:
    """slirp4netns attached to a network namespace, plus its prohibit routes: one
    sandbox's (made by bwrap), or as root a slot's, which its sandboxes share in turn."""

    def __init__(self, pid: int = 0, net_fd: int = -1) -> None:
        self.pid = pid  # the sandbox's pid 1 (bwrap's info), or 0 with net_fd
        self.net_fd = net_fd  # a namespace of our own (a slot's), held until close
        self.slirp_pid = 0
        self._slirp_fd = -1  # pidfd
        self._exit_w = -1  # slirp4netns exits when this closes
        self._err = -1  # its stderr (a memfd): read back when it fails to start
        self.blocked: list[str] = []
        self._watch = 0  # as root: addrwatch's token (addresses the host gains meanwhile)

    async def start(self) -> None:
        missing = missing_tools()
        if missing:
            raise SandboxFailed(
                "a local sandbox with network needs " + ", ".join(missing), hint=INSTALL_HINT
            )
        self.blocked = host_ipv4()
        # Held open: the namespace stays this sandbox's even if the pid is reused.
        own = self.net_fd >= 0
        net_fd = self.net_fd if own else os.open(f"/proc/{self.pid}/ns/net", os.O_CLOEXEC)
        user_fd = -1
        try:
            # First the prohibit routes, while the namespace has no route out at all.
            if os.geteuid() == 0:
                try:
                    netlink.prohibit(net_fd, self.blocked)
                    self._watch = addrwatch.watch(net_fd)
                except OSError as exc:
                    raise self._unblocked(str(exc)) from exc
            else:  # join the namespace's owner (bwrap's outer user namespace: ours)
                user_fd = fcntl.ioctl(net_fd, NS_GET_USERNS)
                await self._prohibit_through_ip(net_fd, user_fd)
            ready_r = self._spawn_slirp(net_fd, user_fd)
        finally:
            for fd in (-1 if own else net_fd, user_fd):
                if fd >= 0:
                    os.close(fd)
        try:
            ready = await _read_ready(asyncio.get_running_loop(), ready_r)
        finally:
            os.close(ready_r)
        if ready != b"1":
            said = os.pread(self._err, 2000, 0).decode(errors="replace").strip().splitlines()
            tail = ": " + "; ".join(said[-3:]) if said else ""
            raise SandboxFailed(
                "slirp4netns could not give the sandbox its network "
                f"({'no answer' if ready is None else 'it exited'}"
                f"{tail})",
                hint="run `crucible doctor`; " + INSTALL_HINT,
            )

    def _unblocked(self, why: str) -> SandboxFailed:
        return SandboxFailed(
            f"could not block the host's own addresses ({', '.join(self.blocked)}) "
            f"inside the sandbox: {why}",
            hint="`ip route add prohibit` failed in its network namespace",
        )

    async def _prohibit_through_ip(self, net_fd: int, user_fd: int) -> None:
        if not self.blocked:
            return
        rules = "".join(f"route add prohibit {a}/32\n" for a in self.blocked).encode()
        enter = [
            "nsenter", f"--net=/proc/self/fd/{net_fd}", f"--user=/proc/self/fd/{user_fd}",
            "--preserve-credentials", "--", "ip", "-batch", "-",
        ]  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            *enter,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=(net_fd, user_fd),
        )
        _, err = await proc.communicate(rules)
        if proc.returncode != 0:
            raise self._unblocked(err.decode(errors="replace").strip()[-500:])

    def _spawn_slirp(self, net_fd: int, user_fd: int) -> int:
        """Start slirp4netns on the namespace; returns the read end of its ready fd.
        No await in here: the fds made inheritable for it reach no other spawn (a
        concurrent sandbox's bwrap would hand them to its agent)."""
        exit_r, self._exit_w = os.pipe()
        ready_r, ready_w = os.pipe()
        devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        self._err = os.memfd_create("slirp4netns-stderr", os.MFD_CLOEXEC)
        child = [exit_r, ready_w, devnull]
        try:
            hostuid.no_stray_fds(frozenset({net_fd, user_fd, exit_r, ready_w}))
            for fd in (net_fd, user_fd, exit_r, ready_w):
                if fd >= 0:
                    os.set_inheritable(fd, True)
            userns = [f"--userns-path=/proc/self/fd/{user_fd}"] if user_fd >= 0 else []
            # As root, its own empty mount namespace and no capabilities; it cannot do that
            # as another user (it wants setegid(0)), and then holds no privilege anyway.
            sandboxed = ["--enable-sandbox"] if user_fd < 0 else []
            argv = [
                "slirp4netns", "--configure", f"--mtu={MTU}", "--disable-host-loopback",
                *sandboxed, f"--exit-fd={exit_r}", f"--ready-fd={ready_w}",
                *userns, "--netns-type=path", f"/proc/self/fd/{net_fd}", TAP,
            ]  # fmt: skip
            quiet = [(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, self._err, 2)]
            slirp = shutil.which("slirp4netns") or "slirp4netns"
            self.slirp_pid = os.posix_spawn(slirp, argv, {}, file_actions=quiet)
            with contextlib.suppress(OSError):
                self._slirp_fd = os.pidfd_open(self.slirp_pid)
        except BaseException:
            os.close(ready_r)
            raise
        finally:
            for fd in child:
                os.close(fd)
            for fd in (net_fd, user_fd):
                if fd >= 0:
                    os.set_inheritable(fd, False)
        os.set_blocking(ready_r, False)
        return ready_r

    @classmethod
    async def for_slot(cls) -> UserNet:
        """As root: a namespace of our own with its route out, for a slot's sandboxes.
        bwrap is then spawned in it (netlink.entered) instead of unsharing one: no
        netns nor slirp4netns to start per sandbox. Nothing of a sandbox outlives it
        there (its pid namespace takes every process, and with them every socket), and
        no sandbox holds a capability over a namespace that root's user namespace owns."""
        net = cls(net_fd=netlink.new_netns())
        try:
            await net.start()
        except BaseException:
            net.close_sync()
            raise
        return net

    def alive(self) -> bool:
        try:
            return bool(self.slirp_pid) and os.waitpid(self.slirp_pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False

    def refresh(self) -> None:
        """The host's addresses as they are now (a Docker network made since): routes
        are replaced, so this is idempotent. Nothing to do while addrwatch keeps the
        namespace blocked (as root): it has added each address the host gained since, as
        the kernel announced it."""
        if self._watch and addrwatch.watching(self._watch):
            return
        self.blocked = host_ipv4()
        try:
            netlink.prohibit(self.net_fd, self.blocked)
        except OSError as exc:
            raise self._unblocked(str(exc)) from exc

    def close_sync(self) -> None:
        """Stop it now (a slot removed, the process exiting): SIGKILL and reap."""
        addrwatch.unwatch(self._watch)
        self._watch = 0
        for fd in (self._exit_w, self._err, self.net_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._exit_w = self._err = self.net_fd = -1
        pid, self.slirp_pid = self.slirp_pid, 0
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _reap(pid)
        if self._slirp_fd >= 0:
            os.close(self._slirp_fd)
            self._slirp_fd = -1

    async def close(self) -> None:
        """Stop slirp4netns (closing its exit fd; SIGKILL if it lingers) and reap it."""
        addrwatch.unwatch(self._watch)
        self._watch = 0
        for fd in (self._exit_w, self._err, self.net_fd):
            if fd >= 0:
                os.close(fd)
        self._exit_w = self._err = self.net_fd = -1
        pid, self.slirp_pid = self.slirp_pid, 0
        if not pid:
            return
        try:
            if self._slirp_fd >= 0 and not await _exited(self._slirp_fd, 2.0):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            elif self._slirp_fd < 0:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await asyncio.to_thread(_reap, pid)
        finally:
            if self._slirp_fd >= 0:
                os.close(self._slirp_fd)
                self._slirp_fd = -1


async def _read_ready(loop: asyncio.AbstractEventLoop, fd: int) -> bytes | None:
    """What slirp4netns writes on its ready fd ("1"), b"" if it exited first, None on timeout."""
    got: asyncio.Future[bytes] = loop.create_future()

    def on_read() -> None:
        if not got.done():
            try:
                got.set_result(os.read(fd, 16))
            except BlockingIOError:
                return
            except OSError:
                got.set_result(b"")

    loop.add_reader(fd, on_read)
    try:
        return await asyncio.wait_for(got, READY_TIMEOUT_SEC)
    except TimeoutError:
        return None
    finally:
        loop.remove_reader(fd)


async def _exited(pidfd: int, timeout: float) -> bool:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(pidfd, on_exit)
    try:
        await asyncio.wait_for(done, timeout)
        return True
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(pidfd)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
