"""One host service on the sandbox's own loopback: the model endpoint of an installed agent.

A local sandbox reaches nothing of the host's loopback or addresses (local/usernet.py),
nor does a docker container with network where crucible blocks them (docker/hostblock.py),
and a container never reached the host's loopback. An installed
CLI agent must still reach the one model endpoint the operator gave it, which is
often a server on the host's 127.0.0.1 (vLLM, a proxy). So, for that URL only,
crucible makes a TCP listener *inside the sandbox's network namespace*, on its
127.0.0.1 (the event-loop thread enters the namespace just to make the socket,
netlink.py's way, so this needs root), accepts there from the host side, and
pipes each connection to that one host address and port. The sandbox is handed
the URL with its own loopback port; every other host port stays unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
from urllib.parse import urlsplit, urlunsplit

from crucible.errors import SandboxFailed
from crucible.sandboxes import netlink

LOOPBACK_NAMES = {"localhost", "localhost.localdomain"}


def host_target(url: str, blocked: list[str]) -> tuple[str, int] | None:
    """(host, port) when `url` names the host's loopback, or one of the host's addresses
    in `blocked`: what a sandbox cannot reach by itself."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if not host:
        return None
    try:
        loop = host in LOOPBACK_NAMES or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return None
    if not loop and host not in blocked:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return ("127.0.0.1" if host in LOOPBACK_NAMES else host), port


def with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo + '@' if userinfo else ''}127.0.0.1:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class Forwards:
    """The forwards of one sandbox; closed with it."""

    def __init__(self) -> None:
        self.servers: list[asyncio.AbstractServer] = []
        self.pipes: set[asyncio.Task[None]] = set()

    async def expose(self, pid: int, url: str, blocked: list[str]) -> str:
        """`url` as a process in `pid`'s network namespace reaches it."""
        target = host_target(url, blocked)
        if target is None:
            return url  # reached through the route out like any other address
        if os.geteuid() != 0:
            raise SandboxFailed(
                f"{url} is on this host, which a sandbox cannot reach",
                hint="serve it on an address other than loopback, or run crucible as root "
                "(which forwards that one endpoint into the sandbox)",
            )
        fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            sock = netlink.socket_in(fd, socket.AF_INET, socket.SOCK_STREAM)
        finally:
            os.close(fd)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        sock.setblocking(False)

        async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            if task is not None:
                self.pipes.add(task)
            try:
                up_r, up_w = await asyncio.open_connection(*target)
            except OSError:
                writer.close()
                return
            try:
                await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))
            finally:
                for w in (writer, up_w):
                    w.close()
                if task is not None:
                    self.pipes.discard(task)

        server = await asyncio.start_server(on_conn, sock=sock)
        self.servers.append(server)
        return with_port(url, sock.getsockname()[1])

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        for task in list(self.pipes):
            task.cancel()
        for server in self.servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self.servers.clear()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    with contextlib.suppress(OSError):
        if dst.can_write_eof():
            dst.write_eof()
