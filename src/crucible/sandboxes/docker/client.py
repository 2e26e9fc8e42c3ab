"""What a Docker sandbox needs from its provider, handed over as one explicit object, and
what goes with it (`Companions`: a compose task's sidecars, see compose.py).

The engine connection is the provider's: `api()` is None until it connects
and again after it closes, so a sandbox of a closed provider sees that.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

from crucible.sandboxes.base import Sandbox

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineClient:
    api: Callable[[], Any]  # docker's low-level APIClient, or None
    call: Callable[..., Awaitable[Any]]  # run a blocking SDK call on the provider's pool
    pool: Executor  # the provider's thread pool (exec streams pump on it)


class Companions(Protocol):
    """What lives and dies with a sandbox's container: a compose task's sidecars."""

    def service(self, name: str) -> Sandbox | None: ...

    async def down(self) -> None: ...


# How long a removal that another caller started may take before it is given up on.
REMOVAL_WAIT_SEC = 120.0
_REMOVAL_POLL_SEC = 0.1


def in_progress(exc: Exception) -> bool:
    """The engine's 409 when the object is already being removed (by a concurrent close,
    `sandboxes cleanup`, or the engine itself): the removal is under way, not refused."""
    return getattr(exc, "status_code", None) == 409 and "in progress" in str(exc).lower()


async def remove_container(call: Callable[..., Awaitable[Any]], api: Any, cid: str) -> bool:
    """Force-remove a container with its anonymous volumes and return once it is gone:
    True when it was found. A removal already in progress is waited for (and tried
    again should it fail), so what comes after (the network's removal) finds the
    container gone. Other engine errors go to the caller."""
    import docker

    deadline = time.monotonic() + REMOVAL_WAIT_SEC
    found = False
    while True:
        try:
            await call(api.remove_container, cid, force=True, v=True)
            return True
        except docker.errors.NotFound:
            return found
        except docker.errors.APIError as e:
            if not in_progress(e) or time.monotonic() > deadline:
                raise
            found = True
        log.debug("removal of container %s already in progress: waiting for it", cid)
        await asyncio.sleep(_REMOVAL_POLL_SEC)
