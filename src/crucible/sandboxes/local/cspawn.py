"""posix_spawn through ctypes, which lets go of the GIL while the child starts.

`os.posix_spawn` holds the GIL for the whole call, and glibc's posix_spawn returns only
once the child has exec'd (a vfork: the parent waits for it). On a busy machine the
child waits for a CPU first, about a millisecond under a full load of trials, and every
thread of ours waited with it: the event loop stood still for 9% of a throughput run
(bench/local_throughput.py). Called through ctypes the same libc call runs without the
GIL, so a thread can spawn while the loop goes on (LocalSandbox._spawn).

The child runs only glibc's own code on a stack of its own (nothing of Python's), so
releasing the GIL around it is safe. File actions are (POSIX_SPAWN_DUP2, fd, to),
(POSIX_SPAWN_CLOSE, fd) or (POSIX_SPAWN_OPEN, fd, path, flags, mode), as for
os.posix_spawn; the signals in `setsigdef` start at their defaults.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_SETSIGDEF = 0x04  # POSIX_SPAWN_SETSIGDEF (spawn.h)
# glibc's posix_spawn_file_actions_t is 80 bytes and posix_spawnattr_t 336 on 64-bit
# Linux, sigset_t 128: the buffers are larger, and only the init functions fill them.
_ACTIONS_BYTES = 512
_ATTR_BYTES = 1024
_SIGSET_BYTES = 256


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # a CDLL call releases the GIL
        for name in (
            "posix_spawn", "posix_spawn_file_actions_init", "posix_spawn_file_actions_destroy",
            "posix_spawn_file_actions_adddup2", "posix_spawn_file_actions_addclose",
            "posix_spawn_file_actions_addopen", "posix_spawnattr_init",
            "posix_spawnattr_destroy", "posix_spawnattr_setflags",
            "posix_spawnattr_setsigdefault", "sigemptyset", "sigaddset",
        ):  # fmt: skip
            getattr(libc, name)
    except (OSError, AttributeError):
        return None
    return libc


def available() -> bool:
    return _libc() is not None


def _strings(items: Sequence[str | bytes]) -> Any:
    arr = (ctypes.c_char_p * (len(items) + 1))()
    for i, item in enumerate(items):
        arr[i] = os.fsencode(item)
    arr[len(items)] = None
    return arr


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise OSError(rc, f"{what}: {os.strerror(rc)}")


def posix_spawn(
    path: str,
    argv: Sequence[str],
    env: dict[str, str],
    file_actions: Sequence[tuple[Any, ...]] = (),
    setsigdef: Sequence[int] = (),
) -> int:
    """Like os.posix_spawn(path, argv, env, file_actions=..., setsigdef=...), without the
    GIL held while the child starts. OSError as os.posix_spawn raises it."""
    libc = _libc()
    if libc is None:
        return os.posix_spawn(
            path, list(argv), env, file_actions=file_actions, setsigdef=setsigdef
        )
    actions = ctypes.create_string_buffer(_ACTIONS_BYTES)
    attr = ctypes.create_string_buffer(_ATTR_BYTES)
    sigs = ctypes.create_string_buffer(_SIGSET_BYTES)
    keep: list[bytes] = []  # the paths of OPEN actions live until the call returns
    _check(libc.posix_spawn_file_actions_init(actions), "posix_spawn_file_actions_init")
    try:
        _check(libc.posix_spawnattr_init(attr), "posix_spawnattr_init")
        try:
            for act in file_actions:
                if act[0] == os.POSIX_SPAWN_DUP2:
                    rc = libc.posix_spawn_file_actions_adddup2(actions, act[1], act[2])
                elif act[0] == os.POSIX_SPAWN_CLOSE:
                    rc = libc.posix_spawn_file_actions_addclose(actions, act[1])
                elif act[0] == os.POSIX_SPAWN_OPEN:
                    keep.append(os.fsencode(act[2]))
                    rc = libc.posix_spawn_file_actions_addopen(
                        actions, act[1], keep[-1], act[3], act[4]
                    )
                else:
                    raise ValueError(f"unknown file action {act!r}")
                _check(rc, "posix_spawn file action")
            if setsigdef:
                libc.sigemptyset(sigs)
                for sig in setsigdef:
                    if libc.sigaddset(sigs, int(sig)) != 0:
                        _check(ctypes.get_errno(), f"sigaddset({int(sig)})")
                _check(libc.posix_spawnattr_setsigdefault(attr, sigs), "setsigdefault")
                _check(libc.posix_spawnattr_setflags(attr, _SETSIGDEF), "setflags")
            pid = ctypes.c_int(0)
            envp = _strings([f"{k}={v}" for k, v in env.items()])
            rc = libc.posix_spawn(
                ctypes.byref(pid), os.fsencode(path), actions, attr, _strings(argv), envp
            )
            if rc != 0:
                raise OSError(rc, os.strerror(rc), path)
            return pid.value
        finally:
            libc.posix_spawnattr_destroy(attr)
    finally:
        libc.posix_spawn_file_actions_destroy(actions)


# Spawns that leave fds inheritable for a moment (usernet's slirp4netns), no_stray_fds
# (which makes every fd close-on-exec) and the spawns that follow it take turns: a
# child spawned from one thread never inherits what another made inheritable for its
# own child. Re-entrant: hostuid.spawn takes it too.
LOCK = threading.RLock()
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crucible-spawn")


async def off_loop(fn: Callable[[], T]) -> T:
    """fn() in the spawning thread, while the event loop goes on. Waited for to its end
    even when the caller is cancelled (fn uses fds the caller closes after, and what it
    started must be known to be cleaned up); the cancellation is raised after."""
    fut = asyncio.get_running_loop().run_in_executor(_SPAWNER, fn)
    cancelled = False
    while not fut.done():
        try:
            await asyncio.wait([fut])
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not fut.cancelled():
            fut.exception()  # retrieved: the cancellation is what the caller gets
        raise asyncio.CancelledError
    return fut.result()
