"""The io stage's driver, run INSIDE an io sandbox:
`python -m crucible.verifiers.stages.io.driver /work/job.json` (its job, written by iorun.py). Nothing here is trusted by the host: it runs
beside the submission, as the same uid, and the host reads what it writes within caps.

Modes:
- script: the reference as `python FILE ARGS` would run it (runpy, as __main__).
- program: the submission's local entrypoint through the offline Modal runtime
  (crucible.modalrt.runner), its stdin, stdout and stderr the sandbox's own; exits with
  the runner's status.
- serve: the submission's web endpoints served by the runtime (modalrt/serve.py); the
  case's requests go to the endpoint over the sandbox's own loopback; the responses
  are printed as one JSON list of {"status", "json"} (or "text" for a body that is
  not JSON).
- asgi: the reference's ASGI app (an attribute of a Python file of the task), called
  with the same requests through httpx's ASGI transport; printed the same way.
First of all it closes every fd above 3 and makes itself undumpable (PR_SET_DUMPABLE 0:
a process of the same uid can then neither ptrace it nor open its /proc/PID/fd, mem or
environ). The program's processes never hold fd 3: the runner and the workers are
started without it (subprocess closes every fd above 2). This process is the runtime's
dispatching side (modalrt/broker.py): it starts the containers and carries every input
to them, and what it recorded of that, with the runner's exit status as it saw it, is
what it writes to fd 3 at the end (cut at SIDE_CAP bytes; the host validates it,
trace.py). The run's own event log (events.jsonl, `emit()`) is the program's to write
and is never read for the io stage.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path
from typing import Any

# Heavier imports (httpx, the runtime) are made in the modes that need them: the
# reference's script mode starts with as little as plain python.

JOB_FILE = "job.json"  # under the work folder
WORKDIR = Path("/work")
STATE = "state"  # under the work folder: volumes, stores, this run's events
SIDE_FD = 3
SIDE_CAP = (4 << 20) - 1  # the host kills the run past 4 MiB on fd 3
BODY_TEXT = 2000  # characters of a body that is not JSON
REQUEST_TIMEOUT = 60.0
EXIT_NOT_SERVED = 4
PR_SET_DUMPABLE = 4


def response_record(status: int, body: bytes) -> dict[str, Any]:
    """What one response contributes to the output: its status and its JSON body."""
    try:
        return {"status": status, "json": json.loads(body)}
    except ValueError:
        return {"status": status, "json": None, "text": body.decode(errors="replace")[:BODY_TEXT]}


def _kwargs(req: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"headers": req.get("headers") or {}}
    if "json" in req:
        out["json"] = req["json"]
    return out


def dump_events(events: list[dict[str, Any]]) -> None:
    """The dispatching side's events to fd 3 (absent when not run by the io stage: skipped)."""
    data = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    view = memoryview(data[:SIDE_CAP])
    try:
        while view:
            view = view[os.write(SIDE_FD, view) :]
    except OSError:
        return


def run_script(job: dict[str, Any]) -> int:
    import runpy

    path = WORKDIR / job["program"]
    sys.argv = [str(path), *job.get("args", [])]
    sys.path[0] = str(path.parent)
    runpy.run_path(str(path), run_name="__main__")
    return 0


def run_program(job: dict[str, Any], state: Path, events: list[dict[str, Any]]) -> int:
    from crucible.modalrt.api import run_program as run

    main = WORKDIR / job["program"]
    ran = run(main, job.get("entrypoint") or None, job.get("args", []), state_dir=state,
              max_containers=int(job.get("max_containers", 4)), cwd=main.parent)  # fmt: skip
    events += ran.dispatched
    return ran.exit_code if ran.exit_code >= 0 else 128 - ran.exit_code


def run_serve(job: dict[str, Any], state: Path, events: list[dict[str, Any]]) -> int:
    import httpx

    from crucible.modalrt.serve import ServeError, serve_program

    main = WORKDIR / job["program"]
    os.chdir(main.parent)
    try:
        with serve_program(
            main, state_dir=state, max_containers=int(job.get("max_containers", 4))
        ) as s:
            url = s.urls.get(job["endpoint"])
            if url is None:
                sys.stderr.write(f"no web endpoint {job['endpoint']!r}; served: {sorted(s.urls)}\n")
                return EXIT_NOT_SERVED
            out = []
            with httpx.Client(timeout=REQUEST_TIMEOUT, trust_env=False) as client:
                for req in job["requests"]:
                    resp = client.request(
                        req["method"], url.rstrip("/") + req["path"], **_kwargs(req)
                    )
                    out.append(response_record(resp.status_code, resp.content))
        events += s.dispatched  # filled as the block ended
    except ServeError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    print(json.dumps(out))
    return 0


def run_asgi(job: dict[str, Any]) -> int:
    import asyncio
    import importlib.util

    import httpx

    path = WORKDIR / job["program"]
    spec = importlib.util.spec_from_file_location("reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["reference"] = module
    spec.loader.exec_module(module)
    app = getattr(module, job.get("app") or "app")

    async def go() -> list[dict[str, Any]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://reference.invalid") as c:
            out = []
            for req in job["requests"]:
                resp = await c.request(req["method"], req["path"], **_kwargs(req))
                out.append(response_record(resp.status_code, resp.content))
            return out

    print(json.dumps(asyncio.run(go())))
    return 0


def _undumpable() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")


def main() -> int:
    os.closerange(SIDE_FD + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    _undumpable()
    job = json.loads(Path(sys.argv[1]).read_text())
    os.unlink(sys.argv[1])  # the job is the driver's, not the program's
    state = WORKDIR / STATE
    if job["mode"] == "script":
        return run_script(job)
    if job["mode"] == "asgi":
        return run_asgi(job)
    from crucible.modalrt.context import MOUNTS_VAR

    os.environ[MOUNTS_VAR] = "links"  # no nested bwrap in this sandbox (modalrt/mounts.py)
    events: list[dict[str, Any]] = []
    code = 1
    try:
        serve = job["mode"] == "serve"
        code = run_serve(job, state, events) if serve else run_program(job, state, events)
        return code
    finally:
        dump_events([*events, {"kind": "end", "exit_code": code}])


if __name__ == "__main__":
    sys.exit(main())
