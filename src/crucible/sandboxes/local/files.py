"""File operations of a live `local` sandbox: read, write, upload, download and collect.

Served from the host through the sandbox root's directory handle, walked
without following links (hostfs.py); what cannot be served that way (a path
under a read-only host mount, a symlink on the way) goes through an exec.
Downloads are collections (sandboxes/collect): capped, sparse, links recorded
as text, never made on the host.
"""

from __future__ import annotations

import asyncio
import errno
import io
import os
import shlex
import tarfile
from pathlib import Path

from crucible.sandboxes import proc
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.collect.manifest import DOWNLOAD, STREAM_BYTES, Budget
from crucible.sandboxes.collect.sink import Sink
from crucible.sandboxes.collect.tar import collect_tar
from crucible.sandboxes.collect.tree import collect_tree, is_empty, is_small
from crucible.sandboxes.local import hostfs
from crucible.sandboxes.local.init import CTL

INLINE_BYTES = 1 << 20
INLINE_ENTRIES = 256
INLINE_COLLECT_BYTES = 256 << 10  # a folder of a few small files is collected inline
INLINE_COLLECT_ENTRIES = 16
# Top-level names bound from the host (read-only) or made by bwrap: never served from the host.
MOUNTED = ("usr", "etc", "proc", "dev", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "sys")
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class LocalFiles:
    """The file half of LocalSandbox (a mixin): needs its spec, root handle and `_run`."""

    spec: SandboxSpec
    _root_fd: int
    host_owner: tuple[int, int]  # what the host creates inside belongs to it

    def _check(self) -> None:
        raise NotImplementedError

    async def _run(
        self, script: str, *, input: bytes | None, timeout: float | None, output_cap: int
    ) -> tuple[int, bytes, bytes, bool, bool, str]:
        raise NotImplementedError

    def _host_parts(self, path: str) -> list[str] | None:
        """The path's names under the sandbox root when it can be served from the host."""
        if not path.startswith("/"):
            path = f"{self.spec.workdir}/{path}"
        parts = [p for p in os.path.normpath(path).split("/") if p]
        if not parts or parts[0] in MOUNTED or parts[0] == CTL[1:]:
            return None
        return parts

    async def read_file(self, path: str) -> bytes:
        self._check()
        parts = self._host_parts(path)
        if parts is not None:
            try:
                return hostfs.read_file(self._root_fd, parts)
            except hostfs.Unsafe:
                pass
            except NotADirectoryError as exc:
                raise FileNotFoundError(errno.ENOENT, "no such file in sandbox", path) from exc
        q = shlex.quote(path)
        rc, out, err, _, _, _ = await self._run(
            f"[ -e {q} ] || exit 44\n[ -d {q} ] && exit 45\nexec cat -- {q}\n",
            input=None,
            timeout=600,
            output_cap=1 << 40,
        )
        if rc == 44:
            raise FileNotFoundError(errno.ENOENT, "no such file in sandbox", path)
        if rc == 45:
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        if rc != 0:
            raise _file_error(f"read_file {path}", err)
        return out

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        self._check()
        raw = data.encode() if isinstance(data, str) else data
        parts = self._host_parts(path)
        if parts is not None:
            try:
                hostfs.write_file(self._root_fd, parts, raw, mode, self.host_owner)
                return
            except hostfs.Unsafe:
                pass
        q = shlex.quote(path)
        rc, _, err, _, _, _ = await self._run(
            f'mkdir -p -- "$(dirname -- {q})" && cat > {q} && chmod {mode & 0o7777:o} -- {q}\n',
            input=raw,
            timeout=600,
            output_cap=1 << 16,
        )
        if rc != 0:
            raise _file_error(f"write_file {path}", err)

    async def upload_dir(self, src: Path, dst: str) -> None:
        self._check()
        if not os.path.isdir(src):  # noqa: ASYNC240 (one stat)
            raise FileNotFoundError(errno.ENOENT, "no such directory", str(src))
        parts = self._host_parts(dst)
        if parts is not None:
            try:
                try:  # small trees (a task's tests/, solution/) inline: a thread hop costs more
                    budget = hostfs.Budget(INLINE_BYTES, INLINE_ENTRIES)
                    hostfs.upload_tree(str(src), self._root_fd, parts, budget, self.host_owner)
                except hostfs.OverBudget:
                    await asyncio.to_thread(
                        hostfs.upload_tree,
                        str(src),
                        self._root_fd,
                        parts,
                        hostfs.UNLIMITED,
                        self.host_owner,
                    )
                return
            except hostfs.Unsafe:
                pass
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(str(src), arcname=".")
        q = shlex.quote(dst)
        rc, _, err, _, _, _ = await self._run(
            f"mkdir -p -- {q} && tar -x -f - -C {q} --no-same-owner\n",
            input=buf.getvalue(),
            timeout=600,
            output_cap=1 << 16,
        )
        if rc != 0:
            raise _file_error(f"upload_dir {dst}", err)

    async def download_dir(self, src: str, dst: Path) -> None:
        """Collected by the same rules as a trial's logs (links recorded, not made), wider caps."""
        sink = Sink(src, Path(dst), Budget.of(DOWNLOAD))
        await self.collect_into(src, sink)

    async def collect_into(self, src: str, sink: Sink) -> None:
        """Walk src from the root fd, links never followed (see sandboxes/collect/tree.py)."""
        self._check()
        parts = self._host_parts(src)
        if parts is None:  # under a read-only host mount: a tar made inside, read capped
            await self._collect_by_tar(src, sink)
            return
        try:
            fd = hostfs.open_dir(self._root_fd, parts)
        except hostfs.Unsafe:
            sink.note((), "symlink", "a link or a file on the way: not followed", truncated=True)
            return
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise FileNotFoundError(errno.ENOENT, "no such directory in sandbox", src) from exc
        if is_empty(fd):  # the common case costs no thread hop and no mkdir on the host
            os.close(fd)
            return
        if is_small(fd, INLINE_COLLECT_ENTRIES, INLINE_COLLECT_BYTES):  # a reward, a log:
            collect_tree(fd, sink)  # on the spot, as a thread hop costs more
            return
        await asyncio.to_thread(collect_tree, fd, sink)  # the thread owns (closes) fd

    async def _collect_by_tar(self, src: str, sink: Sink) -> None:
        q = shlex.quote(src)
        # A sink that takes one entry (an artifact) gets a tar of that entry alone.
        what = "." if sink.only is None else f"-- {shlex.quote(sink.only)}"
        rc, out, err, _, _, _ = await self._run(
            f"[ -d {q} ] || exit 44\nexec tar -c -f - -C {q} {what}\n",
            input=None,
            timeout=600,
            output_cap=min(sink.limits.stream_bytes, STREAM_BYTES),  # held in memory
        )
        if rc == 44:
            raise FileNotFoundError(errno.ENOENT, "no such directory in sandbox", src)
        if rc != 0 and not out:
            raise _file_error(f"download_dir {src}", err)
        await asyncio.to_thread(collect_tar, [out], sink, strip=0)


def write_new(dfd: int, name: str, data: bytes) -> None:
    fd = os.open(name, _NEW_FLAGS, 0o644, dir_fd=dfd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _file_error(what: str, err: bytes) -> OSError:
    """A file operation refused inside the sandbox (a path problem, not the transport)."""
    msg = f"{what}: {proc.decode(err).strip()[:500]}"
    if "Permission denied" in msg or "Read-only" in msg:
        return PermissionError(errno.EACCES, msg)
    return OSError(errno.EIO, msg)
