"""What the engine needs of a Docker sandbox once the agent phase is over (a
mixin of DockerSandbox): a reset of a directory checked from the host,
liveness and how the container ended, and its changes to system paths.

Docker gives no handle on the container's files but the Engine API, so the
reset itself is a root exec (rm + mkdir, the container's own tools); whether
it held is then read from the host through the archive API: the path must be
a real directory (no link) whose archive holds nothing but itself.
"""

from __future__ import annotations

import io
import logging
import posixpath
import tarfile
from collections.abc import Iterable
from typing import Any

from crucible.records.text import storable_text
from crucible.sandboxes.docker.files import dirs_tar
from crucible.sandboxes.streams import ChunkReader

log = logging.getLogger(__name__)

RESET_SCRIPT = 'rm -rf -- "$1" && mkdir -p -- "$1" && chmod 0755 -- "$1"'

# Go's fs.FileMode bits in the engine's path stat (X-Docker-Container-Path-Stat).
_MODE_DIR = 1 << 31
_MODE_SYMLINK = 1 << 27
_MODE_SPECIAL = (1 << 23) | (1 << 22) | (1 << 20)  # setuid, setgid, sticky

SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/etc")
# The engine bind-mounts these per container; they are not the agent's doing.
ENGINE_FILES = frozenset(
    {"/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/etc/mtab", "/usr/sbin/docker-init"}
)
MAX_CHANGES = 500
_KIND = {0: "changed", 1: "added", 2: "deleted"}


def ended(state: dict[str, Any]) -> str:
    """How a container ended, from its State."""
    oom = ", killed for memory" if state.get("OOMKilled") else ""
    return f"state {state.get('Status')}, exit code {state.get('ExitCode')}{oom}"


def stat_problem(stat: dict[str, Any] | None) -> str | None:
    """Why the engine's stat of a reset path is not a plain directory with the
    modes crucible makes (None: it is)."""
    mode = int((stat or {}).get("mode") or 0)
    if (stat or {}).get("linkTarget") or mode & _MODE_SYMLINK:
        return "a symlink"
    if not mode & _MODE_DIR:
        return "not a directory"
    if mode & _MODE_SPECIAL or (mode & 0o777) not in (0o755, 0o777):
        return f"mode {mode & 0o777:o}"
    return None


def extra_members(chunks: Iterable[bytes]) -> list[str]:
    """Names in a directory's archive besides the directory itself (the first two at most)."""
    extra: list[str] = []
    with tarfile.open(fileobj=io.BufferedReader(ChunkReader(chunks), 1 << 16), mode="r|") as tar:
        for i, member in enumerate(tar):
            if i == 0 and member.isdir() and "/" not in member.name.rstrip("/"):
                continue
            extra.append(member.name)
            if len(extra) >= 2:
                break
    return extra


def _is_system(path: str) -> bool:
    return path not in ENGINE_FILES and any(
        path == d or path.startswith(d + "/") for d in SYSTEM_DIRS
    )


def system_changes(diff: list[dict[str, Any]] | None) -> list[str]:
    """From the container diff: system paths changed, added or deleted, as
    "added /usr/bin/x". A changed directory that only holds other changes is left
    out (the engine lists every parent of a change)."""
    entries = [
        (posixpath.normpath(str(d.get("Path", ""))), int(d.get("Kind", 0))) for d in diff or []
    ]
    # Parents of any change (the engine's own files included) are noise; found in
    # one pass, as an agent may have changed a great many files.
    parents = {posixpath.dirname(p) for p, _ in entries}
    for p in list(parents):
        while p not in ("/", ""):
            p = posixpath.dirname(p)
            parents.add(p)
    out = []
    for path, kind in sorted(entries):
        if not _is_system(path) or (kind == 0 and path in parents):
            continue
        out.append(f"{_KIND.get(kind, 'changed')} {storable_text(path)}")
    if len(out) > MAX_CHANGES:
        return [*out[:MAX_CHANGES], f"... {len(out) - MAX_CHANGES} more"]
    return out


class DockerGrading:
    """Needs the sandbox's engine calls: _call, _api, _get, _put, _run_quiet, _abs, _running."""

    id: str
    name: str
    _closed: bool
    _api: Any

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def _get(self, path: str, shown: str | None = None, with_stat: bool = False) -> Any:
        raise NotImplementedError

    async def _put(self, where: str, data: Any, what: str) -> None:
        raise NotImplementedError

    async def _run_quiet(self, argv: list[str], timeout: float = 30.0) -> tuple[str, int]:
        raise NotImplementedError

    async def _running(self) -> bool:
        raise NotImplementedError

    async def _state(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def _abs(self, path: str) -> str:
        raise NotImplementedError

    async def reset_dir(self, path: str) -> None:
        target = self._abs(path)
        # Read first: with no agent process left, a folder that is already a plain,
        # empty directory (the usual case) needs nothing, and a missing one is made
        # by the engine itself; only anything else takes a root exec.
        try:
            problem = await self._reset_problem(target)
        except FileNotFoundError:  # nothing runs that could put anything there since
            await self._put("/", dirs_tar([target], 0o755), path)
            return
        if problem is None:
            return
        out, code = await self._run_quiet(
            ["sh", "-c", RESET_SCRIPT, "crucible-reset", target], timeout=120
        )
        if code != 0:
            raise OSError(f"cannot reset {path}: {out.strip()[-300:]}")
        try:
            problem = await self._reset_problem(target)
        except FileNotFoundError:
            problem = "missing"
        if problem is not None:
            raise OSError(f"{path} after its reset: {problem}")

    async def _reset_problem(self, target: str) -> str | None:
        """Why `target` is not a plain, empty directory, read from the host (None: it is)."""
        chunks, stat = await self._get(target, with_stat=True)
        extra = await self._call(extra_members, chunks)
        problem = stat_problem(stat)
        if problem is None and extra:
            problem = "not empty: " + ", ".join(extra)
        return problem

    async def alive(self) -> bool:
        return not self._closed and await self._running()

    async def ended_by_contents(self) -> str | None:
        # Exited, not removed by us, while the engine answers: only its contents end a
        # container (a `kill -9 -1` takes the keeper, and docker-init follows its
        # child), or its own memory cap does.
        state = None if self._closed else await self._state()
        if state is None or state.get("Running") or state.get("Status") not in ("exited", "dead"):
            return None
        return f"its main process ended: {ended(state)}"

    async def changed_system_paths(self) -> list[str] | None:
        try:
            diff = await self._call(self._api.diff, self.id)
        except Exception as e:  # a record, not a verdict: never fail a trial over it
            log.warning("container diff of %s failed: %s", self.name, e)
            return None
        return system_changes(diff)
