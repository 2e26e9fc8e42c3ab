"""One live `local` sandbox for the attack tests on its pid 1 and its sweep."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local.provider import LocalProvider, LocalSandbox


@contextlib.asynccontextmanager
async def local_box(prefix: str) -> AsyncIterator[LocalSandbox]:
    """A sandbox of a fresh provider (256 MiB, 128 pids), closed with it afterwards."""
    p = LocalProvider()
    await p.preflight()
    sb = await p.create(
        SandboxSpec(job_id=f"{prefix}-{uuid.uuid4().hex[:8]}", memory_mb=256, pids_limit=128)
    )
    assert isinstance(sb, LocalSandbox)
    try:
        yield sb
    finally:
        await sb.close()
        await p.aclose()
