"""The host's addresses as they appear: blocked at once in every live sandbox namespace.

The prohibit routes of a sandbox (local/usernet.py, docker/hostblock.py) list the host's
addresses when it starts. An address the host gains while it runs was open to it: a
compose trial beside it makes a bridge network, whose gateway (172.18.0.1, ...) is a new
address of this host, and every host service bound to all addresses answered on it, for
the whole of the run. So, as root, the event loop holds one netlink socket subscribed to
the kernel's IPv4 address events (RTMGRP_IPV4_IFADDR: no process, no polling), and adds
the new address's prohibit route to each namespace registered here the moment the event
is read. What remains: the time between the kernel adding the address and the event loop
reading its event (the loop's latency, usually well under a millisecond), during which a
sandbox that already guessed the address could open a connection; the route then stops
its packets. If the kernel drops events (ENOBUFS), every namespace gets the whole list
again.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
import os
import socket
import struct

from crucible.sandboxes import netlink
from crucible.sandboxes.hostnet import host_ipv4

log = logging.getLogger(__name__)

RTMGRP_IPV4_IFADDR = 0x10
RTM_NEWADDR = 20
IFA_ADDRESS, IFA_LOCAL = 1, 2


def new_addresses(data: bytes) -> list[str]:
    """The IPv4 addresses (outside 127/8) that RTM_NEWADDR messages in `data` add."""
    found: list[str] = []
    off = 0
    while off + 16 <= len(data):
        length, kind = struct.unpack_from("IH", data, off)
        if length < 16:
            break
        if kind == RTM_NEWADDR and length >= 24 and data[off + 16] == socket.AF_INET:
            attr = off + 24
            while attr + 4 <= off + length:
                alen, atype = struct.unpack_from("HH", data, attr)
                if alen < 4:
                    break
                if atype in (IFA_ADDRESS, IFA_LOCAL) and alen == 8:
                    addr = ipaddress.IPv4Address(data[attr + 4 : attr + 8])
                    if not addr.is_loopback and str(addr) not in found:
                        found.append(str(addr))
                attr += (alen + 3) & ~3
        off += (length + 3) & ~3
    return found


class AddressWatch:
    """One event loop's subscription, and the namespaces it keeps blocked."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.bind((0, RTMGRP_IPV4_IFADDR))
        self.sock.setblocking(False)
        self.nets: dict[int, int] = {}  # token -> our own dup of the namespace fd
        loop.add_reader(self.sock.fileno(), self._on_event)

    def add(self, net_fd: int) -> int:
        """Keep `net_fd`'s namespace blocked (a dup of it is held until remove). The list
        is written again after subscribing, so no address added meanwhile is missed."""
        token = next(_TOKENS)
        self.nets[token] = os.dup(net_fd)
        netlink.prohibit(self.nets[token], host_ipv4())
        return token

    def remove(self, token: int) -> None:
        fd = self.nets.pop(token, -1)
        if fd >= 0:
            os.close(fd)

    def _on_event(self) -> None:
        addrs: list[str] = []
        while True:
            try:
                addrs += new_addresses(self.sock.recv(65536))
            except BlockingIOError:
                break
            except OSError:  # ENOBUFS: events were lost; write the whole list
                addrs = host_ipv4()
        if not addrs:
            return
        for token, fd in list(self.nets.items()):
            try:
                netlink.prohibit(fd, addrs)
            except OSError as exc:
                # A namespace whose sandbox is gone (its container removed) refuses
                # nothing; any other refusal is logged, the sandbox's own routes stay.
                log.warning("could not block %s in a sandbox namespace: %s", addrs, exc)
                self.remove(token)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        for token in list(self.nets):
            self.remove(token)


_WATCH: AddressWatch | None = None
_TOKENS = itertools.count(1)  # unique across watches, so an old token frees nothing new


def watch(net_fd: int) -> int:
    """Register a namespace (as root, in the event loop); returns the token for unwatch."""
    global _WATCH
    loop = asyncio.get_running_loop()
    if _WATCH is None or _WATCH.loop is not loop or loop.is_closed():
        if _WATCH is not None:
            _WATCH.close()
        _WATCH = AddressWatch(loop)
    return _WATCH.add(net_fd)


def watching(token: int) -> bool:
    """Whether the namespace of `token` is still kept blocked, by this event loop's watch
    (a refused write, or a watch replaced for another loop, drops it)."""
    w = _WATCH
    if w is None or not token or token not in w.nets:
        return False
    try:
        return w.loop is asyncio.get_running_loop()
    except RuntimeError:
        return False


def unwatch(token: int) -> None:
    if _WATCH is not None and token:
        _WATCH.remove(token)
