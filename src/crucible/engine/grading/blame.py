"""Whose fault it is when grading breaks.

Once the agent phase is over, anything that breaks grading in a sandbox that is still
alive is the attempt's (it may have caused it: a full disk, a deleted workdir, a fork
bomb, a broken loader, a /tests too deep to reset), so it is a counted verifier_failed,
never a retried gap. So is a sandbox its own processes ended
(`Sandbox.ended_by_contents`: the agent killed the container's keeper or its
entrypoint, or filled its memory): from the agent phase on, that is the attempt's doing.
Only a sandbox lost to the infrastructure is sandbox_failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from crucible.errors import Cancelled, CrucibleError, SandboxFailed, TaskInvalid, VerifierFailed
from crucible.sandboxes.base import Sandbox

T = TypeVar("T")


async def shielded(aw: Awaitable[T]) -> T:
    """Run cleanup (a sandbox's close) to completion even when the trial is being cancelled."""
    task = asyncio.ensure_future(aw)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


async def blamed(sandbox: Sandbox, work: Awaitable[T]) -> T:
    """`work` (grading in the sandbox), its failures attributed by blame."""
    try:
        return await work
    except (VerifierFailed, TaskInvalid, Cancelled):
        raise
    except Exception as exc:
        if await sandbox.alive():
            what = exc.message if isinstance(exc, CrucibleError) else f"{type(exc).__name__}: {exc}"
            raise VerifierFailed(f"grading failed in a live sandbox: {what}"[:1000]) from exc
        ended = await ended_by_attempt(sandbox, exc)
        if ended is not None:
            raise ended from exc
        if isinstance(exc, SandboxFailed):
            raise
        raise SandboxFailed(f"the sandbox was lost during grading: {exc}") from exc


async def ended_by_attempt(sandbox: Sandbox, exc: BaseException) -> VerifierFailed | None:
    """The attempt's failure when `exc` came from a sandbox its own processes ended
    (from the agent phase on, the agent could have), else None (a loss to blame on
    the infrastructure)."""
    # The sandbox's life (its provider's timeout) ran out while the attempt used it.
    how = sandbox.lifetime_ended
    if how is None and not isinstance(exc, SandboxFailed) and isinstance(exc, CrucibleError):
        return None  # a verdict of its own kind (resources, model, task): kept
    how = how or await sandbox.ended_by_contents()
    if how is None:
        return None
    return VerifierFailed(
        f"the sandbox ended during the attempt ({how}); what runs in it could end it, "
        f"so it counts against the attempt: {exc}"[:1000]
    )
