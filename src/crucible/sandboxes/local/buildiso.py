"""How a task's Dockerfile is built by Buildah without handing its RUN steps the host.

A task author is as untrusted as an agent. With `--isolation chroot` run by root, a RUN
step was the host's root in the host's pid and network namespaces, and a double chroot
reached the host's `/`. Now, when crucible runs as root:

- Buildah runs rootless, as the dedicated unprivileged user BUILD_USER (builduser.py),
  with its own storage: the steps' uid 0 is that user's uid, ids 1..65536 are the
  subordinate range BUILD_UID_BASE.. (/etc/subuid), far from login users and from the
  sandboxes' ranges (hostuid.py). A step's capabilities are its user namespace's, none
  over the host; it cannot read what that user cannot (/root, pytest's 0700 folders).
- Every RUN step runs in an OCI container (`--isolation oci`, runc or crun): its own
  user, pid, mount, ipc and uts namespaces, and a root made with pivot_root, so there is
  no outer root to chroot back to.
- The whole build (also what Buildah fetches itself: `ADD <url>`) runs in a network
  namespace of its own, made here as root before Buildah starts. Without network it has
  none (RUN steps get `--network none`); with network, slirp4netns gives it a user-mode
  route out that refuses the host's loopback (`--disable-host-loopback`), and RUN steps
  share it.
- `RUN --mount` is refused: this Buildah (1.28, Debian 12) lets a bind mount whose source
  is a stage's link reach the host's whole tree (CVE-2024-1753), and a cache mount's
  source name a host path (CVE-2024-9675).

Why not rootful Buildah with `--userns-uid-map`: its storage (containers/storage 1.43)
commits a step's files with their host ids when it maps with idmapped mounts, and drops
the kernel's whiteouts (owned by the host's root, outside the map) when it does not, so
deleted files came back. Rootless storage has neither problem.

Run by another user, Buildah is that user's rootless Buildah, with `--isolation oci`
(`describe_buildah` says what is weaker there). The Docker engine's builds are described
by `docker_isolation`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import os
import re
import shutil
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from crucible.errors import SandboxFailed, TaskInvalid
from crucible.sandboxes.proc import dies_with_parent

# The subordinate ids of the build user (/etc/subuid, set up by scripts/setup-images.sh):
# 64 Ki ids from 0x1800_0000, below hostuid.IMAGE_UID (0x1FFF_FFFF) and the slot range.
BUILD_UID_BASE = 0x1800_0000
BUILD_ID_COUNT = 65536
SLIRP_GATEWAY_DNS = "10.0.2.3"
_HYBRID = "/sys/fs/cgroup/unified"

_CONTINUATION = re.compile(r"[\\`][ \t]*\r?\n")
_FORBIDDEN_FLAG = re.compile(r"(?i)(?:^|\s)--(mount|security)(?==|\s)")
# An image reference with a transport other than a registry's: `containers-storage:[driver@
# /any/path+/run]name` opens (and makes) a store at a path of the task's choosing, by root
# when crucible hands a base over; the others read host files or the Docker engine.
_TRANSPORT = re.compile(
    r"(?i)(?:^|[\s='\"])((?:containers-storage|docker-daemon|docker-archive|oci-archive|oci"
    r"|dir|ostree|sif|tarball):)"
)


class BuildIsolation(BaseModel):
    """What a build's RUN steps get on this machine (for `crucible doctor`)."""

    path: str  # "local buildah", "local docker fallback", "docker provider"
    isolation: str
    user: str
    network: str
    weaker_than_container: bool
    warning: str = ""


def refuse_host_mounts(dockerfile: Path) -> None:
    """TaskInvalid when the Dockerfile asks for `RUN --mount` or `--security` (both reach
    the host through this Buildah), or names an image through a transport (_TRANSPORT). Continuations and comment lines are removed first, so
    a flag split over lines is seen as the parser sees it; a mention in a shell string is
    refused too (rare, and the message says why)."""
    try:
        fd = os.open(dockerfile, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise TaskInvalid(f"its image cannot be built: cannot read {dockerfile}: {exc}") from exc
    with os.fdopen(fd, errors="replace") as fh:
        text = fh.read()
    lines = [ln for ln in text.splitlines(keepends=True) if not ln.lstrip().startswith("#")]
    joined = _CONTINUATION.sub("", "".join(lines))
    transport = _TRANSPORT.search(joined)
    if transport:
        raise TaskInvalid(
            f"its image cannot be built: {dockerfile.name} names an image through "
            f"`{transport.group(1)}`, which crucible's local builds refuse (it reads or makes "
            "files on the host); name images by their registry name"
        )
    found = _FORBIDDEN_FLAG.search(joined)
    if found:
        raise TaskInvalid(
            f"its image cannot be built: {dockerfile.name} uses `--{found.group(1)}`, which "
            "crucible's local builds refuse (Buildah 1.28 lets a RUN mount reach the host's "
            "files); copy what the step needs into the context instead, or use --env docker"
        )


def rootful() -> bool:
    return os.geteuid() == 0


@functools.cache
def _runtime() -> str:
    for name in ("crun", "runc"):
        if shutil.which(name):
            return name
    return ""


def _dns_args() -> list[str]:
    """A nameserver the build's namespace can reach: the host's own, unless it is on the
    host's loopback (systemd-resolved's stub), which is out of reach by design."""
    servers: list[str] = []
    with contextlib.suppress(OSError):
        for line in Path("/etc/resolv.conf").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "nameserver":
                servers.append(parts[1])
    try:
        if servers and not all(ipaddress.ip_address(s).is_loopback for s in servers):
            return []
    except ValueError:
        return []
    return ["--dns", SLIRP_GATEWAY_DNS]


def build_options(network: bool) -> list[str]:
    """The isolation options of `buildah build` (the caller adds the rest)."""
    argv = ["--isolation", "oci"]
    if not rootful():
        return [*argv, "--network", "private" if network else "none"]
    # With network, RUN steps share the build's own namespace (slirp4netns); without, none.
    argv += ["--network", "host", *_dns_args()] if network else ["--network", "none"]
    if _runtime():
        argv += ["--runtime", _runtime()]
    return argv


async def run_build(
    argv: list[str], network: bool, log: Path, timeout: float, env: dict[str, str] | None = None
) -> int:
    """Run a build command in a network namespace of its own; its exit status.

    The wrapper shell signals on fd 3 once `unshare` has made the namespace, and waits on
    stdin: slirp4netns (with network) is attached to that pid only after the signal, so it
    can never configure the host's namespace, and buildah starts only once the route is up.

    The build also gets a pid namespace of its own, whose init dies with `unshare`
    (--kill-child): runc starts each RUN step in a session of its own, so killing the
    process group on a timeout left the step (and whatever it started) running as the
    build user for good; the kernel kills everything in a namespace whose init is gone.
    That init is the root shell, never buildah: setpriv's change of ids drops the kill
    signal --kill-child set. `unshare` itself dies with this process (dies_with_parent),
    so a forced exit (a second Ctrl-C, kill -9) takes the whole build with it.
    """
    if not rootful():
        return await _exec(argv, log, timeout, env)
    unshare, slirp = shutil.which("unshare"), shutil.which("slirp4netns")
    if unshare is None or (network and slirp is None):
        missing = "unshare (util-linux)" if unshare is None else "slirp4netns"
        raise SandboxFailed(
            f"isolated builds need {missing}", hint="run scripts/setup-images.sh (as root)"
        )
    # Not `exec "$@"`: the shell stays pid 1 (root, its kill signal kept) and waits.
    # The build's mount namespace (private) drops a hybrid host's cgroup2 mount
    # (/sys/fs/cgroup/unified with controllers on it): rootless crun refuses to start any
    # step on such a host ("cgroups in hybrid mode not supported"), and a rootless
    # step gets no cgroup of v1 either, so the steps lose nothing.
    script = (
        f"umount -l {_HYBRID} 2>/dev/null; "
        'echo >&3; exec 3>&-; read -r _ || exit 111; "$@"; exit $?'
    )
    ready_r, ready_w = os.pipe()
    with log.open("ab") as fh:
        try:
            proc = await asyncio.create_subprocess_exec(
                unshare, "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--",
                "sh", "-c", script, "crucible-build", *argv,
                stdin=asyncio.subprocess.PIPE, stdout=fh, stderr=asyncio.subprocess.STDOUT,
                # fd 3 of the wrapper is the signal pipe (kept open through exec: 3 is
                # in pass_fds, and the dup2 onto it runs before the other fds are closed)
                pass_fds=(3, ready_w), start_new_session=True, env=env,
                preexec_fn=dies_with_parent(functools.partial(os.dup2, ready_w, 3)),
            )  # fmt: skip
        finally:
            os.close(ready_w)
        helper: asyncio.subprocess.Process | None = None
        try:
            got = await asyncio.wait_for(asyncio.to_thread(os.read, ready_r, 1), 30)
            if got != b"\n":  # unshare failed; its message is in the log
                return await proc.wait()
            if _netns(proc.pid) == _netns(os.getpid()):
                raise SandboxFailed("the build's network namespace was not made")
            if network:
                assert slirp is not None
                helper = await _slirp(slirp, proc.pid, fh)
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
            proc.stdin.close()
            await asyncio.wait_for(proc.wait(), timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            await proc.wait()
            raise
        finally:
            os.close(ready_r)
            if helper is not None:
                with contextlib.suppress(ProcessLookupError):
                    helper.kill()
                await helper.wait()
    return proc.returncode or 0


async def _slirp(slirp: str, pid: int, fh: Any) -> asyncio.subprocess.Process:
    ready_r, ready_w = os.pipe()
    try:
        helper = await asyncio.create_subprocess_exec(
            slirp, "--configure", "--mtu=65520", "--disable-host-loopback", "--enable-sandbox",
            "--enable-seccomp", "--ready-fd", str(ready_w), str(pid), "tap0",
            stdin=asyncio.subprocess.DEVNULL, stdout=fh, stderr=asyncio.subprocess.STDOUT,
            pass_fds=(ready_w,), start_new_session=True, preexec_fn=dies_with_parent(),
        )  # fmt: skip
    finally:
        os.close(ready_w)
    try:
        got = await asyncio.wait_for(asyncio.to_thread(os.read, ready_r, 1), 30)
    except BaseException:
        helper.kill()
        await helper.wait()
        raise
    finally:
        os.close(ready_r)
    if got != b"1":
        helper.kill()
        await helper.wait()
        raise SandboxFailed("slirp4netns could not give the build its network")
    return helper


async def _exec(argv: list[str], log: Path, timeout: float, env: dict[str, str] | None) -> int:
    with log.open("ab") as fh:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=fh,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True, env=env,
            preexec_fn=dies_with_parent(),
        )  # fmt: skip
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            await proc.wait()
            raise
    return proc.returncode or 0


def _netns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def describe_buildah() -> BuildIsolation:
    from crucible.sandboxes.local import builduser

    runtime = _runtime() or "no OCI runtime found (install crun or runc)"
    if rootful():
        user = builduser.find_user()
        missing = [
            what
            for what, ok in (
                (f"the {builduser.BUILD_USER} user with /etc/subuid ids", user is not None),
                ("crun or runc", bool(_runtime())),
                ("slirp4netns", shutil.which("slirp4netns") is not None),
                ("newuidmap (uidmap)", shutil.which("newuidmap") is not None),
            )
            if not ok
        ]
        return BuildIsolation(
            path="local buildah",
            isolation=f"rootless OCI container ({runtime}): own user, pid, mount, ipc, uts "
            "namespaces, pivot_root, seccomp; RUN --mount refused",
            user=f"root inside is host uid {user.uid if user else '?'} ({builduser.BUILD_USER}); "
            f"other ids {BUILD_UID_BASE}+{BUILD_ID_COUNT}",
            network="own namespace: none, or slirp4netns without the host's loopback when "
            "the task has network",
            weaker_than_container=bool(missing),
            warning=f"builds cannot run: missing {', '.join(missing)}; run scripts/setup-images.sh"
            if missing
            else "",
        )
    return BuildIsolation(
        path="local buildah",
        isolation=f"rootless OCI container ({runtime}) in this user's user namespace",
        user=f"root inside is host uid {os.geteuid()} (this user)",
        network="RUN steps: none or slirp4netns; Buildah's own fetches (ADD <url>) use the "
        "host's network",
        weaker_than_container=True,
        warning="run by a user: `ADD <url>` is fetched from the host's network namespace",
    )


def docker_isolation(api: Any, path: str) -> BuildIsolation:
    """The Docker engine's builder runs each step in a container; its root is the host's
    uid 0 (with the container's capabilities) unless the engine remaps user namespaces."""
    try:
        options = " ".join(api.info().get("SecurityOptions") or [])
    except Exception as exc:  # doctor reports, never raises
        return BuildIsolation(
            path=path, isolation="unknown", user="unknown", network="unknown",
            weaker_than_container=False, warning=f"the engine did not answer: {exc}"[:300],
        )  # fmt: skip
    remapped = "name=userns" in options
    return BuildIsolation(
        path=path,
        isolation="Docker builder container (own pid, mount, network namespaces, "
        f"pivot_root; {options or 'no security options'})",
        user="root inside is remapped (userns-remap)"
        if remapped
        else "root inside is host uid 0 with the container's capabilities (no userns-remap)",
        network="own namespace: none, or the engine's default bridge when the task has "
        "network (never the host's loopback; the host's other addresses are routable)",
        weaker_than_container=False,
        warning=""
        if remapped
        else "enable userns-remap in the engine for builds whose root is not the host's uid 0",
    )
