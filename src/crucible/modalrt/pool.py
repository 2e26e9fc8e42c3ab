"""Container pools: worker processes that run one function's inputs, as Modal containers do.

A pool belongs to one function (one class and parameter set for a Cls). It starts at
most `max_containers` workers, each taking up to `max_inputs` inputs at a time
(@modal.concurrent), and reuses them, so state a function leaves in its own globals
persists between inputs of one container, never into the caller. The workers are
started by the dispatching side (broker.py), and every input and reply passes through
it (link.py); the worker's own prints go to the caller's stdout, as `modal run` streams
container logs.
"""

from __future__ import annotations

import atexit
import functools
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from crucible.modalrt.context import config
from crucible.modalrt.link import Worker, WorkerLost
from crucible.modalrt.spec import Resources

__all__ = ["OnStart", "Pool", "Worker", "WorkerLost", "close_pools", "pool_for"]

OnStart = Callable[[Worker], None]


class Pool:
    """Inputs wait here, never in the caller: `submit` returns at once (so `.spawn` and
    `.spawn_map` never block, as on Modal), and each input goes to a container as one
    has room, a new container being started while there are fewer than the limit."""

    def __init__(self, resources: Resources, tag: str = "", cls: bool = False) -> None:
        self.resources = resources
        self.tag, self.cls = tag, cls
        self.limit = max(1, resources.max_containers or config().max_containers)
        self.workers: list[Worker] = []
        self._waiting: deque[tuple[dict[str, Any], Future[dict[str, Any]], OnStart]] = deque()
        self._lock = threading.Lock()

    def submit(self, request: dict[str, Any], on_start: OnStart) -> Future[dict[str, Any]]:
        """Queue one input; `on_start(worker)` runs when a container takes it."""
        out: Future[dict[str, Any]] = Future()
        with self._lock:
            self._waiting.append((request, out, on_start))
        self._pump()
        return out

    def _free_worker(self) -> Worker | None:
        self.workers = [w for w in self.workers if w.alive]
        free = [w for w in self.workers if w.inflight < self.resources.max_inputs]
        if free:
            return min(free, key=lambda w: w.inflight)
        if len(self.workers) < self.limit:
            worker = Worker(self.tag, self.cls, self.resources)
            self.workers.append(worker)
            return worker
        return None

    def _pump(self) -> None:
        while True:
            with self._lock:
                if not self._waiting:
                    return
                worker = self._free_worker()
                if worker is None:
                    return
                request, out, on_start = self._waiting.popleft()
                worker.inflight += 1
            on_start(worker)
            sent = worker.send(request)
            sent.add_done_callback(functools.partial(self._done, worker, out))

    def _done(
        self, worker: Worker, out: Future[dict[str, Any]], sent: Future[dict[str, Any]]
    ) -> None:
        with self._lock:
            worker.inflight -= 1
        exc = sent.exception()
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(sent.result())
        self._pump()

    def close(self) -> None:
        with self._lock:
            workers, self.workers = self.workers, []
            waiting, self._waiting = list(self._waiting), deque()
        for _, out, _ in waiting:
            out.set_exception(WorkerLost("the program ended before this input started"))
        for w in workers:
            w.close()


_POOLS: dict[tuple[Any, ...], Pool] = {}
_POOLS_LOCK = threading.Lock()


def pool_for(key: tuple[Any, ...], resources: Resources, tag: str = "", cls: bool = False) -> Pool:
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = Pool(resources, tag, cls)
        return pool


@atexit.register
def close_pools() -> None:
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()
