"""Container pools: worker processes that run one function's inputs, as Modal containers do.

A pool belongs to one function (one class and parameter set for a Cls). It starts at
most `max_containers` workers, each taking up to `max_inputs` inputs at a time
(@modal.concurrent), and reuses them, so state a function leaves in its own globals
persists between inputs of one container, never into the caller. Requests and replies
are pickles over the worker's stdin/stdout; the worker's own prints go to the
caller's stdout, as `modal run` streams container logs.

Workers are started from one thread that lives as long as the process (the spawner): a
worker dies with the thread that started it (PR_SET_PDEATHSIG, worker.py, is per
thread), and the threads that call functions end early: a web request's handler, an
executor's thread. Started from those, a container would be killed under the next input.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import queue
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from crucible.modalrt import wire
from crucible.modalrt.context import ENV_VAR, WORKER_VAR, config
from crucible.modalrt.mounts import wrap_with_mounts
from crucible.modalrt.sdk.exception import DeserializationError
from crucible.modalrt.spec import Resources

STDOUT_FD_VAR = "CRUCIBLE_MODALRT_STDOUT_FD"
MAX_INPUTS_VAR = "CRUCIBLE_MODALRT_MAX_INPUTS"
GPU_VAR = "CRUCIBLE_MODALRT_GPU"


class WorkerLost(Exception):
    """The worker process ended while inputs were in flight."""


class Worker:
    def __init__(self, resources: Resources) -> None:
        self.inflight = 0
        self._ids = itertools.count()
        self._pending: dict[int, Future[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        out_fd = os.dup(sys.stdout.fileno())
        os.set_inheritable(out_fd, True)
        env = {
            **os.environ,
            ENV_VAR: config().model_dump_json(),
            WORKER_VAR: "1",
            STDOUT_FD_VAR: str(out_fd),
            MAX_INPUTS_VAR: str(resources.max_inputs),
            "PYTHONUNBUFFERED": "1",
            GPU_VAR: resources.gpu or "",
            **dict(resources.env),
        }
        argv = [sys.executable, "-m", "crucible.modalrt.worker"]
        try:
            self.proc = subprocess.Popen(
                wrap_with_mounts(argv, resources.volumes),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                pass_fds=(out_fd,),
            )
        finally:
            os.close(out_fd)
        self.pid = self.proc.pid
        threading.Thread(target=self._read, daemon=True).start()

    def send(self, request: dict[str, Any]) -> Future[dict[str, Any]]:
        fut: Future[dict[str, Any]] = Future()
        assert self.proc.stdin is not None
        with self._lock:
            rid = next(self._ids)
            self._pending[rid] = fut
            try:
                wire.send(self.proc.stdin, {**request, "id": rid})
            except (BrokenPipeError, OSError) as exc:
                self._pending.pop(rid, None)
                fut.set_exception(WorkerLost(f"worker {self.pid} is gone: {exc}"))
        return fut

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while True:
            try:
                rid, blob = wire.recv(self.proc.stdout)  # (id, reply pickle): always readable
            except Exception:  # EOF, or a stream no longer in step
                break
            try:
                reply = wire.loads(blob)
            except Exception as exc:  # e.g. a result whose class does not import here
                reply = {"ok": False, "error": DeserializationError(f"the result: {exc!r}")}
            with self._lock:
                fut = self._pending.pop(rid, None)
            if fut is not None:
                fut.set_result(reply)
        self.kill()  # a stream out of step leaves the worker useless
        code = self.proc.wait()
        with self._lock:
            lost, self._pending = list(self._pending.values()), {}
        for fut in lost:
            fut.set_exception(WorkerLost(f"the container (pid {self.pid}) exited with code {code}"))

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout: float = 30) -> None:
        """Ask the worker to finish (its @exit hooks run), then make sure it has."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class _Spawner:
    """Starts workers from its own daemon thread, which never ends before the process."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Resources, Future[Worker]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, resources: Resources) -> Worker:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():  # none yet, or forked
                self._thread = threading.Thread(
                    target=self._run, name="modalrt-spawner", daemon=True
                )
                self._thread.start()
        fut: Future[Worker] = Future()
        self._jobs.put((resources, fut))
        return fut.result()

    def _run(self) -> None:
        while True:
            resources, fut = self._jobs.get()
            try:
                fut.set_result(Worker(resources))
            except BaseException as exc:  # handed to the caller, as if it had started it
                fut.set_exception(exc)


_SPAWNER = _Spawner()


OnStart = Callable[[Worker], None]


class Pool:
    """Inputs wait here, never in the caller: `submit` returns at once (so `.spawn` and
    `.spawn_map` never block, as on Modal), and each input goes to a container as one
    has room, a new container being started while there are fewer than the limit."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
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
            worker = _SPAWNER.start(self.resources)
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


def pool_for(key: tuple[Any, ...], resources: Resources) -> Pool:
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = Pool(resources)
        return pool


@atexit.register
def close_pools() -> None:
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()
