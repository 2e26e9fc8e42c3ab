"""One `buildah build` of a task's Dockerfile, and the working containers it leaves removed.

Buildah keeps a working container per stage while it builds. It removes them when the
build ends, with `--force-rm` also when it fails, but a build that is killed (its
timeout, a cancelled job, a forced exit) cannot: they stayed in the store for good.

So every build is marked: Buildah records the path of the default-mounts file it was
given (`--default-mounts-file`) in each working container it makes, and each build gets
a path of its own (an empty file: no host mount goes into a RUN step either). After a
build that did not succeed, the containers that are new since it began and carry its
mark are removed, as the user that owns them; another build's containers never carry
it, so a build running beside this one, in this job or another, keeps its own.

Run by root, the build runs as builduser.BUILD_USER (buildiso.py says how it is isolated).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Any

from crucible.errors import SandboxFailed
from crucible.sandboxes.local import buildiso, builduser
from crucible.sandboxes.local.buildlog import build_failed

MARK_PREFIX = ".mounts-"
_MARK = re.compile(re.escape(MARK_PREFIX) + "[0-9a-f]{16}")
_STAGE = re.compile("[0-9a-f]{16}")  # builduser.Stage's names


async def build(
    buildah: str,
    context: Path,
    tag: str,
    log: Path,
    timeout: float,
    network: bool,
    user: builduser.BuildUser | None,
    stage: builduser.Stage | None,
) -> str:
    """Build context/Dockerfile as `tag`; its image id. TaskInvalid when it fails."""
    iid = (stage.out / "iid") if stage is not None else log.with_suffix(".iid")
    mark = (
        stage.root if stage is not None else log.parent
    ) / f"{MARK_PREFIX}{secrets.token_hex(8)}"
    # Held (a shared flock) while the build lives: a mark nobody holds is a dead build's.
    # Locked before it has its name, so no sweep ever sees it unheld.
    fresh = mark.with_name(f".fresh-{mark.name}")
    held = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    fcntl.flock(held, fcntl.LOCK_SH)
    os.rename(fresh, mark)
    if user is not None:  # root's file in root's stage, readable by the user's group
        os.fchown(held, 0, user.gid)
    argv = [*(user.prefix() if user else []), buildah, "--default-mounts-file", str(mark)]
    argv += ["build", *buildiso.build_options(network), "--pull-never", "--layers", "--force-rm"]
    # --http-proxy=false: Buildah hands the host's proxy variables (often a URL with
    # the operator's credentials) to every RUN step, a task author's code.
    argv += ["--http-proxy=false"]
    argv += ["-f", str(context / "Dockerfile"), "-t", tag, "--iidfile", str(iid), str(context)]
    before = await _containers(buildah, user)
    ok = False
    try:
        try:
            rc = await buildiso.run_build(argv, network, log, timeout, user.env() if user else None)
        except TimeoutError:
            raise build_failed(
                f"the build took more than {timeout:g}s (build_timeout_sec)", log
            ) from None
        if rc != 0:
            raise build_failed(f"buildah exited with {rc}", log)
        try:
            # The user wrote it: read without following a link it may have left there.
            text = stage.read_out("iid") if stage is not None else iid.read_text()
        except OSError as exc:
            raise SandboxFailed(f"buildah reported no image id: {exc}") from exc
        ok = True
        return text.strip().removeprefix("sha256:")
    finally:
        iid.unlink(missing_ok=True)
        if not ok:  # shielded: a cancelled build's clean-up runs to its end
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(remove_marked(buildah, user, mark, before))
        mark.unlink(missing_ok=True)
        os.close(held)


async def _tool(buildah: str, user: builduser.BuildUser | None, *args: str) -> tuple[int, str]:
    if user is not None:
        return await builduser.as_user(user, buildah, *args)
    return await builduser.run_tool([buildah, *args])


async def _containers(buildah: str, user: builduser.BuildUser | None) -> set[str]:
    """The ids of the working containers in the store the build uses."""
    rc, out = await _tool(buildah, user, "containers", "--json")
    if rc != 0:
        return set()
    try:
        rows: list[dict[str, Any]] = json.loads(out) or []
    except ValueError:
        return set()
    return {str(r.get("id")) for r in rows if r.get("id")}


async def remove_marked(
    buildah: str, user: builduser.BuildUser | None, mark: Path, before: set[str]
) -> list[str]:
    """Remove the containers made since `before` that carry the build's mark; their ids."""
    removed = []
    for cid in sorted(await _containers(buildah, user) - before):
        rc, out = await _tool(
            buildah, user, "inspect", "--type", "container", "--format",
            "{{.DefaultMountsFilePath}}", cid,
        )  # fmt: skip
        if rc == 0 and out.strip() == str(mark):
            if (await _tool(buildah, user, "rm", cid))[0] == 0:
                removed.append(cid)
    return removed


def _dead(mark: Path) -> bool | None:
    """Whether the build that made `mark` is gone: True when no process holds its flock
    (a forced exit drops it), None when there is no such file (its build removed it, or
    the record is forged), False while a build holds it."""
    try:
        fd = os.open(mark, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


async def remove_orphans(buildah: str, user: builduser.BuildUser | None) -> int:
    """Remove the working containers of crucible builds that died without removing them
    (a forced exit), and their stages; never a live build's or one crucible did not
    mark. For `crucible sandboxes cleanup`: it inspects every container in the store."""
    removed = 0
    for cid in sorted(await _containers(buildah, user)):
        rc, out = await _tool(
            buildah, user, "inspect", "--type", "container", "--format",
            "{{.DefaultMountsFilePath}}", cid,
        )  # fmt: skip
        # The record is the build user's to write: a path of its choosing ("..", a live
        # build's stage, a missing file) must never make root remove anything.
        mark = Path(out.strip())
        plain = mark.is_absolute() and ".." not in mark.parts
        if rc != 0 or not plain or not _MARK.fullmatch(mark.name):
            continue
        stage = mark.parent
        if user is not None and not (
            stage.parent == builduser.STAGE_ROOT and _STAGE.fullmatch(stage.name)
        ):
            continue  # run by root, crucible's marks are only ever in its stages
        dead = await asyncio.to_thread(_dead, mark)
        if dead is False:
            continue
        if (await _tool(buildah, user, "rm", cid))[0] == 0:
            removed += 1
        if dead and user is not None:  # the dead build's stage (root's, under STAGE_ROOT)
            await asyncio.to_thread(shutil.rmtree, stage, True)
    return removed


async def sweep() -> int:
    """remove_orphans in the store crucible's local builds use, where there is one."""
    buildah = shutil.which("buildah")
    user = builduser.find_user() if buildiso.rootful() else None
    if buildah is None or (buildiso.rootful() and user is None):
        return 0
    return await remove_orphans(buildah, user)
