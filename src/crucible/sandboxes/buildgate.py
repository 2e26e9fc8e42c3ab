"""One limit on a job's image builds at once, shared by its provider's image caches, and
the switch that stops them when the job is cancelled.

The engine gives each job's provider one gate (`Provider.build_gate`, `--max-builds`,
default half the cores, at least 1) before prepare(). A build runs inside `BuildGate.run`:
it waits for a slot, refuses to start once the gate is closed, and is cancelled (its
process killed by the tool's own cancellation path) when the gate closes while it runs.
Both refusals are `Cancelled`, never the task's fault, so nothing remembers them.

Each build also gets stamps in its log (`# build started`/`# build ended`, a monotonic
count of nanoseconds): how many builds ran at once can be read from the logs afterwards.

A remote provider (modal) builds on the remote side: its image builds are bounded by that
side, and the gate only bounds how many it waits on at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from crucible.errors import Cancelled

T = TypeVar("T")

START_STAMP = "# build started"
END_STAMP = "# build ended"


def default_build_limit() -> int:
    """Half this machine's cores, at least one."""
    return max(1, (os.cpu_count() or 2) // 2)


class BuildGate:
    """At most `limit` builds at once; `close()` refuses new ones and cancels running ones."""

    def __init__(self, limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"the build limit must be at least 1, got {limit}")
        self.limit = limit or default_build_limit()
        self._slots = asyncio.Semaphore(self.limit)
        self._running: set[asyncio.Task[object]] = set()
        self.closed = False
        self.active = 0
        self.peak = 0  # the most builds that ran at once

    def _refuse(self, what: str) -> None:
        if self.closed:
            raise Cancelled(f"the job was cancelled: the build of {what} did not start")

    async def run(self, what: str, build: Callable[[], Awaitable[T]], log: Path | None = None) -> T:
        """Run `build()` in a slot; its log, when given, gets the start and end stamps."""
        self._refuse(what)
        async with self._slots:
            self._refuse(what)
            task: asyncio.Task[T] = asyncio.ensure_future(build())
            self._running.add(task)  # type: ignore[arg-type]
            self.active += 1
            self.peak = max(self.peak, self.active)
            _stamp(log, START_STAMP)
            try:
                return await task
            except asyncio.CancelledError:
                if task.cancelled() and self.closed and not cancelling():
                    raise Cancelled(
                        f"the job was cancelled: the build of {what} was stopped"
                    ) from None
                raise
            finally:
                if not task.done():  # our caller was cancelled: the build goes with it
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                self.active -= 1
                self._running.discard(task)  # type: ignore[arg-type]
                _stamp(log, END_STAMP)

    def close(self) -> None:
        """No build starts from now on, and the running ones are cancelled."""
        self.closed = True
        for task in list(self._running):
            task.cancel()

    async def drained(self) -> None:
        """Wait until no build runs: a stopped one has killed its processes and removed
        its containers (never cancels them itself)."""
        while pending := [t for t in self._running if not t.done()]:
            await asyncio.wait(pending)


def own_gate() -> Callable[[], BuildGate]:
    """The getter of a gate of its own, for an image cache used outside a job; the
    provider gives it the job's (`Provider.build_gate`)."""
    gate = BuildGate()
    return lambda: gate


def cancelling() -> bool:
    """Whether the current task itself is being cancelled (not only the build it awaits)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _stamp(log: Path | None, what: str) -> None:
    if log is None:
        return
    try:
        with log.open("a") as fh:
            fh.write(f"{what} {time.monotonic_ns()}\n")
    except OSError:
        pass
