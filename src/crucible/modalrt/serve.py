"""Serving a program's web endpoints for a while, as `modal serve` does: the verifier
sends its requests to the URLs, then the program stops and its trace is built.

    with serve_program("app.py") as served:
        httpx.post(served.urls["lookup"], json={"key": "a"})
    served.trace.function("lookup").inputs_by_call  # {"web": 1}
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from crucible.modalrt.api import prepare
from crucible.modalrt.broker import Broker
from crucible.modalrt.context import SERVE_MARKER, read_events
from crucible.modalrt.trace import Trace, build_trace


class ServeError(RuntimeError):
    """The program ended before its endpoints were up (its output says why)."""


@dataclass
class Served:
    urls: dict[str, str]  # endpoint (function, or Class.method) -> base URL on 127.0.0.1
    output: list[str] = field(default_factory=list)  # the program's stdout lines so far
    trace: Trace | None = None  # once the block has ended
    exit_code: int | None = None
    dispatched: list[dict[str, Any]] = field(default_factory=list)  # the broker's events


def _drain(stream: IO[str], into: list[str], echo: bool) -> None:
    for line in stream:
        into.append(line.rstrip("\n"))
        if echo:
            sys.stdout.write(line)
            sys.stdout.flush()


@contextlib.contextmanager
def serve_program(
    program: str | Path,
    *,
    state_dir: str | Path | None = None,
    secrets_file: str | Path | None = None,
    trace_path: str | Path | None = None,
    max_containers: int = 4,
    env: Mapping[str, str] | None = None,
    echo: bool = False,
) -> Iterator[Served]:
    path, run_dir, child_env = prepare(program, state_dir, secrets_file, max_containers, env)
    argv = [sys.executable, "-m", "crucible.modalrt.runner", "--serve"]
    out_r, out_w = os.pipe()  # the containers' stdout (the runner's is its own pipe)
    broker = Broker(child_env, os.getcwd(), out_w)
    served = Served(urls={})
    workers_out = open(out_r, encoding="utf-8", errors="replace")
    threading.Thread(target=_drain, args=(workers_out, served.output, echo), daemon=True).start()
    try:
        proc = subprocess.Popen(
            argv, env={**child_env, **broker.env}, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, pass_fds=broker.pass_fds,
        )  # fmt: skip
    finally:
        broker.started()
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for line in proc.stdout:
            if line.startswith(SERVE_MARKER):
                served.urls = json.loads(line.removeprefix(SERVE_MARKER))
                break
            served.output.append(line.rstrip("\n"))
        else:
            code = proc.wait()
            raise ServeError(f"{path.name} exited with {code} before serving its endpoints")
        threading.Thread(
            target=_drain, args=(proc.stdout, served.output, echo), daemon=True
        ).start()
        yield served
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            served.exit_code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            served.exit_code = proc.wait()
        served.dispatched = broker.finish()
        os.close(out_w)  # the containers' drain thread ends
        events = read_events(run_dir) + served.dispatched
        served.trace = build_trace(events, str(path), None, served.exit_code)
        if trace_path is not None:
            Path(trace_path).write_text(served.trace.model_dump_json(indent=2) + "\n")
