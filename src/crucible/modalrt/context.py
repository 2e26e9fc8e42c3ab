"""The runtime's settings in a program's processes, and the event log they all append to.

The runner and every worker read one JSON settings object from the environment, so a
function called remotely from inside another remote function finds the same state
folder, secrets file and event log. Events are JSON lines appended with one write each
(O_APPEND), so processes never interleave inside a line. This log is the program's own
(its processes write it, and so can its code): what it says of entrypoints, local calls,
volumes and stores adds to a `crucible modal run` trace; the inputs that ran in
containers are recorded by the dispatching side (broker.py), and the io stage reads only
that.
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

ENV_VAR = "CRUCIBLE_MODALRT"
MOUNTS_VAR = "CRUCIBLE_MODALRT_MOUNTS"  # "links": see mounts.py (the io stage's sandboxes)
WORKER_VAR = "CRUCIBLE_MODALRT_WORKER"
SHIM_DIR = Path(__file__).resolve().parent / "shim"
SERVE_MARKER = "crucible-modal-serve: "  # the runner's line with the served URLs


class RuntimeConfig(BaseModel):
    """What every process of one run shares."""

    program: str  # absolute path of the program file
    module: str  # the name the program is imported under (its file stem)
    state_dir: str  # volumes/, stores.sqlite: kept between runs like named Modal objects
    run_dir: str  # this run's events.jsonl
    secrets_file: str | None = None
    max_containers: int = 4  # per function when the program does not say
    mounts: Literal["bwrap", "links"] = "bwrap"  # how a Volume reaches its path (mounts.py)

    @property
    def events_path(self) -> Path:
        return Path(self.run_dir) / "events.jsonl"

    def volume_dir(self, name: str) -> Path:
        return Path(self.state_dir) / "volumes" / name

    @property
    def stores_path(self) -> Path:
        return Path(self.state_dir) / "stores.sqlite"


@functools.cache
def config() -> RuntimeConfig:
    raw = os.environ.get(ENV_VAR)
    if not raw:
        raise RuntimeError(
            "the offline modal SDK runs only under the crucible Modal runtime "
            "(`crucible modal run FILE`)"
        )
    return RuntimeConfig.model_validate_json(raw)


def in_worker() -> bool:
    return os.environ.get(WORKER_VAR) == "1"


def emit(kind: str, **fields: Any) -> None:
    """Append one event to the run's log."""
    event = {"kind": kind, "t": time.time(), "pid": os.getpid(), **fields}
    line = (json.dumps(event, default=str) + "\n").encode()
    fd = os.open(config().events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    out: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a process killed mid-write leaves a torn last line
            continue
    return out
