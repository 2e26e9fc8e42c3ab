"""A small world with no way off the machine, for the local provider's route out.

Run as root under `unshare --net --mount` (test_local_network_route.py does): this
process is then in a network namespace "A" of its own, with no interface but what it
makes. It
makes a second namespace "B" (the outside world) joined to A by a veth pair with
link-local addresses (169.254.77.1 in A, 169.254.77.2 in B), starts a listener in B,
and listeners on A's 127.0.0.1 and 169.254.77.1 (the "host's" loopback and own address).
A's resolv.conf (in its own mount namespace) names a resolver on A's loopback; an address
A gains only while the sandbox runs is probed too.
Then a local sandbox with network, whose slirp4netns runs in A, probes each. No packet
can leave: neither namespace has an interface to anything else. Prints a JSON report.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile

A_ADDR, B_ADDR = "169.254.77.1", "169.254.77.2"
LATE_ADDR = "169.254.78.1"  # an address A gains while the sandbox runs (a new bridge's)

# B: wait for "go" (its address is configured then), listen, say the port, greet callers.
OUTSIDE = f"""
import socket, sys, threading
print("in B", flush=True)  # past unshare: the namespace exists
sys.stdin.readline()
s = socket.socket(); s.bind(("{B_ADDR}", 0)); s.listen()
print(s.getsockname()[1], flush=True)
def serve():
    while True:
        c, _ = s.accept(); c.sendall(b"hello from outside\\n"); c.close()
threading.Thread(target=serve, daemon=True).start()
sys.stdin.readline()
"""


def ip(*args: str, pid: int | None = None) -> None:
    pre = ["nsenter", "-t", str(pid), "-n"] if pid else []
    subprocess.run([*pre, "ip", *args], check=True)


async def probe_all(
    targets: dict[str, tuple[str, int]], late: dict[str, tuple[str, int]] | None = None
) -> dict[str, str]:
    """Each target's answer from a sandbox with network; `late` ones get their address on
    A's loopback only once the sandbox runs (their listener is on all addresses)."""
    from crucible.sandboxes.base import SandboxSpec
    from crucible.sandboxes.local.provider import LocalProvider

    provider = LocalProvider(userland="host")
    await provider.preflight()
    out: dict[str, str] = {}
    try:
        async with await provider.create(SandboxSpec(job_id="world", network="public")) as sb:
            for addr in {a for a, _ in (late or {}).values()}:
                ip("addr", "add", f"{addr}/32", "dev", "lo")
            for name, (addr, port) in {**targets, **(late or {})}.items():
                r = await sb.exec(
                    f"timeout 3 bash -c 'exec 3<>/dev/tcp/{addr}/{port} && head -n 1 <&3' "
                    "2>&1 || echo closed",
                    timeout=30,
                )
                out[name] = r.stdout.strip()
    finally:
        await provider.aclose()
    return out


async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"a host service\n")
    await writer.drain()
    writer.close()


def start_outside() -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["unshare", "--net", sys.executable, "-c", OUTSIDE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def resolver_on_loopback() -> None:
    """A's resolv.conf names a resolver on A's loopback (as systemd-resolved's 127.0.0.53
    does), in this process's own mount namespace only."""
    conf = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    conf.write("nameserver 127.0.0.1\n")
    conf.close()
    subprocess.run(["mount", "--bind", conf.name, "/etc/resolv.conf"], check=True)


async def main() -> None:
    ip("link", "set", "lo", "up")
    resolver_on_loopback()
    outside = start_outside()
    assert outside.stdin is not None and outside.stdout is not None
    try:
        assert outside.stdout.readline() == "in B\n"  # unshare execs python in the same pid
        ip("link", "add", "vA", "type", "veth", "peer", "name", "vB", "netns", str(outside.pid))
        ip("addr", "add", f"{A_ADDR}/30", "dev", "vA")
        ip("link", "set", "vA", "up")
        for args in (("link", "set", "lo", "up"), ("addr", "add", f"{B_ADDR}/30", "dev", "vB")):
            ip(*args, pid=outside.pid)
        ip("link", "set", "vB", "up", pid=outside.pid)
        outside.stdin.write("go\n")
        outside.stdin.flush()
        b_port = int(outside.stdout.readline())
        # The "host's" own listeners, which must stay out of reach.
        servers = []
        targets = {"outside": (B_ADDR, b_port)}
        for name, addr in (("host_loopback", "127.0.0.1"), ("host_address", A_ADDR)):
            srv = await asyncio.start_server(lambda r, w: w.close(), addr, 0)
            servers.append(srv)
            targets[name] = (addr, srv.sockets[0].getsockname()[1])
        targets["gateway"] = ("10.0.2.2", targets["host_loopback"][1])
        # slirp's DNS address reaches the resolver on A's loopback at port 53 (by design,
        # DNS works so), and no other port there.
        servers.append(await asyncio.start_server(greet, "127.0.0.1", 53))
        targets["resolver"] = ("10.0.2.3", 53)
        targets["resolver_other_port"] = ("10.0.2.3", targets["host_loopback"][1])
        every = await asyncio.start_server(greet, "0.0.0.0", 0)
        servers.append(every)
        late = {"late_address": (LATE_ADDR, every.sockets[0].getsockname()[1])}
        report = await probe_all(targets, late)
        for srv in servers:
            srv.close()
        print(json.dumps(report))
    finally:
        outside.kill()
        outside.wait()


if __name__ == "__main__":
    asyncio.run(main())
