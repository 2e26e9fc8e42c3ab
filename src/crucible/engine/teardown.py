"""Sandboxes closed behind the trials of a job.

Closing a sandbox is mostly waiting: pid 1 killed, then its namespace emptied and
bwrap reaped (local), or the container removed (docker). Nothing of the trial's
needs that wait: every process in it was killed before its files were collected.
So a job's trial hands its sandbox to `Teardown.close`, which starts the close at
once (the kill goes out at the next turn of the event loop) and returns; the
trial's record is written and its place in the job's concurrency freed while the
close finishes. At most `limit` closes are pending; a trial that would go past
that waits for the oldest to finish. The job drains what is pending before it
reports, cancelled or not, so no sandbox outlives its job.
"""

from __future__ import annotations

import asyncio
import logging

from crucible.sandboxes.base import Sandbox

log = logging.getLogger(__name__)


class Teardown:
    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._pending: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def close(self, sandbox: Sandbox) -> None:
        """Start closing `sandbox` (after the oldest pending close, when `limit` are); a
        cancellation while waiting still starts it."""
        try:
            while len(self._pending) >= self.limit:
                await asyncio.wait(set(self._pending), return_when=asyncio.FIRST_COMPLETED)
        finally:
            task = asyncio.create_task(_close(sandbox))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def drain(self) -> None:
        """Wait for every pending close, even when the caller is being cancelled."""
        while self._pending:
            waiting = asyncio.gather(*self._pending, return_exceptions=True)
            try:
                await asyncio.shield(waiting)
            except asyncio.CancelledError:
                await waiting
                raise


async def _close(sandbox: Sandbox) -> None:
    try:
        await sandbox.close()
    except Exception as exc:  # close never raises by contract; a broken provider logs
        log.warning("closing a sandbox failed: %s", exc)
