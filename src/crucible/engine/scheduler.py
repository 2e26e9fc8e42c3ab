"""Which trial runs next: a global concurrency limit, per-resource pools,
fair interleaving across tasks, and retries that wait without holding a slot.

Workers ask `next()` for a trial; a trial whose pool is full is skipped, so a
queue of GPU trials never blocks CPU trials. A retry is parked with a
not-before time and holds no slot while it waits. Each event wakes one waiting
worker (a freed slot, a retry falling due), never the whole crowd: at
thousands of workers a broadcast per event would cost more than the trials.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import time
from collections import deque
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(order=True)
class _Delayed(Generic[T]):
    not_before: float
    seq: int
    pool: str = field(compare=False)
    item: T = field(compare=False)


def backoff_delay(retry: int, base: float = 1.0, cap: float = 60.0) -> float:
    """Exponential backoff with full jitter (retry counts from 1)."""
    return random.uniform(0, min(cap, base * 2 ** (retry - 1)))


class Scheduler(Generic[T]):
    def __init__(self, pool_limits: dict[str, int]) -> None:
        self.pool_limits = dict(pool_limits)
        self._ready: dict[str, deque[T]] = {p: deque() for p in pool_limits}
        self._delayed: list[_Delayed[T]] = []
        self._in_use: dict[str, int] = dict.fromkeys(pool_limits, 0)
        self._rr = itertools.cycle(sorted(pool_limits))
        self._seq = itertools.count()
        self._cond = asyncio.Condition()
        self._closed = False
        self._timers: set[asyncio.Future[None]] = set()
        self._handles: list[asyncio.TimerHandle] = []

    def add(self, pool: str, items: Iterable[T]) -> None:
        self._ready[pool].extend(items)

    @property
    def pending(self) -> int:
        return sum(len(q) for q in self._ready.values()) + len(self._delayed)

    @property
    def running(self) -> int:
        return sum(self._in_use.values())

    async def retry_later(self, pool: str, item: T, delay: float) -> None:
        """Park `item` for `delay` seconds; it holds no slot while it waits."""
        d = _Delayed(time.monotonic() + delay, next(self._seq), pool, item)
        async with self._cond:
            heapq.heappush(self._delayed, d)
        # One timer per parked item wakes one worker when it is due (no herd of waiters).
        loop = asyncio.get_running_loop()
        handle = loop.call_at(loop.time() + delay, lambda: self._spawn(self._due()))
        self._handles.append(handle)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    async def _due(self) -> None:
        async with self._cond:
            self._promote()
            self._cond.notify(1)

    async def release(self, pool: str) -> None:
        async with self._cond:
            self._in_use[pool] -= 1
            if self.running == 0 and self.pending == 0:
                self._cond.notify_all()  # the end: every waiting worker returns
            else:
                self._cond.notify(1)  # one slot freed: one worker may use it

    async def close(self) -> None:
        """Stop handing out work (cancel); waiting workers return None."""
        async with self._cond:
            self._closed = True
            for handle in self._handles:
                handle.cancel()
            self._cond.notify_all()

    def drain(self) -> list[T]:
        """Everything not yet started (after close)."""
        items = [i for q in self._ready.values() for i in q] + [d.item for d in self._delayed]
        for q in self._ready.values():
            q.clear()
        self._delayed.clear()
        return items

    def _promote(self) -> None:
        """Move due retries to the front of their ready queue."""
        now = time.monotonic()
        while self._delayed and self._delayed[0].not_before <= now:
            d = heapq.heappop(self._delayed)
            self._ready[d.pool].appendleft(d.item)

    def _take(self) -> tuple[str, T] | None:
        for _ in range(len(self.pool_limits)):
            pool = next(self._rr)
            if self._ready[pool] and self._in_use[pool] < self.pool_limits[pool]:
                self._in_use[pool] += 1
                return pool, self._ready[pool].popleft()
        return None

    async def next(self) -> tuple[str, T] | None:
        """The next trial and its pool (the caller must `release(pool)`), or None when done."""
        async with self._cond:
            while True:
                if self._closed:
                    return None
                self._promote()
                got = self._take()
                if got is not None:
                    return got
                if self.running == 0 and self.pending == 0:
                    return None
                await self._cond.wait()
