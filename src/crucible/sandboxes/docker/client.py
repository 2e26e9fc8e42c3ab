"""What a Docker sandbox needs from its provider, handed over as one explicit object, and
what goes with it (`Companions`: a compose task's sidecars, see compose.py).

The engine connection is the provider's: `api()` is None until it connects
and again after it closes, so a sandbox of a closed provider sees that.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

from crucible.sandboxes.base import Sandbox


@dataclass(frozen=True)
class EngineClient:
    api: Callable[[], Any]  # docker's low-level APIClient, or None
    call: Callable[..., Awaitable[Any]]  # run a blocking SDK call on the provider's pool
    pool: Executor  # the provider's thread pool (exec streams pump on it)


class Companions(Protocol):
    """What lives and dies with a sandbox's container: a compose task's sidecars."""

    def service(self, name: str) -> Sandbox | None: ...

    async def down(self) -> None: ...
