"""This machine's own network addresses, read from /proc (no process, no packet).

The local provider blocks them inside every sandbox with network (local/usernet.py), and
the conformance suite binds a listener on each to show that a sandbox cannot reach it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools


def host_ipv4() -> list[str]:
    """Every IPv4 address this machine owns outside 127/8: the kernel's local table."""
    found: set[str] = set()
    try:
        with open("/proc/net/fib_trie") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for prev, line in itertools.pairwise(lines):
        if line.strip() == "/32 host LOCAL":
            addr = prev.strip().removeprefix("|-- ").removeprefix("+-- ").split()[0]
            with contextlib.suppress(ValueError):
                if not ipaddress.IPv4Address(addr).is_loopback:
                    found.add(addr)
    return sorted(found, key=ipaddress.IPv4Address)


def host_ipv6() -> list[str]:
    """This machine's IPv6 addresses of global scope (no ::1, no link-local fe80::)."""
    found: list[str] = []
    try:
        with open("/proc/net/if_inet6") as f:
            rows = [line.split() for line in f]
    except OSError:
        return []
    for row in rows:
        if len(row) >= 4 and row[3] == "00":  # scope: global
            with contextlib.suppress(ValueError):
                found.append(str(ipaddress.IPv6Address(int(row[0], 16))))
    return sorted(set(found))
