"""`session_server(tmp_path, [task])`: the real service (tests/helpers/serving.py
`service_thread`, serve.server.running_service) serving loaded tasks, for tests written
against Task objects (the trainers' adapters). It yields a `ServiceThread`: `url`,
`token`, `manager`, `provider`, `job_dir`, `call`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from crucible.serve.session_ops import SessionLimits
from crucible.tasks.models import Task
from tests.helpers.serving import ServiceThread, service_thread


@contextmanager
def session_server(
    tmp_path: Path,
    tasks: list[Task],
    *,
    slots: int = 4,
    max_sessions: int = 8,
    idle_timeout_s: float = 300.0,
    limits: SessionLimits | None = None,
    warm: int = 0,
) -> Iterator[ServiceThread]:
    with service_thread(tmp_path, [t.path for t in tasks], concurrency=slots,
                        max_sessions=max_sessions, idle_timeout_s=idle_timeout_s,
                        limits=limits, warm=warm) as srv:  # fmt: skip
        yield srv
