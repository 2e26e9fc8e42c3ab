"""Where the io stage runs programs: every run (the reference's and the submission's,
each case) in a one-shot bubblewrap sandbox on the grading host
(sandboxes/local/oneshot/run.py), whatever provider ran the trial.

Each run has its own unprivileged host uid with no groups, its own network namespace
(loopback only), pid namespace and cgroups (memory, pids, CPU), a wall timeout, a
read-only root with the host's /usr, a curated /etc and the Python environment of
ioenv.py, and one writable place: a fresh tmpfs work folder holding only that run's
files. The reference's run holds the reference file; the submission's holds the
submitted files (under /work/src) and the driver's job: never both, and never the
expected output, which stays on the host. Output comes back through pipes read with
caps (past one the run is killed); the trace through fd 3, validated by iotrace.py.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crucible.sandboxes.local.oneshot import OneShotResult, OneShotSpec, gpu_count, run_oneshot
from crucible.verifiers.stages.io.driver import JOB_FILE, SIDE_CAP
from crucible.verifiers.stages.io.env import WORKDIR, pyenv

DRIVER = "crucible.verifiers.stages.io.driver"
SRC = "src"  # the submitted files, under the work folder


@dataclass(frozen=True)
class Limits:
    timeout: float
    memory_mb: int
    pids: int
    cpus: float
    storage_mb: int
    output_cap: int  # bytes of stdout


def _spec(
    command: list[str],
    files: dict[str, Path | bytes],
    env: dict[str, str],
    stdin: str,
    lim: Limits,
    writable_root: bool = False,
) -> OneShotSpec:
    py = pyenv()
    return OneShotSpec(
        command=[py.python, *command],
        env={**py.env, **env},
        files=files,
        ro_binds=py.binds,
        workdir=WORKDIR,
        stdin=stdin.encode(),
        timeout=lim.timeout,
        memory_mb=lim.memory_mb,
        pids=lim.pids,
        cpus=lim.cpus,
        storage_mb=lim.storage_mb,
        stdout_cap=lim.output_cap,
        side_cap=SIDE_CAP + 1,  # the driver cuts the event log below this
        gpu=gpu_count() > 0,  # a GPU function gets the host's GPUs, as on Modal
        writable_root=writable_root,
    )


def _driver(
    job: dict[str, Any], files: dict[str, Path | bytes]
) -> tuple[list[str], dict[str, Path | bytes]]:
    return ["-m", DRIVER, f"{WORKDIR}/{JOB_FILE}"], {**files, JOB_FILE: json.dumps(job).encode()}


async def run_reference(
    reference: Path, args: list[str], stdin: str, env: dict[str, str], lim: Limits
) -> OneShotResult:
    """The task's reference program as plain python, alone in its sandbox."""
    job = {"mode": "script", "program": reference.name, "args": args}
    command, files = _driver(job, {reference.name: reference})
    return await run_oneshot(_spec(command, files, env, stdin, lim))


async def run_reference_app(
    reference: Path, app: str, requests: list[dict[str, Any]], env: dict[str, str], lim: Limits
) -> OneShotResult:
    """The reference's ASGI app called with the case's requests (the driver's asgi mode)."""
    job = {"mode": "asgi", "program": reference.name, "app": app, "requests": requests}
    command, files = _driver(job, {reference.name: reference})
    return await run_oneshot(_spec(command, files, env, "", lim))


def submitted_files(files: dict[str, Path]) -> dict[str, Path | bytes]:
    """The submission's files under the work folder's src/ (sandbox path -> host file);
    a path that would leave src/ (`..`) is left out."""
    out: dict[str, Path | bytes] = {}
    for name, host in files.items():
        rel = posixpath.normpath(name.lstrip("/"))
        if rel not in (".", "") and not rel.startswith("../") and rel != "..":
            out[f"{SRC}/{rel}"] = host
    return out


async def run_submission(
    files: dict[str, Path], job: dict[str, Any], stdin: str, env: dict[str, str], lim: Limits
) -> OneShotResult:
    """The submission through the offline runtime (the driver's program or serve mode);
    `job["program"]` is its sandbox path as submitted (e.g. /app/main.py)."""
    job = {**job, "program": f"{SRC}/{job['program'].lstrip('/')}"}
    command, all_files = _driver(job, submitted_files(files))
    # a writable root for the runtime's Volume links at their mount paths (modalrt/mounts.py)
    return await run_oneshot(_spec(command, all_files, env, stdin, lim, writable_root=True))
