"""One input's trip to a container and back: retries, the timeout, the trace event, and
the remote exception raised again in the caller with the remote traceback attached.
@modal.batched inputs are grouped here, before they reach the worker.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from crucible.modalrt import wire
from crucible.modalrt.pool import Pool, Worker, WorkerLost, pool_for
from crucible.modalrt.sdk.exception import FunctionTimeoutError, RemoteError
from crucible.modalrt.spec import Resources

_KEYS = itertools.count(1)
NEEDS_GPU: list[tuple[str, str]] = []  # (function, error): inputs that failed for want of CUDA


@dataclass(frozen=True)
class Target:
    """What a request runs: a function, or a method of a Cls with its parameters."""

    tag: str
    resources: Resources
    method: str | None = None
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def name(self) -> str:
        return f"{self.tag}.{self.method}" if self.method else self.tag

    def pool(self) -> Pool:
        key = (self.tag, wire.dumps(self.params), self.resources)
        return pool_for(key, self.resources, self.tag, self.method is not None)

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        return {
            "op": op,
            "key": next(_KEYS),  # one input (or batch) through all its attempts
            "tag": self.tag,
            "method": self.method,
            "params": dict(self.params),
            **fields,
        }


def _error_of(reply: dict[str, Any]) -> BaseException:
    exc = reply.get("error")
    if not isinstance(exc, BaseException):
        exc = RemoteError(str(exc))
    if reply.get("tb"):
        exc.add_note("Remote traceback (in the container):\n" + reply["tb"].rstrip())
    return exc


def _finish(
    target: Target, via: str, out: Future[Any], reply: dict[str, Any], t0: float, attempts: int
) -> None:
    ok = bool(reply.get("ok"))
    # the trace's record of this input is the dispatching side's (broker.py), not ours
    if reply.get("needs_gpu"):
        NEEDS_GPU.append(
            (target.name, f"{type(reply.get('error')).__name__}: {reply.get('error')}")
        )
    if ok:
        out.set_result(reply.get("value"))
    else:
        out.set_exception(_error_of(reply))


def _lost_reply(exc: BaseException, timed_out: bool, timeout: int) -> dict[str, Any]:
    if timed_out:
        error: BaseException = FunctionTimeoutError(f"the input ran past its timeout ({timeout}s)")
    else:
        error = RemoteError(str(exc))
    return {"ok": False, "error": error}


def submit(target: Target, args: tuple[Any, ...], kwargs: dict[str, Any], via: str) -> Future[Any]:
    """Send one input; the future holds its result or its exception."""
    if target.resources.batched:
        return _batcher(target).add(args, kwargs, via)
    out: Future[Any] = Future()
    t0 = time.monotonic()
    request = target.request("call", args=args, kwargs=kwargs)
    _attempt(target, via, out, request, t0, 1)
    return out


def submit_web(target: Target, http_request: dict[str, Any]) -> Future[Any]:
    """One HTTP request to a web endpoint, answered by a container."""
    res = target.resources
    web = (res.web, res.web_method, res.web_port)
    out: Future[Any] = Future()
    request = target.request("web", web=web, request=http_request)
    _attempt(target, "web", out, request, time.monotonic(), 1)
    return out


def _attempt(
    target: Target,
    via: str,
    out: Future[Any],
    request: dict[str, Any],
    t0: float,
    attempt: int,
    on_reply: Any = None,
) -> None:
    timed_out = threading.Event()
    holder: list[Future[dict[str, Any]]] = []

    def on_start(worker: Worker) -> None:
        def expire() -> None:
            if holder and not holder[0].done():
                timed_out.set()
                worker.kill()

        WATCHDOG.after(target.resources.timeout, expire)

    fut = target.pool().submit({**request, "via": via, "attempt": attempt}, on_start)
    holder.append(fut)

    def done(f: Future[dict[str, Any]]) -> None:
        exc = f.exception()
        if exc is not None and not isinstance(exc, WorkerLost):
            reply: dict[str, Any] = {"ok": False, "error": exc}
        elif exc is not None:
            reply = _lost_reply(exc, timed_out.is_set(), target.resources.timeout)
        else:
            reply = f.result()
        retry = not reply.get("ok") and not reply.get("needs_gpu")
        if retry and attempt <= target.resources.retries:
            _attempt(target, via, out, request, t0, attempt + 1, on_reply)
        elif on_reply is not None:
            on_reply(reply, attempt)
        else:
            _finish(target, via, out, reply, t0, attempt)

    fut.add_done_callback(done)


class _Watchdog:
    """One thread for every input's timeout, instead of a timer thread per input."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def after(self, seconds: float, fn: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._seq), fn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True)
                self._thread.start()
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                _, _, fn = heapq.heappop(self._heap)
            fn()


WATCHDOG = _Watchdog()


class _Batcher:
    """Groups inputs of a @modal.batched function into lists of up to max_batch_size,
    sending a group when it is full or wait_ms after its first input arrived."""

    def __init__(self, target: Target) -> None:
        assert target.resources.batched is not None
        self.target = target
        self.size, wait_ms = target.resources.batched
        self.wait_s = wait_ms / 1000
        self.items: list[tuple[tuple[Any, ...], dict[str, Any], str, Future[Any], float]] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._loop, daemon=True).start()

    def add(self, args: tuple[Any, ...], kwargs: dict[str, Any], via: str) -> Future[Any]:
        out: Future[Any] = Future()
        with self.cond:
            self.items.append((args, kwargs, via, out, time.monotonic()))
            self.cond.notify_all()
        return out

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.items:
                    self.cond.wait()
                deadline = self.items[0][4] + self.wait_s
                while len(self.items) < self.size and time.monotonic() < deadline:
                    self.cond.wait(max(0.0, deadline - time.monotonic()))
                group, self.items = self.items[: self.size], self.items[self.size :]
            self._send(group)

    def _send(
        self, group: list[tuple[tuple[Any, ...], dict[str, Any], str, Future[Any], float]]
    ) -> None:
        request = self.target.request("batch", items=[(a, k) for a, k, _, _, _ in group])

        def on_reply(reply: dict[str, Any], attempt: int) -> None:
            values = reply.get("value") if reply.get("ok") else None
            for i, (_, _, via, out, t0) in enumerate(group):
                item = dict(reply, batch_size=len(group))
                if values is not None:
                    item["value"] = values[i]
                _finish(self.target, via, out, item, t0, attempt)

        _attempt(self.target, "batch", Future(), request, group[0][4], 1, on_reply)


_BATCHERS: dict[tuple[Any, ...], _Batcher] = {}
_BATCHERS_LOCK = threading.Lock()


def _batcher(target: Target) -> _Batcher:
    key = (target.tag, target.method, wire.dumps(target.params), target.resources)
    with _BATCHERS_LOCK:
        if key not in _BATCHERS:
            _BATCHERS[key] = _Batcher(target)
        return _BATCHERS[key]
