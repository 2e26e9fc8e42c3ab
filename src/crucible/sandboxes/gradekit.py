"""The grading kit: crucible's own shell and tools inside a sandbox whose image the agent
may have changed (local image mode, docker).

Grading runs test.sh with a bash, and sets its context up with mkdir, chown and a user
switch; on docker the kill sweep and the resets are shell scripts too. Found through
PATH, each would be the agent's: a planted /usr/local/bin/bash comes first, and a
replaced /bin/sh, grep or rm is the image's. So these commands run from a kit of two
STATIC host binaries (Debian's bash-static and busybox-static), called by absolute path
and mounted where the sandbox cannot write: static, so neither the image's loader, nor
its libc, nor an /etc/ld.so.preload it wrote is ever involved. busybox's shell runs its
own applets before anything on PATH, so a sweep's `grep` or a reset's `rm` is the kit's.

What the kit cannot cover: test.sh itself calls the image's tools (python3, pytest),
which the agent may have replaced. That is what the tamper record (sandboxes/tamper.py)
sees and `--tampered zero` polices.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import secrets
import shutil
import struct
from pathlib import Path

log = logging.getLogger(__name__)

BASH = "bash"  # the kit's names
BUSYBOX = "busybox"
CANDIDATES = {
    BASH: ("/bin/bash-static", "/usr/bin/bash-static"),
    BUSYBOX: ("/bin/busybox", "/usr/bin/busybox"),
}
HINT = "apt-get install bash-static busybox-static (scripts/setup-images.sh does)"
_PT_INTERP = 3


def is_static(path: str) -> bool:
    """An x86-64/arm64 ELF executable with no program interpreter (no dynamic loader)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:5] != b"\x7fELF\x02" or head[5] != 1:  # 64-bit little-endian only
                return False
            (phoff,) = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except (OSError, struct.error, IndexError):
        return False
    types = (struct.unpack_from("<I", table, i * phentsize)[0] for i in range(phnum))
    return len(table) == phentsize * phnum and _PT_INTERP not in types


@functools.cache
def static_tools() -> dict[str, str] | None:
    """{kit name: host path} of the static tools, or None (with a warning) when one is missing."""
    found: dict[str, str] = {}
    for name, paths in CANDIDATES.items():
        path = next((p for p in paths if is_static(p)), None)
        if path is None:
            log.warning(
                "no static %s on this host: grading uses the image's tools (%s)", name, HINT
            )
            return None
        found[name] = os.path.realpath(path)
    return found


def fill(dest: Path) -> bool:
    """Copy the static tools into the new directory `dest` (mode 0555 each); False when
    the host has none (dest is then left without them)."""
    tools = static_tools()
    if tools is None:
        return False
    for name, path in tools.items():
        shutil.copyfile(path, dest / name)
        os.chmod(dest / name, 0o555)
    return True


def default_base() -> Path:
    """Where a provider without a runtime dir of its own keeps the kit: a cache only this
    user writes (root's is world-traversable, for an engine that runs as another uid)."""
    if os.geteuid() == 0:
        return Path("/var/cache/crucible")
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "crucible"


def kit_dir(base: Path) -> Path | None:
    """A directory of the kit under `base` (a host directory of crucible's own, made once
    per set of host binaries), or None when the host lacks them."""
    tools = static_tools()
    if tools is None:
        return None
    h = hashlib.sha256()
    for path in tools.values():
        st = os.stat(path)
        h.update(f"{path}:{st.st_mtime_ns}:{st.st_size};".encode())
    dest = base / f"gradekit-{h.hexdigest()[:16]}"
    if all((dest / name).is_file() for name in tools):
        return dest
    base.mkdir(parents=True, exist_ok=True, mode=0o755)
    tmp = dest.with_name(f"{dest.name}.tmp{os.getpid()}-{secrets.token_hex(4)}")
    tmp.mkdir(mode=0o755)
    fill(tmp)
    try:
        tmp.rename(dest)
    except OSError:  # made by another process meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
