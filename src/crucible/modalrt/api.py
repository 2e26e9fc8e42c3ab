"""The Python API: run a Modal program offline and get its exit code, output and trace.

    result = run_program("prog.py", entrypoint="main", args=["--n", "3"], capture=True)
    result.exit_code, result.stdout, result.trace.function("square").remote_inputs

The program runs in its own interpreter (the runner), never in the caller's, so the
caller's imports, globals and a real `modal` it may have loaded stay apart. The caller's
process is the dispatching side (broker.py): it starts the containers and records the
inputs they ran (`RunResult.dispatched`), which the program cannot write to; the trace
adds the program's own events (entrypoint, local calls, volumes, stores) to those.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crucible.modalrt.broker import Broker, pipe_reader
from crucible.modalrt.context import ENV_VAR, MOUNTS_VAR, RuntimeConfig, read_events
from crucible.modalrt.trace import TIMEOUT_EXIT, Trace, build_trace

DEFAULT_STATE_DIR = Path("~/.crucible/modalrt")


@dataclass
class RunResult:
    exit_code: int
    trace: Trace
    stdout: str | None = None  # with capture=True
    stderr: str | None = None
    dispatched: list[dict[str, Any]] = field(default_factory=list)  # the broker's events

    @property
    def status(self) -> str:
        return self.trace.status


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def split_target(target: str) -> tuple[Path, str | None]:
    """`prog.py::main` -> (prog.py, "main")."""
    path, sep, entry = target.partition("::")
    return Path(path), (entry or None) if sep else None


def prepare(
    program: str | Path,
    state_dir: str | Path | None,
    secrets_file: str | Path | None,
    max_containers: int,
    env: Mapping[str, str] | None,
) -> tuple[Path, Path, dict[str, str]]:
    """(program path, this run's folder, the runner's environment)."""
    path = Path(program).resolve()
    if not path.is_file():
        raise FileNotFoundError(str(program))
    state = Path(state_dir or DEFAULT_STATE_DIR).expanduser().resolve()
    run_dir = state / "runs" / uuid.uuid4().hex[:16]
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = RuntimeConfig(
        program=str(path),
        module=path.stem,
        state_dir=str(state),
        run_dir=str(run_dir),
        secrets_file=str(Path(secrets_file).expanduser().resolve()) if secrets_file else None,
        max_containers=max_containers,
        mounts="links" if os.environ.get(MOUNTS_VAR) == "links" else "bwrap",
    )
    src = str(Path(__file__).resolve().parents[2])  # crucible must import in the program's process
    pythonpath = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    child_env = {
        **os.environ,
        **(env or {}),
        ENV_VAR: cfg.model_dump_json(),
        "PYTHONPATH": pythonpath,
        "PYTHONUNBUFFERED": "1",
    }
    return path, run_dir, child_env


def run_program(
    program: str | Path,
    entrypoint: str | None = None,
    args: Sequence[str] = (),
    *,
    state_dir: str | Path | None = None,
    secrets_file: str | Path | None = None,
    trace_path: str | Path | None = None,
    script: bool = False,
    capture: bool = False,
    timeout: float | None = None,
    max_containers: int = 4,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> RunResult:
    """Run `program` (its local entrypoint, or ENTRYPOINT, or as a script) and trace it."""
    path, run_dir, child_env = prepare(program, state_dir, secrets_file, max_containers, env)
    argv = [sys.executable, "-m", "crucible.modalrt.runner"]
    if entrypoint:
        argv += ["--entry", entrypoint]
    if script:
        argv.append("--script")
    argv += ["--", *args]
    pipes = (os.pipe(), os.pipe()) if capture else None
    fds = (pipes[0][1], pipes[1][1]) if pipes else (None, None)
    broker = Broker(child_env, str(Path(cwd or os.getcwd()).resolve()), *fds)
    chunks: tuple[list[bytes], list[bytes]] = ([], [])
    readers = (
        [pipe_reader(p[0], into) for p, into in zip(pipes, chunks, strict=True)] if pipes else []
    )
    try:
        proc = subprocess.Popen(
            argv, env={**child_env, **broker.env}, cwd=cwd, pass_fds=broker.pass_fds,
            stdout=fds[0], stderr=fds[1],
        )  # fmt: skip
    finally:
        broker.started()
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = TIMEOUT_EXIT
    dispatched = broker.finish()
    for fd in fds:
        if fd is not None:
            os.close(fd)
    for r in readers:
        r.join(30)  # a process the program left behind may hold the pipe
    out = _text(b"".join(chunks[0])) if capture else None
    err = _text(b"".join(chunks[1])) if capture else None
    trace = build_trace(read_events(run_dir) + dispatched, str(path), entrypoint, code)
    if trace_path is not None:
        Path(trace_path).write_text(trace.model_dump_json(indent=2) + "\n")
    return RunResult(code, trace, out, err, dispatched)
