"""Pacing for calls to a rate-limited backend: a creation rate limiter that is
never above its rate over any sliding window, a cap on operations still in
flight ("still starting"), and retries with exponential backoff and jitter.

Provider-agnostic: the modal provider uses it for `Sandbox.create`, and the
scheduler may reuse it for any other API with a documented request rate.
"""

from __future__ import annotations

import asyncio
import collections
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# Grants sit this far past the window edge, so that a caller whose call lands
# a little after its grant (a preempted thread, a GC pause between the grant
# and the request) still makes at most `rate` calls in any window. Costs 2%
# of throughput: the limiter runs at rate / 1.02.
_WINDOW_MARGIN_SEC = 0.02


class RateLimiter:
    """At most `rate` grants per second (floor(rate * window) in any `window`-second
    sliding window), spread evenly.

    Two rules, both enforced on the actual grant times:
    - pacing: grant k is not before a theoretical time that advances by
      window/rate per grant (so the rate does not burst, and sleep overshoot
      does not accumulate into a lower achieved rate);
    - window: grant k is at least `window` (plus a margin) after grant
      k - floor(rate), which makes "never above the rate" a hard property
      rather than a consequence of timing.
    """

    def __init__(
        self,
        rate: float,
        *,
        window: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"rate must be a positive number, got {rate!r}")
        if window <= 0:
            raise ValueError(f"window must be positive, got {window!r}")
        self.rate = float(rate)
        self.window = float(window)
        self._interval = 1.0 / rate
        self._cap = max(1, math.floor(rate * window))
        self._clock = clock
        self._log: collections.deque[float] = collections.deque(maxlen=self._cap)
        self._tat: float | None = None  # theoretical time of the next grant
        self._lock = asyncio.Lock()
        self.granted = 0

    def _earliest(self) -> float:
        earliest = -math.inf if self._tat is None else self._tat
        if len(self._log) == self._cap:
            earliest = max(earliest, self._log[0] + self.window + _WINDOW_MARGIN_SEC)
        return earliest

    async def acquire(self) -> float:
        """Wait for a grant; return its time (on this limiter's clock)."""
        async with self._lock:
            while True:
                now = self._clock()
                wait = self._earliest() - now
                if wait <= 0:
                    break
                await asyncio.sleep(wait)
            self._log.append(now)
            # Advance from the theoretical time, not from `now`, so a late
            # wake-up is caught up on the next grant (within the window rule);
            # after an idle spell, restart from now instead of banking a burst.
            base = now if self._tat is None else max(self._tat, now - self._interval)
            self._tat = base + self._interval
            self.granted += 1
            return now


class StartGate:
    """A creation rate limit plus a cap on operations still starting.

    `async with gate.starting():` holds one of `max_starting` slots for the
    duration of the block and takes one rate-limit grant on entry. The slot
    is taken first so a grant is never spent while queued behind the cap.
    """

    def __init__(
        self,
        rate: float,
        max_starting: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_starting < 1:
            raise ValueError(f"max_starting must be >= 1, got {max_starting!r}")
        self.limiter = RateLimiter(rate, clock=clock)
        self.max_starting = max_starting
        self._slots = asyncio.Semaphore(max_starting)
        self.in_flight = 0
        self.peak_in_flight = 0

    @asynccontextmanager
    async def starting(self) -> AsyncIterator[float]:
        async with self._slots:
            granted_at = await self.limiter.acquire()
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            try:
                yield granted_at
            finally:
                self.in_flight -= 1


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter: attempt k waits U(0, min(cap, base*factor^k))."""

    attempts: int = 6  # total tries, the first included
    base: float = 0.5
    factor: float = 2.0
    cap: float = 30.0
    jitter: bool = True

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The waits between tries: `attempts - 1` of them."""
        r = rng or random
        for k in range(max(0, self.attempts - 1)):
            ceiling = min(self.cap, self.base * self.factor**k)
            yield r.uniform(0, ceiling) if self.jitter else ceiling


class RetriesExhausted(Exception):
    """Every try failed with a retryable error; `last` is the final one."""

    def __init__(self, attempts: int, last: BaseException) -> None:
        super().__init__(f"gave up after {attempts} attempts: {last}")
        self.attempts = attempts
        self.last = last


async def retry(
    fn: Callable[[], Awaitable[T]],
    *,
    retryable: Callable[[BaseException], bool],
    backoff: Backoff,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Call `fn` until it succeeds, a non-retryable error escapes, or tries run out.

    The wait happens outside `fn`, so whatever `fn` holds (a start slot) is
    released while waiting.
    """
    delays = backoff.delays()
    attempt = 0
    while True:
        attempt += 1
        try:
            return await fn()
        except Exception as exc:
            if not retryable(exc):
                raise
            delay = next(delays, None)
            if delay is None:
                raise RetriesExhausted(attempt, exc) from exc
            if on_retry is not None:
                on_retry(attempt, exc, delay)
            await sleep(delay)
