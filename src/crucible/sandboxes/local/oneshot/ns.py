"""Starting a one-shot sandbox's bwrap (oneshot/run.py) from a thread of its own, with host
folders the run's uid cannot reach staged through a private mount namespace.

bwrap runs as the run's unprivileged uid (hostuid.py), so it can bind only what that
uid can walk to. For a folder it cannot (crucible's Python under /root, 0700), this
thread unshares its mount namespace (a thread may: CLONE_NEWNS implies only CLONE_FS),
makes every mount private (nothing propagates back to the host), bind-mounts the folder
read-only on an empty staging folder the uid can reach, and spawns bwrap, which copies
that namespace. The host's mount table never changes; the binds go when the last
process in the namespace does.

The thread lives until release(): bwrap's --die-with-parent (PR_SET_PDEATHSIG) fires
when the *thread* that spawned it exits, not the process, so a spawning thread that
returned at once would SIGKILL the sandbox at a random moment.
"""

from __future__ import annotations

import ctypes
import os
import threading

from crucible.sandboxes.local import hostuid

# unshare(2) and mount(2) flags
_CLONE_NEWNS = 0x20000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT = 1, 2, 4, 32
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18


def _libc_call(name: str, *args: object) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _mount(src: str | None, dst: str, flags: int) -> None:
    source = src.encode() if src is not None else None
    _libc_call("mount", source, dst.encode(), None, ctypes.c_ulong(flags), None)


class Spawner:
    """One bwrap start: `binds` are (host folder, staging folder) pairs to stage first."""

    def __init__(self, binds: list[tuple[str, str]]) -> None:
        self.binds = binds
        self._started = threading.Event()
        self._done = threading.Event()
        self._pid = 0
        self._error: BaseException | None = None

    def _run(
        self, argv: list[str], owner: hostuid.Owner, actions: list[tuple[int, int, int]]
    ) -> None:
        try:
            if self.binds:
                _libc_call("unshare", _CLONE_NEWNS)
                _mount(None, "/", _MS_REC | _MS_PRIVATE)
                ro = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
                for src, stage in self.binds:
                    _mount(src, stage, _MS_BIND | _MS_REC)
                    _mount(None, stage, ro)
            self._pid = hostuid.spawn(argv[0], argv, owner, actions)
        except BaseException as exc:
            self._error = exc
            self._started.set()
            return
        self._started.set()
        self._done.wait()  # bwrap's parent: alive until the run is over

    def spawn(
        self, argv: list[str], owner: hostuid.Owner, actions: list[tuple[int, int, int]]
    ) -> int:
        """bwrap's pid (blocking: call from a worker thread). OSError when it cannot start."""
        t = threading.Thread(target=self._run, args=(argv, owner, actions), daemon=True,
                             name="oneshot-spawn")  # fmt: skip
        t.start()
        self._started.wait()
        if self._error is not None:
            raise self._error
        return self._pid

    def release(self) -> None:
        self._done.set()
