"""A docker container with network cannot reach this machine's own addresses.

On a bridge the host is the container's gateway, so every host service bound to
an address other than loopback (the bridge's 172.17.0.1, the LAN address) would
answer it. Where the engine runs on this machine and crucible is root, each
address of the host gets a `prohibit` route in the container's network
namespace (netlink.py, no process). The container starts on network "none", and
joins its network frozen, running on once the routes are in (join_late): the image's
ENTRYPOINT, which runs at start, never has a window to the host. Compose sidecars get the same
(they are the task author's code). The container cannot remove the routes: Docker
withholds CAP_NET_ADMIN by default and crucible refuses `cap_add` and `privileged`.
An address the host gains later (another trial's compose network) is blocked in it
as it appears (addrwatch.py). What stays open: every engine that is not local or
not ours to enter: there
`capabilities().host_addresses` is "reachable" and `sandboxes check` says so.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

from crucible.errors import SandboxFailed
from crucible.sandboxes import addrwatch, netlink
from crucible.sandboxes.forward import Forwards
from crucible.sandboxes.hostnet import host_ipv4


def can_block(engine_url: str) -> bool:
    return os.geteuid() == 0 and engine_url.startswith("unix:")


def block_in(container: dict[str, Any]) -> tuple[int, list[str], int]:
    """Add the prohibit routes to the namespace of this (inspected, running) container,
    found by its pid and checked to be that container's (its cgroup names its id), and
    keep blocking each address the host gains while it runs (addrwatch.py: a compose
    trial's bridge beside it). Returns that pid, the addresses blocked, the watch's token
    (HostForwards.close_forwards ends it)."""
    pid = int((container.get("State") or {}).get("Pid") or 0)
    cid = str(container.get("Id") or "")
    if pid <= 0 or not cid:
        raise OSError("the container has no process")
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            if cid not in f.read():  # an engine in another pid namespace (a VM)
                raise OSError(f"pid {pid} is not container {cid[:12]} here")
        addrs = host_ipv4()
        netlink.prohibit(fd, addrs)
        return pid, addrs, addrwatch.watch(fd)
    finally:
        os.close(fd)


async def join_late(
    call: Callable[..., Awaitable[Any]],
    api: Any,
    box: HostForwards,
    network: str,
    aliases: list[str] | None = None,
) -> None:
    """The container `box` was started on network "none" (only its loopback: nothing its
    image runs at start reaches anything). It is frozen (the cgroup freezer: `docker
    pause`), leaves "none" for `network` (Docker writes its resolv.conf and hosts, and
    checks the gateway is routable, so the routes cannot go in first), gets its prohibit
    routes, and only then runs on."""
    await call(api.pause, box.id)
    await call(api.disconnect_container_from_network, box.id, "none")
    await call(api.connect_container_to_network, box.id, network, aliases=aliases or None)
    info = await call(api.inspect_container, box.id)
    box.container_pid, box.blocked, box.address_watch = block_in(info)
    await call(api.unpause, box.id)


class HostForwards:
    """DockerSandbox's `expose_url`: the one endpoint an installed agent is given, when it
    is on this host (forward.py), through the container's own loopback."""

    id: str
    blocked: list[str] | None = None  # set by the provider once the routes are in
    forwards: Forwards | None = None
    container_pid = 0
    address_watch = 0  # addrwatch's token, from block_in

    async def expose_url(self, url: str) -> str:
        if self.blocked is None:  # the engine's own networking applies, as before
            return url
        if self.forwards is None:
            self.forwards = Forwards()
        try:
            return await self.forwards.expose(self.container_pid, url, self.blocked)
        except OSError as e:
            raise SandboxFailed(f"could not forward {url} into the container: {e}") from e

    async def close_forwards(self) -> None:
        addrwatch.unwatch(self.address_watch)
        self.address_watch = 0
        if self.forwards is not None:
            await self.forwards.close()
