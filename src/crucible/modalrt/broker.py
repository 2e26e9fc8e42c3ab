"""The dispatching side of the offline runtime: the process that starts a program's
containers and carries every input to them and every reply back, and writes the trace's
record of that. It is the process that launched the runner (api.py, serve.py, the io
stage's driver), never one that imported the program.

Why here. The runner and the workers import the program, so anything they write (the
run's events.jsonl, `emit()`) is the program's to forge. What the broker records is what
crossed a process boundary through it: a container it started (its pid, the resources
it started it with: the GPU request, secrets, volumes, image), each input it handed one
(function, method, call kind: remote, map, spawn, web...) and the reply that came back.
It never unpickles what passes (the program's pickles would run code here); it reads
the small JSON header of each frame (wire.py). What the workers do with an input is still
the program's code, and the call kind and the resources are the program's declaration;
that the inputs reached containers started with those resources is not.

The program's processes reach the broker through one socket each (BROKER_FD_VAR): the
runner's from the launcher, each worker's from the broker that started it (a function
calling another remotely). The events stay in this process's memory (bounded) until the
launcher takes them.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from crucible.modalrt import wire
from crucible.modalrt.context import ENV_VAR, WORKER_VAR, RuntimeConfig
from crucible.modalrt.gpu import host_has_gpu
from crucible.modalrt.mounts import wrap_with_mounts
from crucible.modalrt.spec import Resources

BROKER_FD_VAR = "CRUCIBLE_MODALRT_BROKER_FD"
STDOUT_FD_VAR = "CRUCIBLE_MODALRT_STDOUT_FD"
MAX_INPUTS_VAR = "CRUCIBLE_MODALRT_MAX_INPUTS"
GPU_VAR = "CRUCIBLE_MODALRT_GPU"
MAX_EVENTS = 20_000  # the io stage reads no more (verifiers/stages/io/trace.py)
_TEXT = 500


@dataclass
class _Pending:
    name: str  # tag, or tag.method
    via: str
    items: int  # inputs in the request (a @modal.batched group: several)
    t0: float
    key: tuple[int, int]  # (connection, the input's key): its attempts share it


@dataclass
class _Container:
    tag: str
    resources: Resources
    proc: subprocess.Popen[bytes]
    pending: dict[int, _Pending] = field(default_factory=dict)


class Broker:
    """Serves the runner's socket (and its workers') from threads of the launcher.

    broker = Broker(env, cwd)   # env: the runner's environment (prepare())
    Popen(argv, env={**env, **broker.env}, pass_fds=broker.pass_fds, ...)
    broker.started()            # the runner has its end now
    ... runner exits ...
    events = broker.finish()
    """

    def __init__(
        self, env: dict[str, str], cwd: str, out_fd: int | None = None, err_fd: int | None = None
    ) -> None:
        self._env = dict(env)
        self._cfg = RuntimeConfig.model_validate_json(env[ENV_VAR])
        self._cwd = cwd
        self._out_fd = sys.stdout.fileno() if out_fd is None else out_fd
        self._err_fd = err_fd  # the containers' stderr (None: ours)
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []
        self.dropped = 0
        self._containers: list[_Container] = []
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self._by_key: dict[tuple[int, int], list[int]] = {}  # an input -> its events
        ours, theirs = socket.socketpair()
        self._theirs = theirs
        self._serve(ours)
        self.env = {BROKER_FD_VAR: str(theirs.fileno())}
        self.pass_fds = (theirs.fileno(),)

    def started(self) -> None:
        """The runner holds its end: ours goes (its EOF then means the runner is gone)."""
        self._theirs.close()

    def finish(self) -> list[dict[str, Any]]:
        """Once the runner has exited: stop what is left, and the events recorded."""
        with contextlib.suppress(OSError):
            self._theirs.close()
        with self._lock:
            containers = list(self._containers)
        for c in containers:
            _kill(c.proc)
        with self._lock:
            socks = list(self._socks)
        for sock in socks:  # a process the program left running may hold a socket yet
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for t in list(self._threads):
            t.join(30)
        with self._lock:
            return [e for e in self._events if e["kind"] != "superseded"]

    # -- recording ------------------------------------------------------------------

    def _record(self, kind: str, _key: tuple[int, int] | None = None, **fields: Any) -> None:
        with self._lock:
            if len(self._events) >= MAX_EVENTS:
                self.dropped += 1
                return
            if _key is not None and _key[1]:
                self._by_key.setdefault(_key, []).append(len(self._events))
            self._events.append({"kind": kind, **fields})

    def _thread(self, target: Any, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads.append(t)
        t.start()

    # -- one program process's socket ---------------------------------------------------

    def _serve(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.append(sock)
        self._thread(self._conn, sock)

    def _conn(self, sock: socket.socket) -> None:
        rfile, wfile = sock.makefile("rb"), sock.makefile("wb")
        wlock = threading.Lock()
        mine: dict[int, _Container] = {}

        def reply(header: dict[str, Any], blob: bytes = b"") -> None:
            with wlock, contextlib.suppress(OSError, ValueError):
                wire.send_frame(wfile, header, blob)

        try:
            while True:
                try:
                    header, blob = wire.recv_frame(rfile)
                except (wire.FrameError, OSError):
                    break
                try:
                    self._handle(header, blob, mine, reply)
                except Exception as exc:  # a malformed request ends it, never the broker
                    why = f"{type(exc).__name__}: {exc}"[:_TEXT]
                    reply({"op": "refused", "wid": header.get("wid"), "error": why})
        finally:
            for c in mine.values():  # the program process is gone: so are its containers
                _kill(c.proc)
            with contextlib.suppress(OSError):
                sock.close()

    def _handle(
        self, h: dict[str, Any], blob: bytes, mine: dict[int, _Container], reply: Any
    ) -> None:
        op, wid = h["op"], int(h["wid"])
        if op == "spawn":
            if wid in mine:
                raise ValueError(f"container {wid} exists")
            res = Resources.from_wire(h["resources"])
            tag, kind = str(h["tag"])[:_TEXT], "cls" if h.get("cls") else "function"
            try:
                c = self._start(tag, res)
            except Exception as exc:  # a Volume that cannot be mounted (MountError) too
                reply({"op": "failed", "wid": wid, "type": type(exc).__name__,
                       "error": str(exc)[:_TEXT]})  # fmt: skip
                return
            mine[wid] = c
            self._record("function", name=tag, type=kind, resources=res.summary())
            reply({"op": "started", "wid": wid, "pid": c.proc.pid})
            self._thread(self._replies, c, wid, reply)
            return
        c = mine[wid]
        if op == "send":
            rid = int(h["id"])
            method = h.get("method")
            name = f"{c.tag}.{str(method)[:_TEXT]}" if method else c.tag
            items = min(max(1, int(h.get("items") or 1)), MAX_EVENTS)
            if int(h.get("attempt") or 1) > 1:
                self._record("retry", function=name)
            via, key = str(h.get("via") or "remote")[:_TEXT], (id(mine), int(h.get("key") or 0))
            with self._lock:
                c.pending[rid] = _Pending(name, via, items, time.monotonic(), key)
            frame = {"id": rid, "op": str(h["req"]), "tag": c.tag, "method": method}
            assert c.proc.stdin is not None
            with contextlib.suppress(OSError, ValueError):
                wire.send_frame(c.proc.stdin, frame, blob)
        elif op == "close":
            with contextlib.suppress(OSError):
                assert c.proc.stdin is not None
                c.proc.stdin.close()
        elif op == "kill":
            _kill(c.proc, wait=False)
        else:
            raise ValueError(f"unknown op {op!r}")

    # -- containers -----------------------------------------------------------------

    def _start(self, tag: str, res: Resources) -> _Container:
        ours, theirs = socket.socketpair()
        env = {
            **self._env,
            WORKER_VAR: "1",
            STDOUT_FD_VAR: str(self._out_fd),
            BROKER_FD_VAR: str(theirs.fileno()),
            MAX_INPUTS_VAR: str(res.max_inputs),
            "PYTHONUNBUFFERED": "1",
            GPU_VAR: res.gpu or "",
            **dict(res.env),
        }
        argv = [sys.executable, "-m", "crucible.modalrt.worker"]
        try:
            proc = subprocess.Popen(
                wrap_with_mounts(argv, res.volumes, self._cfg, self._cwd),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._err_fd,
                env=env,
                cwd=self._cwd,
                pass_fds=(self._out_fd, theirs.fileno()),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        c = _Container(tag, res, proc)
        with self._lock:
            self._containers.append(c)
        self._serve(ours)  # the worker's own calls of other functions
        return c

    def _replies(self, c: _Container, wid: int, reply: Any) -> None:
        """A container's replies, each recorded as the input(s) it answers, then passed on."""
        assert c.proc.stdout is not None
        backing = None if not c.resources.gpu else ("gpu" if host_has_gpu() else "cpu")
        while True:
            try:
                h, blob = wire.recv_frame(c.proc.stdout)
                rid = int(h["id"])
            except (wire.FrameError, OSError, KeyError, TypeError, ValueError):
                break
            with self._lock:
                p = c.pending.pop(rid, None)
            if p is None:  # a reply to nothing sent: not an input
                continue
            self._inputs(c, p, backing, h)
            reply({"op": "reply", "wid": wid, "id": rid}, blob)
        _kill(c.proc)
        code = c.proc.wait()
        with self._lock:
            lost = list(c.pending.values())
            c.pending.clear()
        for p in lost:
            why = f"RemoteError: the container (pid {c.proc.pid}) exited with code {code}"
            self._inputs(c, p, backing, {"ok": False, "error": why})
        reply({"op": "exit", "wid": wid, "code": code})

    def _inputs(self, c: _Container, p: _Pending, backing: str | None, h: dict[str, Any]) -> None:
        """One reply's inputs; a retried input's last attempt replaces its earlier one."""
        ok = h.get("ok") is True
        error = None if ok else str(h.get("error") or "failed")[:_TEXT]
        with self._lock:
            earlier = self._by_key.pop(p.key, []) if p.key[1] else []
            for i in earlier:
                self._events[i] = {"kind": "superseded"}  # dropped by build_trace's reader
        for _ in range(p.items):
            self._record(
                "input",
                _key=p.key,
                function=p.name,
                via=p.via,
                ok=ok,
                error=error,
                # the worker's claim, taken only from a function that asked for a GPU
                needs_gpu=bool(c.resources.gpu) and h.get("needs_gpu") is True,
                gpu=c.resources.gpu,
                gpu_backing=backing,
                container=c.proc.pid,
                duration_s=round(time.monotonic() - p.t0, 6),
                batch_size=p.items if p.items > 1 or c.resources.batched else None,
            )


def _kill(proc: subprocess.Popen[bytes], wait: bool = True) -> None:
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.kill()
    if wait:
        proc.wait()


def pipe_reader(fd: int, into: list[bytes]) -> threading.Thread:
    """A thread that reads fd to its end into `into` (a captured stdout both the runner
    and the containers write)."""

    def run() -> None:
        with open(fd, "rb", closefd=True) as f:
            into.extend(iter(lambda: f.read(65536), b""))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t
