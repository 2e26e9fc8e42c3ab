"""Warm pools: sandboxes started ahead of the grade or session that will use them.

`PooledProvider(inner, size)` is a Provider that keeps `size` sandboxes of each
distinct spec started and idle. `create(spec)` hands one out (never the same one
twice: it leaves the pool as it is handed out) and starts its replacement in the
background; with none ready it makes one as `inner` would, and fills the pool behind
it. A pooled sandbox is exactly as fresh as a new one: it is made by `inner.create`
from the same spec and nothing runs in it before it is handed out; a sandbox that
served a trial is closed as ever (close() is the inner sandbox's own) and never
comes back.

Two specs are the same when they differ only in `trial_id`, which names the trial
(docker's container name and label, modal's tag) and nothing of the environment.
A pooled sandbox is made under the requester's job id, so a cleanup by job id
(labels, slot names) finds it like any other; its trial id is "warm-pool-<random>"
(its own, as docker's cleanup counts sandboxes by trial label) until it is handed out,
when its `spec` becomes the requester's. Pooled sandboxes are closed
on aclose(). They are started beyond the service's concurrency budget (-c): that
budget counts sandboxes in use, the pool holds `size` more per spec.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections import deque
from pathlib import Path

from crucible.sandboxes.base import Provider, ProviderCapabilities, Sandbox, SandboxSpec
from crucible.sandboxes.buildgate import BuildGate
from crucible.sandboxes.ratelimit import StartGate

log = logging.getLogger(__name__)

POOL_TRIAL_ID = "warm-pool"


def pool_key(spec: SandboxSpec) -> str:
    """What makes two sandboxes interchangeable: the spec but for its trial id."""
    data = spec.model_dump(mode="json", exclude={"trial_id"})
    data["host_env"] = dict(spec.host_env)  # excluded from dumps, still part of the sandbox
    return json.dumps(data, sort_keys=True)


class PooledProvider(Provider):
    def __init__(self, inner: Provider, size: int, *, gate: StartGate | None = None) -> None:
        if size < 0:
            raise ValueError("a pool's size is 0 or more")
        self.inner = inner
        self.size = size
        self.gate = gate
        self.name = inner.name
        self.default_concurrency = inner.default_concurrency
        self.max_concurrency = inner.max_concurrency
        self._ready: dict[str, deque[Sandbox]] = {}
        self._filling: dict[str, int] = {}
        self._specs: dict[str, SandboxSpec] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.hits = 0  # creates answered from the pool
        self.misses = 0  # creates that made their sandbox themselves
        self.last_error: str | None = None  # the last background start that failed

    # ---- the inner provider's ------------------------------------------------------

    @property  # type: ignore[override]
    def log_dir(self) -> Path | None:
        return self.inner.log_dir

    @log_dir.setter
    def log_dir(self, value: Path | None) -> None:
        self.inner.log_dir = value

    @property
    def build_gate(self) -> BuildGate:
        return self.inner.build_gate

    @build_gate.setter
    def build_gate(self, gate: BuildGate) -> None:
        self.inner.build_gate = gate

    async def preflight(self) -> None:
        await self.inner.preflight()

    def capabilities(self) -> ProviderCapabilities:
        return self.inner.capabilities()

    async def cleanup(self, job_id: str | None = None) -> int:
        return await self.inner.cleanup(job_id)

    async def prepare(self, specs: list[SandboxSpec]) -> None:
        """The inner provider's preparation, then each spec's pool starts filling."""
        await self.inner.prepare(specs)
        for spec in specs:
            self.warm(spec)

    # ---- the pool ------------------------------------------------------------------

    def ready(self, spec: SandboxSpec) -> int:
        """How many sandboxes of `spec` wait in the pool now."""
        return len(self._ready.get(pool_key(spec), ()))

    @property
    def idle(self) -> int:
        """How many sandboxes wait in the pool now, of every spec."""
        return sum(len(q) for q in self._ready.values())

    def warm(self, spec: SandboxSpec) -> None:
        """Start filling `spec`'s pool (up to `size`), in the background."""
        key = pool_key(spec)
        self._specs.setdefault(key, spec.model_copy(update={"trial_id": POOL_TRIAL_ID}))
        self._refill(key)

    async def create(self, spec: SandboxSpec) -> Sandbox:
        if self.size == 0 or self._closed:
            return await self.inner.create(spec)
        key = pool_key(spec)
        self._specs.setdefault(key, spec.model_copy(update={"trial_id": POOL_TRIAL_ID}))
        queue = self._ready.get(key)
        box = queue.popleft() if queue else None  # no await between the look and the take
        self._refill(key)
        if box is None:
            self.misses += 1
            return await self.inner.create(spec)
        self.hits += 1
        box.spec = spec
        return box

    def _refill(self, key: str) -> None:
        want = self.size - len(self._ready.get(key, ())) - self._filling.get(key, 0)
        for _ in range(max(0, want)):
            self._filling[key] = self._filling.get(key, 0) + 1
            task = asyncio.create_task(self._fill_one(key), name="warm pool")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _fill_one(self, key: str) -> None:
        try:
            spec = self._specs[key].model_copy(
                update={"trial_id": f"{POOL_TRIAL_ID}-{secrets.token_hex(4)}"}
            )
            if self.gate is None:
                box = await self.inner.create(spec)
            else:
                async with self.gate.starting():
                    box = await self.inner.create(spec)
        except Exception as exc:  # the next create tries again; its own create reports
            self.last_error = f"{type(exc).__name__}: {exc}"[:500]
            log.warning("warm pool: a sandbox did not start: %s", self.last_error)
            return
        finally:
            self._filling[key] -= 1
        if self._closed:
            await box.close()
            return
        self._ready.setdefault(key, deque()).append(box)

    async def aclose(self) -> None:
        """Close every pooled sandbox (and stop filling), then the inner provider."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        boxes = [b for q in self._ready.values() for b in q]
        self._ready.clear()
        for box in boxes:
            with contextlib.suppress(Exception):
                await box.close()
        await self.inner.aclose()
