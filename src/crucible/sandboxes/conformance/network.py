"""Checks of the sandbox's network: nothing of the host reachable, and no packet off the machine.

Every probe aims at a listener this check opened itself: on the host's loopback
(127.0.0.1, ::1), or on one of this machine's own addresses, which it binds
itself. A probe never names an address of another machine, so even a sandbox
whose isolation is broken sends nothing off the machine. Where a provider's
sandboxes run elsewhere (capabilities().host_addresses == "elsewhere"), only the
loopback probes run: this machine's addresses and the sandbox's gateway are then
another machine's business.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import AsyncIterator

from crucible.sandboxes.base import Sandbox
from crucible.sandboxes.conformance.core import Ctx, check, expect
from crucible.sandboxes.hostnet import host_ipv4, host_ipv6

Target = tuple[str, int]


class Listeners:
    """TCP listeners of the check's own, and who reached them."""

    def __init__(self) -> None:
        self.servers: list[asyncio.AbstractServer] = []
        self.hits: list[str] = []

    async def open(self, addr: str) -> int | None:
        async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.hits.append(f"{addr} from {writer.get_extra_info('peername')}")
            writer.close()

        try:
            server = await asyncio.start_server(on_conn, addr, 0)
        except OSError:  # e.g. ::1 where IPv6 is off
            return None
        self.servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        for server in self.servers:
            server.close()
            await server.wait_closed()


@contextlib.asynccontextmanager
async def listening(addrs: list[str]) -> AsyncIterator[tuple[Listeners, dict[str, int]]]:
    ls = Listeners()
    try:
        ports = {a: p for a in addrs if (p := await ls.open(a)) is not None}
        yield ls, ports
    finally:
        await ls.close()


def probe_script(targets: list[Target]) -> str:
    """bash's /dev/tcp: OPEN or closed per target (timeout bounds a silently dropped SYN)."""
    return "\n".join(
        f"timeout 3 bash -c 'exec 3<>/dev/tcp/{a}/{p}' 2>/dev/null "
        f"&& echo 'OPEN {a} {p}' || echo 'closed {a} {p}'"
        for a, p in targets
    )


async def probe(sb: Sandbox, targets: list[Target]) -> list[str]:
    r = await sb.exec(probe_script(targets), timeout=30 + 4 * len(targets))
    expect(r.stdout.count("\n") == len(targets), f"probe did not run: {r.stdout!r} {r.stderr!r}")
    return [line.removeprefix("OPEN ") for line in r.stdout.splitlines() if line.startswith("OPEN")]


async def gateway(sb: Sandbox) -> str | None:
    """The sandbox's IPv4 default gateway (slirp's 10.0.2.2, docker's bridge), if any."""
    r = await sb.exec("cat /proc/net/route", timeout=30)
    for row in r.stdout.splitlines()[1:]:
        cols = row.split()
        if len(cols) > 2 and cols[1] == "00000000" and cols[2] != "00000000":
            with contextlib.suppress(ValueError):
                return str(ipaddress.IPv4Address(int(cols[2], 16).to_bytes(4, "little")))
    return None


async def _needs_bash(sb: Sandbox) -> None:
    expect((await sb.exec("command -v bash", timeout=30)).ok, "bash is needed for /dev/tcp")


@check("host_loopback_unreachable")
async def _host_loopback(ctx: Ctx) -> str:
    """The host's 127.0.0.1 and ::1, from a sandbox with network and without: by those
    addresses, by `localhost`, and by the sandbox's gateway (slirp maps its gateway to the
    host's loopback unless told not to; docker's is the host's bridge address)."""
    elsewhere = ctx.provider.capabilities().host_addresses == "elsewhere"
    notes: list[str] = []
    async with listening(["127.0.0.1", "::1"]) as (ls, ports):
        expect("127.0.0.1" in ports, "could not listen on the host's 127.0.0.1")
        v4 = ports["127.0.0.1"]
        for network in ("public", "none"):
            async with ctx.sandbox(f"host_loopback_{network}", network=network) as sb:
                await _needs_bash(sb)
                targets = [(a, p) for a, p in ports.items()] + [("localhost", v4)]
                gw = None if elsewhere else await gateway(sb)
                if gw is not None:
                    targets.append((gw, v4))
                opened = await probe(sb, targets)
                expect(not opened, f"host loopback reachable with network={network}: {opened}")
                expect(not ls.hits, f"the host's loopback listener was reached: {ls.hits}")
                notes.append(
                    f"network={network}: " + ", ".join(f"{a}:{p}" for a, p in targets) + " closed"
                )
    return "; ".join(notes)


@check("host_addresses_unreachable")
async def _host_addresses(ctx: Ctx) -> str:
    """A listener on each of this machine's own non-loopback addresses, which the check binds
    itself: unreachable without network on every provider, and with network where the
    provider blocks them (local). Where it does not (docker's bridge), the detail says which
    were reached."""
    mode = ctx.provider.capabilities().host_addresses
    if mode == "elsewhere":
        return "skipped: the sandboxes run on another machine"
    addrs = host_ipv4() + host_ipv6()
    if not addrs:
        return "skipped: this machine has no address but loopback"
    notes: list[str] = []
    async with listening(addrs) as (ls, ports):
        for network in ("none", "public"):
            ls.hits.clear()
            async with ctx.sandbox(f"host_addresses_{network}", network=network) as sb:
                await _needs_bash(sb)
                opened = await probe(sb, list(ports.items()))
            if network == "none" or mode == "blocked":
                expect(not opened, f"host addresses reachable with network={network}: {opened}")
                expect(not ls.hits, f"a host listener was reached: {ls.hits}")
                notes.append(f"network={network}: {', '.join(ports)} closed")
            else:
                notes.append(
                    f"network={network}: reached {', '.join(opened) or 'none'} "
                    "(this provider does not block the host's own addresses)"
                )
    return "; ".join(notes)


@check("network_blocked")
async def _network(ctx: Ctx) -> str:
    """Without network there is no route out, IPv4 or IPv6: nothing can leave, shown
    without sending a packet anywhere (the listeners of the checks above show the host's
    loopback and addresses unreachable too)."""
    async with ctx.sandbox("network_blocked", network="none") as sb:
        r = await sb.exec(
            "tail -n +3 /proc/net/dev | cut -d: -f1; echo --; cat /proc/net/route; echo --; cat /proc/net/ipv6_route",
            timeout=60,
        )
    ifaces, v4, v6 = ([*r.stdout.split("--\n"), "", ""])[:3]
    out4 = [row for row in v4.splitlines()[1:] if row.split()[1:2] == ["00000000"]]
    out6 = [
        row
        for row in v6.splitlines()
        if row.split()[:2] == ["0" * 32, "00"] and row.split()[-1] != "lo"
    ]
    expect(not out4 and not out6, f"a default route without network: {out4 + out6}")
    return f"no default route (interfaces: {' '.join(ifaces.split()) or 'none'})"
