"""A Docker sandbox's files (a mixin of DockerSandbox): single files and folders in and
out through the engine's archive API (the streams themselves: docker/files.py).

A folder coming out is a collection (sandboxes/collect/tar.py). The engine's
archiver writes each member's header from a stat and then copies the file, so a
file that grows, shrinks or vanishes between the two (a process of the agent's
still writing, or racing on purpose) makes it end the stream mid-member. Such a
stream is read again from the start, a few times, before the break is recorded:
no process in the sandbox can make a folder's copy fail for good by racing it.
"""

from __future__ import annotations

import errno
import logging
import posixpath
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.collect.manifest import DOWNLOAD, Budget
from crucible.sandboxes.collect.sink import Sink
from crucible.sandboxes.collect.tar import collect_tar
from crucible.sandboxes.docker.files import dir_tar, read_member, single_file_tar

log = logging.getLogger(__name__)

# Go's os.FileMode bits, as the engine reports a path's stat with an archive.
_GO_MODE_DIR = 1 << 31
_GO_MODE_SYMLINK = 1 << 27
# Reads of one folder's archive before a stream that keeps breaking off is recorded.
STREAM_TRIES = 4


class ArchiveFiles:
    """Needs the sandbox's engine calls: _call, _engine, _get, _put."""

    spec: SandboxSpec
    name: str
    _engine: Any

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def _get(self, path: str, shown: str | None = None, with_stat: bool = False) -> Any:
        raise NotImplementedError

    async def _put(self, where: str, data: Any, what: str) -> None:
        raise NotImplementedError

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        raw = data.encode() if isinstance(data, str) else data
        tar = await self._engine.call(single_file_tar, self._abs(path), raw, mode)
        await self._put("/", tar, path)

    async def read_file(self, path: str) -> bytes:
        target = self._abs(path)
        for _ in range(16):  # follow symlinks, as open() would
            chunks = await self._get(target)
            data, link = await self._call(read_member, chunks, target)
            if data is not None:
                return bytes(data)
            assert link is not None
            target = posixpath.normpath(posixpath.join(posixpath.dirname(target), link))
        raise OSError(f"too many levels of symbolic links: {path}")

    async def upload_dir(self, src: Path, dst: str) -> None:
        tar = await self._engine.call(dir_tar, src, self._abs(dst))
        try:
            await self._put("/", tar, dst)
        finally:
            tar.close()

    async def download_dir(self, src: str, dst: Path) -> None:
        """Collected by the same rules as a trial's logs (links recorded, not made), wider caps."""
        await self.collect_into(src, Sink(src, Path(dst), Budget.of(DOWNLOAD)))

    async def collect_into(self, src: str, sink: Sink) -> None:
        """Stream the engine's tar of `src` into the sink (see sandboxes/collect/tar.py).

        No trailing "/.": a `src` that is itself a link arrives as one link
        member and is recorded, not followed into wherever it points.
        """

        async def folder() -> Any:
            chunks, st = await self._get(self._abs(src), shown=src, with_stat=True)
            if not (st or {}).get("mode", 0) & (_GO_MODE_DIR | _GO_MODE_SYMLINK):
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()
                raise FileNotFoundError(errno.ENOTDIR, "not a directory in the sandbox", src)
            return chunks

        await self._read_into(folder, src, sink, strip=1)

    async def collect_entry_into(self, parent: str, name: str, sink: Sink) -> None:
        """One entry of `parent` (a file or a folder, a link recorded as a link) into the
        sink, whose `only` is `name`: the engine's tar of that entry alone, not of `parent`."""
        path = posixpath.join(self._abs(parent), name)
        await self._read_into(lambda: self._get(path, shown=path), path, sink, strip=0)

    async def _read_into(
        self, archive: Callable[[], Awaitable[Any]], what: str, sink: Sink, *, strip: int
    ) -> None:
        """Collect `archive()`'s stream; one that broke off is read again from the start
        (the sink restarted), STREAM_TRIES times in all, before its break is recorded."""
        for attempt in range(STREAM_TRIES):
            if await self._call(collect_tar, await archive(), sink, strip=strip):
                return
            if attempt + 1 < STREAM_TRIES:
                log.debug(
                    "archive of %s in %s broke off (%s): reading it again",
                    what, self.name, sink.record.error,
                )  # fmt: skip
                sink.restart()

    def _abs(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.spec.workdir, path))
