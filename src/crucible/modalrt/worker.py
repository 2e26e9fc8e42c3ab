"""A container: `python -m crucible.modalrt.worker`, started by the dispatching side
(broker.py) for a pool.

It imports the program (as Modal imports it in a container), then answers requests
from stdin on stdout until stdin closes, running up to max_inputs of them at once.
Its fd 1 is the caller's stdout, so the function's prints reach the terminal; the
requests and replies are frames (wire.py) on the pipes the broker made: what is asked
(op, function, method) in the header, which the broker reads, the arguments and the
result pickled. On the way out it runs the @exit
hooks of the instances it made.
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import os
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from crucible.modalrt import wire
from crucible.modalrt.broker import GPU_VAR, MAX_INPUTS_VAR, STDOUT_FD_VAR
from crucible.modalrt.context import config
from crucible.modalrt.gpu import host_has_gpu, needs_gpu
from crucible.modalrt.program import import_program
from crucible.modalrt.sdk.cls import make_instance, run_exit_hooks
from crucible.modalrt.sdk.exception import InvalidError, RemoteError
from crucible.modalrt.sdk.registry import REGISTRY
from crucible.modalrt.web import handle_web

_HERE = str(Path(__file__).resolve().parent)
_instances: dict[bytes, Any] = {}
_instances_lock = threading.Lock()


def _instance(tag: str, params: dict[str, Any]) -> Any:
    key = wire.dumps((tag, sorted(params.items())))
    with _instances_lock:
        if key not in _instances:
            _instances[key] = make_instance(REGISTRY.classes[tag]._user_cls, params)
        return _instances[key]


def _callable(req: dict[str, Any]) -> Any:
    if req["method"] is None:
        fn = REGISTRY.functions.get(req["tag"])
        if fn is None:
            raise InvalidError(f"the program defines no function {req['tag']!r} here")
        return fn._local_f
    return getattr(_instance(req["tag"], req["params"]), req["method"])


def _call(fn: Any, args: Any, kwargs: Any) -> Any:
    result = fn(*args, **kwargs)
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    if inspect.isgenerator(result):
        result = list(result)
    return result


def _run(req: dict[str, Any]) -> Any:
    fn = _callable(req)
    if req["op"] == "call":
        return _call(fn, req["args"], req["kwargs"])
    if req["op"] == "batch":
        items = req["items"]
        columns = [list(col) for col in zip(*(a for a, _ in items), strict=True)]
        keys = items[0][1].keys()
        kwcols = {k: [kw[k] for _, kw in items] for k in keys}
        out = list(_call(fn, columns, kwcols))
        if len(out) != len(items):
            raise InvalidError(
                f"a batched function returned {len(out)} outputs for {len(items)} inputs"
            )
        return out
    if req["op"] == "web":
        return handle_web(fn, req["web"], req["request"])
    raise InvalidError(f"unknown request {req['op']!r}")


def _remote_tb(exc: BaseException) -> str:
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_HERE)
    ]
    lines = traceback.format_list(frames)
    return (
        "Traceback (most recent call last):\n"
        + "".join(lines)
        + "".join(traceback.format_exception_only(exc))
    )


def _reply_for(req: dict[str, Any]) -> dict[str, Any]:
    gpu = os.environ.get(GPU_VAR)
    backing = None if not gpu else ("gpu" if host_has_gpu() else "cpu")
    base = {"id": req["id"], "pid": os.getpid(), "gpu_backing": backing}
    t0 = time.monotonic()
    try:
        value = _run(req)
        return {**base, "ok": True, "value": value, "duration": time.monotonic() - t0}
    except BaseException as exc:
        error: BaseException = exc
        try:
            wire.dumps(exc)
        except Exception:
            error = RemoteError(f"{type(exc).__name__}: {exc}")
        return {
            **base,
            "ok": False,
            "error": error,
            "tb": _remote_tb(exc),
            "needs_gpu": bool(gpu) and not host_has_gpu() and needs_gpu(exc),
            "duration": time.monotonic() - t0,
        }
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _die_with_parent() -> None:
    """A container outlives no caller: a killed runner takes its workers along, even
    those in the middle of a long input (Linux; elsewhere stdin's EOF ends them)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent was already gone before prctl took hold
        os._exit(1)


def main() -> None:
    _die_with_parent()
    proto_in = sys.stdin.buffer
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(int(os.environ[STDOUT_FD_VAR]), 1)
    sys.stdin = open(os.devnull)
    cfg = config()
    import_program(Path(cfg.program), cfg.module)
    lock = threading.Lock()

    def serve(header: dict[str, Any], blob: bytes) -> None:
        try:
            req = {**wire.loads(blob), **header}
            reply = _reply_for(req)
        except Exception as exc:  # arguments that do not unpickle here
            reply = {"id": header["id"], "ok": False, "error": RemoteError(repr(exc))}
        try:
            out = wire.dumps(reply)
        except Exception as exc:  # a result that does not pickle
            reply = {**reply, "ok": False, "value": None, "error": RemoteError(str(exc))}
            out = wire.dumps(reply)
        head = {"id": header["id"], "ok": bool(reply.get("ok")),
                "needs_gpu": bool(reply.get("needs_gpu"))}  # fmt: skip
        if not reply.get("ok"):
            head["error"] = f"{type(reply.get('error')).__name__}: {reply.get('error')}"[:500]
        with lock:
            wire.send_frame(proto_out, head, out)

    with ThreadPoolExecutor(max(1, int(os.environ.get(MAX_INPUTS_VAR, "1")))) as pool:
        while True:
            try:
                header, blob = wire.recv_frame(proto_in)
            except EOFError:
                break
            pool.submit(serve, header, blob)
    for obj in list(_instances.values()):
        run_exit_hooks(obj)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
