"""Buildah as BUILD_USER, the unprivileged user crucible builds task images as when run by root.

scripts/setup-images.sh makes the user (a system user, home BUILD_HOME, mode 0700) and
gives it 64 Ki subordinate ids from buildiso.BUILD_UID_BASE in /etc/subuid and
/etc/subgid, so its rootless Buildah maps a build's uid 0 to the user and every other id
into that range. Its storage is its own (under BUILD_HOME); root's Buildah storage stays
the one crucible finds, exports and names images in. So one build goes:

1. the context is copied into a stage folder (root's, outside BUILD_HOME; links copied as links) and
   given to the user: the task's folder need not be readable by it;
2. each base image the Dockerfile names that the user's storage lacks and root's has is
   handed over once (`buildah push` to a `dir:` copy, pulled by the user);
3. the user's Buildah builds (buildiso.run_build: in a network namespace of its own);
4. the result is handed back the same way, uncompressed, so root's storage reuses the
   layers it has; the image id (its config's digest) is the same in both.

Steps 2 and 4 read only what the other side wrote; nothing of the build runs as root.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from crucible.errors import SandboxFailed, TaskInvalid
from crucible.sandboxes.proc import dies_with_parent

BUILD_USER = "crucible-build"
BUILD_HOME = Path("/var/lib/crucible/build")
RUNTIME_ROOT = Path("/run/crucible")
SETUP_HINT = "run scripts/setup-images.sh as root (it makes the build user and its ids)"

# What root's Buildah is ever asked to hand over: a registry name or an id, nothing with
# a store spec (`[`), an option (`-`) or a space.
_PLAIN_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")
_FROM = re.compile(r"(?im)^\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?")


@dataclass(frozen=True)
class BuildUser:
    uid: int
    gid: int

    @property
    def runtime_dir(self) -> Path:
        return RUNTIME_ROOT / f"build-{self.uid}"

    def env(self) -> dict[str, str]:
        """The user's whole environment: nothing of crucible's (keys, tokens) goes in."""
        return {
            "HOME": str(BUILD_HOME),
            "XDG_RUNTIME_DIR": str(self.runtime_dir),
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
        }

    def prefix(self) -> list[str]:
        """argv prefix that runs the rest as the user, with no supplementary groups."""
        setpriv = shutil.which("setpriv") or "setpriv"
        return [setpriv, f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--"]


def find_user() -> BuildUser | None:
    """The build user, when it exists and has subordinate ids; else None."""
    try:
        pw = pwd.getpwnam(BUILD_USER)
    except KeyError:
        return None
    for table in ("/etc/subuid", "/etc/subgid"):
        try:
            lines = Path(table).read_text().splitlines()
        except OSError:
            return None
        if not any(ln.split(":")[0] in (BUILD_USER, str(pw.pw_uid)) for ln in lines):
            return None
    return BuildUser(pw.pw_uid, pw.pw_gid)


def require_user() -> BuildUser:
    user = find_user()
    if user is None:
        raise SandboxFailed(
            f"crucible builds task images as the unprivileged user {BUILD_USER!r} with "
            "subordinate ids, and this machine has none",
            hint=SETUP_HINT,
        )
    return user


def base_refs(dockerfile_text: str) -> list[str]:
    """The images the Dockerfile's FROM lines name (not its stages, scratch, or ARGs)."""
    stages: set[str] = set()
    refs: list[str] = []
    for ref, alias in _FROM.findall(dockerfile_text):
        if ref.lower() != "scratch" and "$" not in ref and ref not in stages and ref not in refs:
            refs.append(ref)
        if alias:
            stages.add(alias)
    return refs


def _chown_tree(root: Path, user: BuildUser) -> None:
    """Give a tree root made to the user, deepest first: a folder becomes the user's only
    after everything under it, so the user can never swap a folder for a link to a host
    path that a later lchown then walks through."""
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), user.uid, user.gid)
    os.lchown(root, user.uid, user.gid)


# Stages live outside BUILD_HOME: the user owns every name in its home and could swap one
# for a link to /etc that root then writes or chowns through (a build step that escaped
# its container would run as that user). STAGE_ROOT and each stage are root's; the user
# writes only into its `out` folder, and gets its context once the copy is done.
STAGE_ROOT = Path("/var/lib/crucible/stage")
STORAGE_CONF = BUILD_HOME / ".config" / "containers" / "storage.conf"
# Rootless storage defaults to vfs here (a full copy of the tree per layer: a one-step
# build took ~30 s); the kernel's overlay in a user namespace is native since Linux 5.13.
STORAGE_CONF_TEXT = '[storage]\ndriver = "overlay"\n'
# Run as the user, so that a link it left in its home reaches only what it may write.
_STORAGE_SCRIPT = (
    'c="$HOME/.config/containers/storage.conf"; [ "$(cat "$c" 2>/dev/null)" = "$1" ] && exit 0; '
    'rm -rf "$HOME/.local/share/containers" && mkdir -p "${c%/*}" && printf "%s\\n" "$1" >"$c"'
)


def _ensure_storage(user: BuildUser) -> None:
    """Blocking: the user's storage is overlay; storage made before with another driver
    (it is only this cache) is removed first, since the driver refuses to switch."""
    import subprocess

    text = STORAGE_CONF_TEXT.rstrip("\n")
    argv = [*user.prefix(), "sh", "-c", _STORAGE_SCRIPT, "sh", text]
    res = subprocess.run(argv, env=user.env(), capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise SandboxFailed(f"setting up {BUILD_USER}'s storage failed: {res.stderr[-300:]}")


class Stage:
    """One build's folder under STAGE_ROOT, root's (group: the user's); removed by `close`."""

    def __init__(self, user: BuildUser) -> None:
        self.user = user
        _ensure_storage(user)
        user.runtime_dir.mkdir(parents=True, exist_ok=True)
        os.chown(user.runtime_dir, user.uid, user.gid)
        os.chmod(user.runtime_dir, 0o700)
        STAGE_ROOT.mkdir(parents=True, exist_ok=True)
        os.chmod(STAGE_ROOT, 0o711)
        self.root = STAGE_ROOT / secrets.token_hex(8)
        self.root.mkdir(mode=0o750)
        os.chown(self.root, 0, user.gid)
        self.out = self.root / "out"  # the only place the user writes: iid, its push
        self.out.mkdir(mode=0o700)
        os.chown(self.out, user.uid, user.gid)

    def context(self, src: Path) -> Path:
        """Blocking: the user's copy of the build context (links stay links)."""
        dest = self.root / "context"
        shutil.copytree(src, dest, symlinks=True)
        _chown_tree(dest, self.user)
        return dest

    def read_out(self, name: str, limit: int = 4096) -> str:
        """A small file the user wrote in `out`, never through a link."""
        fd = os.open(self.out / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            return fh.read(limit).decode(errors="replace")

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


async def run_tool(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        start_new_session=True,
        preexec_fn=dies_with_parent(),
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 1800)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        await proc.wait()
        raise
    return proc.returncode or 0, (out or b"").decode(errors="replace")


async def as_user(user: BuildUser, buildah: str, *args: str) -> tuple[int, str]:
    return await run_tool(reaped([*user.prefix(), buildah, *args]), user.env())


def reaped(argv: list[str]) -> list[str]:
    """`argv` (which changes its ids) under a root shell that is pid 1 of a pid namespace
    of its own: the shell keeps the kill signal that setpriv's change of ids drops, so
    the command and all it starts die with crucible, a forced exit included."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return argv
    return [unshare, "--pid", "--fork", "--kill-child", "--mount-proc", "--",
            "sh", "-c", '"$@"; exit $?', "crucible-tool", *argv]  # fmt: skip


async def _checked(what: str, got: tuple[int, str]) -> str:
    rc, out = got
    if rc != 0:
        raise SandboxFailed(f"{what} failed: {out.strip()[-500:]}")
    return out


async def hand_bases(stage: Stage, buildah: str, dockerfile_text: str) -> None:
    """Give the user's storage each base image it lacks that root's storage has."""
    for n, ref in enumerate(base_refs(dockerfile_text)):
        if not _PLAIN_REF.fullmatch(ref):  # a transport, a store spec, an option: never
            raise TaskInvalid(f"its image cannot be built: FROM {ref!r} is not an image name")
        if (await as_user(stage.user, buildah, "inspect", "--type", "image", ref))[0] == 0:
            continue
        if (await run_tool([buildah, "inspect", "--type", "image", ref]))[0] != 0:
            continue  # neither has it: the build says so in its log
        copy = stage.root / f"base-{n}"  # root's; the user reads it through its group
        await _checked(
            f"handing {ref} over", await run_tool([buildah, "push", "--quiet", ref, f"dir:{copy}"])
        )
        await asyncio.to_thread(_group_readable, copy, stage.user.gid)
        out = await _checked(
            f"taking {ref} over",
            await as_user(stage.user, buildah, "pull", "--quiet", f"dir:{copy}"),
        )
        await _checked("naming it", await as_user(stage.user, buildah, "tag", out.split()[-1], ref))
        await asyncio.to_thread(shutil.rmtree, copy, True)


def _group_readable(tree: Path, gid: int) -> None:
    """Root's push (plain files, in a stage the user cannot write) made readable to the
    user through its group, so nothing in it ever becomes the user's."""
    for dirpath, _dirnames, filenames in os.walk(tree):
        for path, mode in [(dirpath, 0o750)] + [
            (os.path.join(dirpath, f), 0o640) for f in filenames
        ]:
            os.lchown(path, 0, gid)
            os.chmod(path, mode)


async def hand_back(stage: Stage, buildah: str, image_id: str, tag: str) -> None:
    """Copy the built image into root's storage under `tag`, uncompressed."""
    copy = stage.out / "built"
    await _checked(
        "handing the built image back",
        await as_user(stage.user, buildah, "push", "--quiet", "--disable-compression", image_id, f"dir:{copy}"),
    )  # fmt: skip
    await _checked(
        "taking the built image", await run_tool([buildah, "pull", "--quiet", f"dir:{copy}"])
    )
    await _checked("naming the built image", await run_tool([buildah, "tag", image_id, tag]))
    # The user's copy goes (its layers stay, as the next build's cache).
    await as_user(stage.user, buildah, "rmi", "--force", tag)
