"""Cancelling a running job from another terminal.

Two signals, so that either suffices: a `cancel.request` file in the job folder
(the runner polls for it; it works across hosts sharing the jobs dir), and a
SIGINT to the job's process when that process is alive on this host. A cancel
never signals a process the job did not start: a pid in the index may have been
reused by an unrelated process, so the process must also have the start time the
index recorded beside its pid (store/procs.py) and look like crucible; and the
signal goes through a pidfd opened before that check, so the pid cannot change
hands between the check and the signal.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
from pathlib import Path

from pydantic import BaseModel

from crucible.records.trial import utcnow
from crucible.store.layout import CANCEL_FILE, write_json_atomic
from crucible.store.procs import pid_alive, pid_cmdline, process_start
from crucible.store.queries import JobRecord, current_status


class CancelReport(BaseModel):
    job_id: str
    status_before: str
    cancel_file: str
    request_written: bool
    pid: int | None
    signalled: bool
    signal_note: str | None
    status: str  # after the optional wait
    stopped: bool


def _looks_like_crucible(pid: int) -> tuple[bool, str | None]:
    cmd = pid_cmdline(pid)
    if cmd is None:
        # No procfs: nothing to check against; a live pid from the index is all we know.
        return True, None
    if "crucible" in cmd:
        return True, None
    return False, f"pid {pid} is alive but runs {cmd[:80]!r}, not crucible: not signalled"


def _interrupt(rec: JobRecord) -> tuple[bool, str | None]:
    """SIGINT to the job's process, if `rec.pid` is still that process: (sent, why not)."""
    pid, later = rec.pid, f"the runner will see {CANCEL_FILE}"
    if not pid:
        return False, f"no pid recorded; {later}"
    if not pid_alive(pid):
        return False, f"pid {pid} is not alive on this host; {later}"
    if rec.pid_start is None:
        return False, (
            f"pid {pid}: no start time recorded, so its process cannot be told from another "
            f"that reused the pid: not signalled; {later}"
        )
    try:
        fd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    except OSError:
        return False, f"pid {pid} is not alive on this host; {later}"
    try:
        if process_start(pid) != rec.pid_start:
            return False, (
                f"pid {pid} is alive but is not the job's process (it started at another "
                f"time: the pid was reused): not signalled; {later}"
            )
        ok, why = _looks_like_crucible(pid)
        if not ok:
            return False, why
        if fd is not None:  # the process checked above, even if the pid changes hands now
            signal.pidfd_send_signal(fd, signal.SIGINT)
        else:
            os.kill(pid, signal.SIGINT)
        return True, None
    except OSError as exc:
        return False, f"could not signal pid {pid}: {exc.strerror}"
    finally:
        if fd is not None:
            os.close(fd)


def request_cancel(rec: JobRecord) -> CancelReport:
    """Write the cancel request and interrupt the job's process. `rec` must be running."""
    path = rec.path / CANCEL_FILE
    body = {
        "requested_at": utcnow().isoformat(),
        "by_pid": os.getpid(),
        "host": socket.gethostname(),
    }
    write_json_atomic(path, json.dumps(body) + "\n")
    signalled, note = _interrupt(rec)
    return CancelReport(
        job_id=rec.job_id,
        status_before=rec.status,
        cancel_file=str(path),
        request_written=True,
        pid=rec.pid,
        signalled=signalled,
        signal_note=note,
        status=rec.status,
        stopped=False,
    )


async def wait_stopped(jobs_dir: Path, report: CancelReport, timeout: float) -> CancelReport:
    """Poll until the job is no longer running or `timeout` seconds have passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        rec = current_status(jobs_dir, report.job_id)
        if rec is not None:
            report.status = rec.status
        if rec is None or not rec.running:
            report.stopped = True
            return report
        if loop.time() >= deadline:
            return report
        await asyncio.sleep(0.2)
