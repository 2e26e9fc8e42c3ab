"""The program's side of the dispatching socket (broker.py): a container is asked of the
broker, which starts it, and each input goes to it through the broker, which passes the
reply back. A Worker here is that container as a pool sees it.

One socket per process (BROKER_FD_VAR, inherited from whoever started this process);
one thread reads it, and another hands each reply to its Worker: a reply's callbacks
(the pool's bookkeeping) may wait for a lock whose holder waits for a container to
start, which only the reader can tell it.
"""

from __future__ import annotations

import itertools
import os
import queue
import socket
import threading
from concurrent.futures import Future
from typing import Any

from crucible.modalrt import wire
from crucible.modalrt.broker import BROKER_FD_VAR
from crucible.modalrt.mounts import MountError
from crucible.modalrt.sdk.exception import DeserializationError
from crucible.modalrt.spec import Resources

START_TIMEOUT = 120.0
_HEADER_KEYS = ("op", "tag", "method", "via", "attempt", "key")


class WorkerLost(Exception):
    """The worker process ended while inputs were in flight."""


class _Link:
    def __init__(self) -> None:
        fd = os.environ.get(BROKER_FD_VAR)
        if not fd:
            raise RuntimeError(
                "no dispatching side: the offline runtime's containers are started by the "
                "process that launched the program (crucible.modalrt.api / serve)"
            )
        sock = socket.socket(fileno=int(fd))
        sock.set_inheritable(False)  # the program's own subprocesses do not share it
        self._r, self._w = sock.makefile("rb"), sock.makefile("wb")
        self._wlock = threading.Lock()
        self._ids = itertools.count(1)
        self.workers: dict[int, Worker] = {}
        self.starts: dict[int, Future[int]] = {}
        self._replies: queue.SimpleQueue[tuple[Worker, str, Any, bytes]] = queue.SimpleQueue()
        threading.Thread(target=self._read, name="modalrt-link", daemon=True).start()
        threading.Thread(target=self._hand, name="modalrt-replies", daemon=True).start()

    def send(self, header: dict[str, Any], blob: bytes = b"") -> None:
        with self._wlock:
            wire.send_frame(self._w, header, blob)

    def spawn(
        self, worker: Worker, tag: str, cls: bool, resources: Resources
    ) -> tuple[int, Future[int]]:
        wid = next(self._ids)
        started: Future[int] = Future()
        self.starts[wid] = started
        self.workers[wid] = worker
        self.send({"op": "spawn", "wid": wid, "tag": tag, "cls": cls,
                   "resources": resources.to_wire()})  # fmt: skip
        return wid, started

    def _hand(self) -> None:
        while True:
            worker, op, value, blob = self._replies.get()
            if op == "reply":
                worker.replied(int(value), blob)
            else:
                worker.exited(int(value) if isinstance(value, int) else -1)

    def _read(self) -> None:
        while True:
            try:
                h, blob = wire.recv_frame(self._r)
            except (wire.FrameError, OSError):
                break
            wid, op = h.get("wid"), h.get("op")
            if not isinstance(wid, int):
                continue
            start = self.starts.pop(wid, None) if op in ("started", "failed", "refused") else None
            if start is not None:
                if op == "started":
                    start.set_result(int(h["pid"]))
                elif h.get("type") == "MountError":  # as the caller would have raised it
                    start.set_exception(MountError(str(h.get("error"))))
                else:
                    start.set_exception(OSError(f"the container did not start: {h.get('error')}"))
                continue
            worker = self.workers.get(wid)
            if worker is None:
                continue
            if op == "exit":
                self.workers.pop(wid, None)
            if op in ("reply", "exit"):
                self._replies.put(
                    (worker, op, h.get("id") if op == "reply" else h.get("code"), blob)
                )
        for worker in list(self.workers.values()):  # the broker is gone
            self._replies.put((worker, "exit", -1, b""))
        for start in list(self.starts.values()):
            start.set_exception(OSError("the dispatching side is gone"))


_LINK: list[_Link] = []
_LINK_LOCK = threading.Lock()


def link() -> _Link:
    with _LINK_LOCK:
        if not _LINK:
            _LINK.append(_Link())
        return _LINK[0]


class Worker:
    """One container of a pool, started and spoken to through the broker."""

    def __init__(self, tag: str, cls: bool, resources: Resources) -> None:
        self.inflight = 0
        self._ids = itertools.count()
        self._pending: dict[int, Future[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._gone = threading.Event()
        self.code: int | None = None
        self._link = link()
        self.pid = -1
        self.wid, started = self._link.spawn(self, tag, cls, resources)
        self.pid = started.result(START_TIMEOUT)

    def send(self, request: dict[str, Any]) -> Future[dict[str, Any]]:
        fut: Future[dict[str, Any]] = Future()
        header = {k: request.get(k) for k in _HEADER_KEYS}
        payload = {k: v for k, v in request.items() if k not in _HEADER_KEYS}
        items = len(request.get("items") or ()) or 1
        with self._lock:
            if self._gone.is_set():
                fut.set_exception(WorkerLost(f"worker {self.pid} is gone"))
                return fut
            rid = next(self._ids)
            self._pending[rid] = fut
        try:
            blob = wire.dumps(payload)
            self._link.send({"op": "send", "wid": self.wid, "id": rid, "req": header["op"],
                             "items": items, **{k: header[k] for k in _HEADER_KEYS[2:]}},
                            blob)  # fmt: skip
        except BaseException as exc:
            with self._lock:
                self._pending.pop(rid, None)
            fut.set_exception(WorkerLost(f"worker {self.pid}: the input was not sent: {exc}"))
        return fut

    def replied(self, rid: int, blob: bytes) -> None:
        try:
            reply = wire.loads(blob)
        except Exception as exc:  # e.g. a result whose class does not import here
            reply = {"ok": False, "error": DeserializationError(f"the result: {exc!r}")}
        with self._lock:
            fut = self._pending.pop(rid, None)
        if fut is not None:
            fut.set_result(reply)

    def exited(self, code: int) -> None:
        with self._lock:
            self.code = code
            self._gone.set()
            lost, self._pending = list(self._pending.values()), {}
        for fut in lost:
            fut.set_exception(WorkerLost(f"the container (pid {self.pid}) exited with code {code}"))

    @property
    def alive(self) -> bool:
        return not self._gone.is_set()

    def close(self, timeout: float = 30) -> None:
        """Ask the worker to finish (its @exit hooks run), then make sure it has."""
        try:
            self._link.send({"op": "close", "wid": self.wid})
        except OSError:
            return
        if not self._gone.wait(timeout):
            self.kill()

    def kill(self) -> None:
        if self.alive:
            try:
                self._link.send({"op": "kill", "wid": self.wid})
            except OSError:
                return
            self._gone.wait(30)
