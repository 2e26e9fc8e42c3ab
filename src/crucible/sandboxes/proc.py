"""Host-side process plumbing shared by providers: capped output capture and
killing process trees through /proc (stop first, so nothing forks away)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
from collections.abc import Callable, Iterable

PR_SET_PDEATHSIG = 1


class CappedBuffer:
    """Keeps the first `cap` bytes fed to it and counts (then drops) the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = max(0, cap)
        self._buf = bytearray()
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        room = self.cap - len(self._buf)
        if room > 0:
            self._buf += data[:room]
        if len(data) > room:
            self.dropped += len(data) - max(room, 0)

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def getvalue(self) -> bytes:
        return bytes(self._buf)


async def read_capped(reader: asyncio.StreamReader, cap: int, chunk: int = 1 << 16) -> CappedBuffer:
    """Drain `reader` to EOF keeping at most `cap` bytes (so the writer never blocks)."""
    buf = CappedBuffer(cap)
    while True:
        data = await reader.read(chunk)
        if not data:
            return buf
        buf.feed(data)


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


# ---- /proc helpers ---------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def ppid_of(pid: int) -> int | None:
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    # comm may hold spaces and parentheses: fields start after the last ')'
    rest = stat[stat.rfind(")") + 2 :].split()
    return int(rest[1]) if len(rest) > 1 else None


def state_of(pid: int) -> str | None:
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    rest = stat[stat.rfind(")") + 2 :].split()
    return rest[0] if rest else None


def nspid_of(pid: int) -> list[int]:
    """The pid as seen from each nested pid namespace, outermost first."""
    status = _read(f"/proc/{pid}/status")
    if status is None:
        return []
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return [int(x) for x in line.split()[1:]]
    return []


def pid_ns_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def pids_in_ns(ns: str) -> list[int]:
    return [pid for pid in all_pids() if pid_ns_of(pid) == ns]


def descendants(root: int, candidates: Iterable[int]) -> set[int]:
    """Pids among `candidates` whose ppid chain reaches `root` (root excluded)."""
    parent = {pid: ppid_of(pid) for pid in candidates}
    found: set[int] = set()
    frontier = {root}
    while frontier:
        nxt = {pid for pid, pp in parent.items() if pp in frontier and pid not in found}
        found |= nxt
        frontier = nxt
    found.discard(root)
    return found


def signal_pids(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_tree(
    root: int, candidates: Callable[[], Iterable[int]] | None = None, *, rounds: int = 50
) -> None:
    """SIGSTOP the tree under (and including) `root` until it stops growing, then SIGKILL it.

    Stopping first matters: a process killed while forking leaves its child
    orphaned to the namespace init, outside any tree we could still walk.
    `candidates` narrows the /proc scan (a cgroup's procs, say); it is called
    again each round.
    """
    stopped: set[int] = set()
    for _ in range(rounds):
        cands = list(candidates()) if candidates is not None else all_pids()
        tree = descendants(root, cands) | {root}
        new = tree - stopped
        if not new:
            break
        signal_pids(new, signal.SIGSTOP)
        stopped |= new
    signal_pids(stopped, signal.SIGKILL)


def dies_with_parent(then: Callable[[], object] | None = None) -> Callable[[], None]:
    """A preexec_fn: the child is SIGKILLed when the thread that started it ends, a forced
    exit included (PR_SET_PDEATHSIG); `then` runs after. The kernel drops the setting when
    the child changes its ids (setpriv), so a child that does runs under a root process
    that keeps it (buildiso.run_build, builduser.as_user)."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent was gone before prctl took hold
            os._exit(1)
        if then is not None:
            then()

    return preexec
