"""File transfer for a Modal sandbox (`ModalFiles`, the base of ModalSandbox):
single files through the filesystem API, directories as tar archives.

A file over the filesystem API's read size limit (SandboxFilesystemFileTooLargeError,
modal/sandbox/_filesystem.py:137; `copy_to_local` has the same limit, :296) is
read in pieces: the sandbox copies each piece to a scratch file with `dd`,
and the host reads those, halving the piece until one fits (issue 18, defect 9).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import shlex
import tarfile
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from crucible.errors import CrucibleError, SandboxFailed
from crucible.sandboxes.base import ExecResult, Sandbox
from crucible.sandboxes.collect.sink import Sink
from crucible.sandboxes.collect.tar import collect_tar, tar_allowance
from crucible.sandboxes.modal.sdk import Sdk

PIECE_MAX = 64 << 20
PIECE_MIN = 64 << 10  # the dd block; every piece is a whole number of them
READ_MAX = 4 << 30  # a file the host will read at all (a hostile one may be endless)


class ModalFiles(Sandbox, abc.ABC):
    _sdk: Sdk
    _sb: Any
    _closed: bool

    @abc.abstractmethod
    def _failed(self, what: str, exc: BaseException) -> CrucibleError: ...

    @abc.abstractmethod
    async def _check(self, command: str, what: str) -> ExecResult: ...

    def _abs(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.spec.workdir.rstrip('/')}/{path}"

    async def _fs(self) -> Any:
        if self._closed:
            raise SandboxFailed("file access on a closed modal sandbox")
        return self._sdk.prop(self._sb, "Sandbox.filesystem")

    async def _write(self, path: str, payload: bytes) -> None:
        fs = await self._fs()
        try:
            await self._sdk.aio(fs, "SandboxFilesystem.write_bytes", payload, path)
        except Exception as exc:
            raise self._failed(f"write_file {path}", exc) from exc

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        path = self._abs(path)
        await self._write(path, data.encode() if isinstance(data, str) else bytes(data))
        await self._check(f"chmod {mode & 0o7777:o} {shlex.quote(path)}", f"chmod {path}")

    async def read_file(self, path: str) -> bytes:
        path = self._abs(path)
        fs = await self._fs()
        try:
            data = await self._sdk.aio(fs, "SandboxFilesystem.read_bytes", path)
        except Exception as exc:
            if self._sdk.is_exc(exc, "SandboxFilesystemNotFoundError"):
                raise FileNotFoundError(path) from None
            if self._sdk.is_exc(exc, "SandboxFilesystemIsADirectoryError"):
                raise IsADirectoryError(path) from None
            if self._sdk.is_exc(exc, "SandboxFilesystemFileTooLargeError"):
                return await self._read_pieces(fs, path)
            raise self._failed(f"read_file {path}", exc) from exc
        return bytes(data)

    async def _read_pieces(self, fs: Any, path: str) -> bytes:
        q = shlex.quote(path)
        size_res = await self.exec(["sh", "-c", f"[ -f {q} ] || exit 45; wc -c < {q}"], cwd="/")
        if size_res.exit_code == 45:
            # the sandbox's doing (a link to a device, say): the reader's error, not the provider's
            raise OSError(f"{path} is not a regular file")
        if not size_res.ok:
            raise SandboxFailed(f"modal sandbox: size of {path}: {size_res.stderr.strip()[:300]}")
        size = int(size_res.stdout.strip() or 0)
        if size > READ_MAX:
            raise OSError(f"{path}: {size} bytes, over the {READ_MAX} a read may return")
        scratch = f"/tmp/.crucible-piece-{uuid.uuid4().hex}"
        out = bytearray()
        piece = PIECE_MAX
        try:
            while len(out) < size:
                blocks = piece // PIECE_MIN
                await self._check(
                    f"dd if={q} of={scratch} bs={PIECE_MIN} skip={len(out) // PIECE_MIN} "
                    f"count={blocks} 2>/dev/null",
                    f"read_file {path}",
                )
                try:
                    got = await self._sdk.aio(fs, "SandboxFilesystem.read_bytes", scratch)
                except Exception as exc:
                    if self._sdk.is_exc(exc, "SandboxFilesystemFileTooLargeError") and (
                        piece > PIECE_MIN
                    ):
                        piece //= 2
                        continue
                    raise self._failed(f"read_file {path}", exc) from exc
                if not got:
                    break  # the file shrank under us
                out += got
        finally:
            with contextlib.suppress(CrucibleError):
                await self._check(f"rm -f {scratch}", "scratch cleanup")
        return bytes(out)

    async def upload_dir(self, src: Path, dst: str) -> None:
        dst = self._abs(dst)
        remote_tar = f"/tmp/.crucible-up-{uuid.uuid4().hex}.tar"
        with tempfile.TemporaryDirectory(prefix="crucible-modal-") as tmp:
            local_tar = Path(tmp) / "up.tar"
            await asyncio.to_thread(_tar_dir, Path(src), local_tar)
            fs = await self._fs()
            try:
                await self._sdk.aio(
                    fs, "SandboxFilesystem.copy_from_local", str(local_tar), remote_tar
                )
            except Exception as exc:
                raise self._failed(f"upload_dir {dst}", exc) from exc
        q, t = shlex.quote(dst), shlex.quote(remote_tar)
        await self._check(
            f"mkdir -p {q} && tar -xf {t} -C {q} --no-same-owner; rc=$?; rm -f {t}; exit $rc",
            f"upload_dir {dst}",
        )

    async def download_dir(self, src: str, dst: Path) -> None:
        src = self._abs(src)
        q = shlex.quote(src)
        async with self._tar_of(f"[ -d {q} ] || exit 44; tar -cf {{t}} -C {q} .", src) as tar:
            await asyncio.to_thread(_untar, tar, Path(dst))

    async def collect_into(self, src: str, sink: Sink) -> None:
        """The folder `src` into the sink: a tar of it, read by the collection rules."""
        src = self._abs(src)
        q = shlex.quote(src)
        await self._collect_tar(f"[ -d {q} ] || exit 44", f"-C {q} .", src, sink)

    async def collect_entry_into(self, parent: str, name: str, sink: Sink) -> None:
        """One entry of `parent` into the sink (whose `only` is `name`): a tar of that entry
        alone, read by the collection rules (links recorded, never made)."""
        parent = self._abs(parent)
        q, n = shlex.quote(parent), shlex.quote(name)
        test = f"[ -e {q}/{n} ] || [ -L {q}/{n} ] || exit 44"
        await self._collect_tar(test, f"-C {q} -- {n}", f"{parent}/{name}", sink)

    async def _collect_tar(self, test: str, members: str, what: str, sink: Sink) -> None:
        # Staged on the host before it is read, so cut in the sandbox: one byte over
        # what the sink can still take tells the reader it was cut (a 1 GiB file
        # never reaches the host). tar's own failure counts only below the cut.
        cap = tar_allowance(sink)
        cmd = (
            f"{test}; ( tar -cf - {members}; echo $? > {{t}}.rc ) | head -c {cap + 1} > {{t}}; "
            f'rc=$(cat {{t}}.rc); rm -f {{t}}.rc; [ "$rc" = 0 ] || '
            f'[ "$(wc -c < {{t}})" -gt {cap} ] || (echo "tar exited $rc" >&2; exit 1)'
        )
        async with self._tar_of(cmd, what) as tar:
            with tar.open("rb") as f:
                chunks = iter(lambda: f.read(1 << 20), b"")
                await asyncio.to_thread(collect_tar, chunks, sink, strip=0, cap=cap)

    @contextlib.asynccontextmanager
    async def _tar_of(self, command: str, what: str) -> AsyncIterator[Path]:
        """Run `command` (its `{t}`: a scratch tar in the sandbox; exit 44: absent) and
        yield the tar copied to a private host file."""
        remote_tar = f"/tmp/.crucible-down-{uuid.uuid4().hex}.tar"
        res = await self.exec(
            ["sh", "-c", command.format(t=shlex.quote(remote_tar))], timeout=600, cwd="/"
        )
        try:
            if res.exit_code == 44:
                raise FileNotFoundError(what)
            if not res.ok:
                raise SandboxFailed(
                    f"modal sandbox download of {what} failed: {res.stderr.strip()[:500]}"
                )
            with tempfile.TemporaryDirectory(prefix="crucible-modal-") as tmp:
                local_tar = Path(tmp) / "down.tar"
                fs = await self._fs()
                try:
                    await self._sdk.aio(
                        fs, "SandboxFilesystem.copy_to_local", remote_tar, str(local_tar)
                    )
                except Exception as exc:
                    if not self._sdk.is_exc(exc, "SandboxFilesystemFileTooLargeError"):
                        raise self._failed(f"download {what}", exc) from exc
                    local_tar.write_bytes(await self._read_pieces(fs, remote_tar))
                yield local_tar
        finally:
            with contextlib.suppress(CrucibleError):
                await self.exec(["rm", "-f", remote_tar], timeout=60, cwd="/")


def _tar_dir(src: Path, out: Path) -> None:
    if not src.is_dir():
        raise FileNotFoundError(str(src))
    with tarfile.open(out, "w") as tar:
        for child in sorted(src.iterdir()):
            tar.add(child, arcname=child.name)


def _untar(archive: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        # "data" refuses absolute paths, links out of dst and device files.
        tar.extractall(dst, filter="data")
