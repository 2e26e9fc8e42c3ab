"""`ip route add prohibit ADDR/32` in another network namespace, without a process.

Used on a local sandbox's namespace (local/usernet.py) and a docker container's
(docker/hostblock.py). When crucible runs as root, the event-loop thread enters the network
namespace (setns is per thread), opens a netlink socket there, and returns at
once: a socket stays in the namespace it was made in. The routes are then
written through it. No await happens in between, so nothing else of ours runs
in the sandbox's namespace. This saves the ~3.5 ms of CPU that `nsenter ip`
costs per sandbox; without root (setns would need CAP_SYS_ADMIN in our own user
namespace) usernet.py runs `nsenter ... ip -batch -` instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import ipaddress
import os
import socket
import struct
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
RTM_NEWROUTE = 24
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK, NLM_F_REPLACE, NLM_F_CREATE = 0x1, 0x4, 0x100, 0x400
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_PROHIBIT = 254, 3, 0, 8
RTA_DST = 1


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@functools.cache
def _setns() -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    fn = _libc().setns
    fn.argtypes = (ctypes.c_int, ctypes.c_int)
    return fn


def _enter(fd: int) -> None:
    if _setns()(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def _back_home() -> Iterator[None]:
    """Whatever namespace the body moves this thread into, it is back in its own network
    namespace after, or the process ends: never seen for root, but a loop thread left in a
    sandbox's namespace would dial the agent's loopback for the judge or model."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            yield
        finally:
            try:
                _enter(home)
            except OSError:
                os._exit(70)
    finally:
        os.close(home)


@contextlib.contextmanager
def entered(net_fd: int) -> Iterator[None]:
    """This thread in the namespace `net_fd` names meanwhile (what it spawns is born
    there); back home after, or the process ends (see socket_in)."""
    with _back_home():
        _enter(net_fd)
        yield


def new_netns() -> int:
    """A fresh network namespace, owned by ours (root's), with its loopback up: an fd of
    it, which keeps it alive. No process lives in it."""
    with _back_home():
        if _libc().unshare(CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")
        fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            req = struct.pack("16sh", b"lo", 0)
            flags = struct.unpack_from("16sh", fcntl.ioctl(s, SIOCGIFFLAGS, req))[1]
            fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))
        return fd


def socket_in(
    net_fd: int,
    family: int = socket.AF_NETLINK,
    kind: int = socket.SOCK_RAW,
    proto: int = socket.NETLINK_ROUTE,
) -> socket.socket:
    """A socket made in the namespace `net_fd` names (this thread returns home at once);
    by default NETLINK_ROUTE (local/forward.py makes a TCP listener this way)."""
    with entered(net_fd):
        return socket.socket(family, kind, proto if family == socket.AF_NETLINK else 0)


def _message(seq: int, addr: str) -> bytes:
    dst = ipaddress.IPv4Address(addr).packed
    rtmsg = struct.pack(
        "BBBBBBBBI", socket.AF_INET, 32, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT,
        RT_SCOPE_UNIVERSE, RTN_PROHIBIT, 0,
    )  # fmt: skip
    attr = struct.pack("HH", 4 + len(dst), RTA_DST) + dst
    body = rtmsg + attr
    flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE  # idempotent
    return struct.pack("IHHII", 16 + len(body), RTM_NEWROUTE, flags, seq, 0) + body


def prohibit(net_fd: int, addrs: list[str]) -> None:
    """Add a prohibit route for each IPv4 address in the namespace; raises on any refusal."""
    if not addrs:
        return
    with socket_in(net_fd) as sock:
        sock.settimeout(5.0)
        sock.send(b"".join(_message(i + 1, a) for i, a in enumerate(addrs)))
        acked: set[int] = set()
        while len(acked) < len(addrs):
            data = sock.recv(65536)
            off = 0
            while off + 16 <= len(data):
                length, kind, _, seq, _ = struct.unpack_from("IHHII", data, off)
                if kind == NLMSG_ERROR:
                    (code,) = struct.unpack_from("i", data, off + 16)
                    if code != 0:
                        raise OSError(-code, f"route {addrs[seq - 1]}: {os.strerror(-code)}")
                    acked.add(seq)
                off += max(16, (length + 3) & ~3)
