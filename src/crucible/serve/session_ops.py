"""What a client does inside a session's sandbox: exec, upload, download.

Each runs as the task's agent user, through the sandbox's own exec, so it can do
nothing (and read nothing) the task's agent could not: a download is read inside
the sandbox by that user, never by the host or by root, so a link to a host path
or to a file only root may read reveals nothing. Sizes are capped both ways; a
refusal is a SessionRefused with the HTTP status the route answers.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
import re
from dataclasses import dataclass

from crucible.records.serve import DownloadResponse, ExecRequest, ExecResponse, UploadRequest
from crucible.records.submission import check_sandbox_path
from crucible.sandboxes.base import Sandbox
from crucible.tasks.models import Task

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Writes stdin to $1 (parents made first), then sets its mode $2.
_UPLOAD = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" -- "$1"'
# Prints $1 base64-encoded, at most $2 bytes of it plus one (so that an oversized file is
# seen), when it is a regular file and no link; 44: absent, 45: not a regular file, 46:
# this user may not read it.
_DOWNLOAD = (
    '[ -L "$1" ] && exit 45; [ -e "$1" ] || exit 44; [ -f "$1" ] || exit 45; '
    '(exec 3< "$1") 2>/dev/null || exit 46; head -c "$2" -- "$1" | $3 base64'
)
FILE_TIMEOUT_S = 60.0


class SessionRefused(Exception):
    """A request the service refuses: `status` is the HTTP status it answers."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class SessionLimits:
    """Caps on what one request may move (bytes) or run (seconds)."""

    output_cap: int = 1 << 20  # per stream of an exec
    upload_max: int = 16 << 20
    download_max: int = 16 << 20
    exec_timeout_max_s: float = 3600.0


def agent_user(task: Task) -> str | None:
    user = task.config.agent.user
    return None if user is None else str(user)


def sandbox_path(task: Task, path: str) -> str:
    """An absolute, normalized path: a relative one is taken from the task's workdir."""
    full = path if path.startswith("/") else posixpath.join(task.workdir, path)
    try:
        return check_sandbox_path(full)
    except ValueError as exc:
        raise SessionRefused(422, str(exc)) from exc


async def run_exec(
    sandbox: Sandbox, task: Task, req: ExecRequest, limits: SessionLimits
) -> ExecResponse:
    bad = [k for k in req.env if not _ENV_NAME.fullmatch(k)]
    if bad:
        raise SessionRefused(422, f"not an environment variable name: {bad[0][:80]!r}")
    if any("\x00" in v for v in req.env.values()):
        raise SessionRefused(422, "an environment value holds a NUL byte")
    if isinstance(req.command, list) and not req.command:
        raise SessionRefused(422, "an empty command")
    cwd = sandbox_path(task, req.cwd) if req.cwd else task.workdir
    res = await sandbox.exec(
        req.command,
        timeout=min(req.timeout_s, limits.exec_timeout_max_s),
        cwd=cwd,
        env=dict(req.env) or None,
        input=req.input,
        user=agent_user(task),
        output_cap=limits.output_cap,
    )
    return ExecResponse(exit_code=res.exit_code, stdout=res.stdout, stderr=res.stderr,
                        timed_out=res.timed_out, truncated=res.truncated)  # fmt: skip


async def run_upload(
    sandbox: Sandbox, task: Task, req: UploadRequest, limits: SessionLimits
) -> None:
    path = sandbox_path(task, req.path)
    if req.base64:
        if len(req.content) > (limits.upload_max * 4) // 3 + 4:
            raise SessionRefused(413, f"the upload is over {limits.upload_max} bytes")
        try:
            data = base64.b64decode(req.content, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise SessionRefused(422, f"the content is not base64: {exc}") from exc
    else:
        data = req.content.encode()
    if len(data) > limits.upload_max:
        raise SessionRefused(413, f"the upload is over {limits.upload_max} bytes")
    res = await sandbox.exec(
        ["sh", "-c", _UPLOAD, "sh", path, f"{req.mode:o}"],
        input=data,
        timeout=FILE_TIMEOUT_S,
        cwd=task.workdir,
        user=agent_user(task),
        output_cap=1 << 14,
    )
    if not res.ok:
        why = (res.stderr or res.stdout).strip()[-300:]
        raise SessionRefused(409, f"cannot write {path[:200]}: {why or 'timed out'}")


async def run_download(
    sandbox: Sandbox, task: Task, path: str, limits: SessionLimits
) -> DownloadResponse:
    full = sandbox_path(task, path)
    kit = sandbox.grading_kit()
    b64 = f"{kit}/busybox" if kit else ""  # crucible's own busybox, else the image's base64
    cap = limits.download_max
    res = await sandbox.exec(
        ["sh", "-c", _DOWNLOAD, "sh", full, str(cap + 1), b64],
        timeout=FILE_TIMEOUT_S,
        cwd=task.workdir,
        user=agent_user(task),
        output_cap=(cap + 1) * 2 + 4096,
    )
    if res.exit_code == 44:
        raise SessionRefused(404, f"no such file: {full[:200]}")
    if res.exit_code == 45:
        raise SessionRefused(422, f"not a regular file (a link, a folder, a device): {full[:200]}")
    if res.exit_code == 46:
        raise SessionRefused(403, f"the agent user may not read {full[:200]}")
    if not res.ok or res.truncated or res.stderr.strip():  # a read that failed midway
        why = "timed out" if res.timed_out else (res.stderr or res.stdout).strip()[-300:]
        raise SessionRefused(409, f"cannot read {full[:200]}: {why}")
    try:
        data = base64.b64decode("".join(res.stdout.split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SessionRefused(409, f"cannot read {full[:200]}: {exc}") from exc
    if len(data) > cap:
        raise SessionRefused(413, f"{full[:200]} is over {cap} bytes")
    return DownloadResponse(path=full, content=base64.b64encode(data).decode(), base64=True)
