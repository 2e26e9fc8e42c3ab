"""What the engine needs of a Docker sandbox once the agent phase is over (a
mixin of DockerSandbox): a reset of a directory checked from the host,
liveness and how the container ended, and its changes to system paths.

Docker gives no handle on the container's files but the Engine API, so the
reset itself is a root exec (rm + mkdir, the container's own tools); whether
it held is then read from the host through the archive API: the path must be
a real directory (no link) whose archive holds nothing but itself.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import posixpath
import stat
import tarfile
from collections.abc import Callable, Iterable
from typing import Any

from crucible.records.tamper import ChangeKind, TamperRecord
from crucible.sandboxes import tamper
from crucible.sandboxes.docker.archive import ArchiveFiles
from crucible.sandboxes.docker.files import dirs_tar
from crucible.sandboxes.streams import ChunkReader

log = logging.getLogger(__name__)

RESET_SCRIPT = 'rm -rf -- "$1" && mkdir -p -- "$1" && chmod 0755 -- "$1"'

# Go's fs.FileMode bits in the engine's path stat (X-Docker-Container-Path-Stat).
_MODE_DIR = 1 << 31
_MODE_SYMLINK = 1 << 27
_MODE_SPECIAL = (1 << 23) | (1 << 22) | (1 << 20)  # setuid, setgid, sticky

# The engine bind-mounts these per container; they are not the agent's doing.
ENGINE_FILES = frozenset(
    {"/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/etc/mtab", "/usr/sbin/docker-init"}
)
_KIND: dict[int, ChangeKind] = {0: "modified", 1: "added", 2: "removed"}
# The agent's HOME (root's, or a user's): only the image's code in it is recorded.
HOMES = ("/root", "/home")
STAT_CAP = 200  # files whose mode is asked of the engine, per record


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


def diff_entries(
    diff: list[dict[str, Any]] | None, own: list[str], homes: tuple[str, ...] = ()
) -> list[tuple[str, ChangeKind]]:
    """From the container diff: the changes outside the agent's own places, as (path,
    kind); in `homes`, only the image's files modified or removed (tamper.kept_in_home
    then keeps its code). A changed directory that only holds other changes is left out
    (the engine lists every parent of a change), and so is an added one that holds any."""
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
    out: list[tuple[str, ChangeKind]] = []
    mine = tamper.places(own)
    home = tamper.places(homes)
    for path, kind in sorted(entries):
        if path in ENGINE_FILES or path in ("/", "") or mine(path):
            continue
        if kind == 1 and home(path):
            continue
        if kind != 2 and path in parents:
            continue
        out.append((path, _KIND.get(kind, "modified")))
    return out


class DockerGrading(ArchiveFiles):
    """Needs the sandbox's engine calls: those of ArchiveFiles, _api, _run_quiet, _running."""

    id: str
    _closed: bool
    _api: Any
    kit: str | None

    async def _run_quiet(self, argv: list[str], timeout: float = 30.0) -> tuple[str, int]:
        raise NotImplementedError

    async def _running(self) -> bool:
        raise NotImplementedError

    async def _state(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def _sh(self) -> list[str]:
        """The shell of our own scripts: the kit's busybox (its applets before PATH's)."""
        return [f"{self.kit}/busybox", "sh"] if self.kit else ["sh"]

    def grading_kit(self) -> str | None:
        return self.kit

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
            [*self._sh(), "-c", RESET_SCRIPT, "crucible-reset", target], timeout=120
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

    async def system_changes(self) -> TamperRecord | None:
        try:
            diff = await self._call(self._api.diff, self.id)
        except Exception as e:  # a record, not a verdict: never fail a trial over it
            log.warning("container diff of %s failed: %s", self.name, e)
            return None
        own = [self.spec.workdir, *([self.kit] if self.kit else [])]
        homes = tuple(h for h in HOMES if not tamper.below(h, [self.spec.workdir]))
        entries = diff_entries(diff, own, homes)
        in_home = tamper.places(homes)
        asked = 0
        changes = []
        known: dict[str, bool] = {}  # the container's answer per path, asked once
        path_dirs = tamper.grading_path(await self._image_path())
        for path, kind in entries:
            exists = None
            if kind == "added" and (later := tamper.shadowed(path, path_dirs)):
                exists = await self._exists_map(later, known)
            change = tamper.classify(path, kind, None, exists, path_dirs=path_dirs)
            # The diff has no modes: asked of the engine (one call each, so capped) only
            # where an exec bit decides it, a modified file its place does not mark as code.
            if kind == "modified" and not change.code and asked < STAT_CAP:
                asked += 1
                change = tamper.classify(path, kind, await self._mode_of(path))
            if not in_home(path) or tamper.kept_in_home(change):
                changes.append(change)
        return tamper.record(changes)

    async def _image_path(self) -> str | None:
        """The container's PATH (the image's ENV, or the task's), which grading's prelude
        searches after the system folders."""
        try:
            info = await self._call(self._api.inspect_container, self.id)
        except Exception:
            return None
        env = (info.get("Config") or {}).get("Env") or []
        return next((e[5:] for e in env if isinstance(e, str) and e.startswith("PATH=")), None)

    async def _mode_of(self, path: str) -> int | None:
        """The st_mode of a path in the container (the engine's stat, no content), or None."""
        try:
            res = await self._call(
                self._api.head, self._api._url("/containers/{0}/archive", self.id),
                params={"path": path},
            )  # fmt: skip
            raw = res.headers.get("X-Docker-Container-Path-Stat")
            if res.status_code != 200 or not raw:
                return None
            go = int(json.loads(base64.b64decode(raw)).get("mode") or 0)
        except Exception:
            return None
        if go & _MODE_DIR:
            return stat.S_IFDIR | (go & 0o777)
        if go & _MODE_SYMLINK:
            return stat.S_IFLNK | (go & 0o777)
        return stat.S_IFREG | (go & 0o777)

    async def _exists_map(self, later: list[str], known: dict[str, bool]) -> Callable[[str], bool]:
        """For an added command or module: which of the paths it would shadow (later on PATH
        or sys.path, tamper.shadowed) the container holds."""
        for p in later:
            if p not in known:
                known[p] = await self._mode_of(p) is not None
        return known.__getitem__
