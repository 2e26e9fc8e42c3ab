"""A task's `allowed_hosts` entries, in Harbor's forms: a hostname, `*.domain`, an IP
address or an IP range (CIDR); never a URL, a port or a path."""

from __future__ import annotations

import ipaddress
import re

_HOST_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_BAD_HOST = (
    "allowed_hosts entries must be hostnames (a leading '*.' allowed), IP addresses or "
    "IP ranges (CIDR), not URLs, ports or paths"
)


def _host_entry(value: str) -> str:
    """One allowlist entry in Harbor's forms: a hostname, `*.domain`, an IP address, a CIDR."""
    if "/" in value:
        try:
            return ipaddress.ip_network(value, strict=True).compressed
        except ValueError:
            raise ValueError(f"{_BAD_HOST}: {value!r}") from None
    if ":" in value:  # an IPv6 address; a host:port is refused
        try:
            return ipaddress.IPv6Address(value).compressed
        except ValueError:
            raise ValueError(f"{_BAD_HOST}: {value!r}") from None
    name = value.removeprefix("*.")
    if "*" in name or not all(_HOST_LABEL.match(label) for label in name.split(".")):
        raise ValueError(f"{_BAD_HOST}: {value!r}")
    return value


def normalize_hosts(hosts: list[str], where: str) -> list[str]:
    out: list[str] = []
    for host in hosts:
        value = str(host).strip().lower().rstrip(".")
        if not value:
            continue
        try:
            value = _host_entry(value)
        except ValueError as exc:
            raise ValueError(f"{where}.allowed_hosts: {exc}") from None
        if value not in out:
            out.append(value)
    return out
