"""Image layers in the local rootfs cache: each unpacked once, named by its digest, and
stacked as the overlay lower directories of every sandbox of every image that has it.

    <cache>/.layers/<diff id>-u<owner>/  one layer's tree (safetar.extract_layer: whiteouts
                                         and opaque folders as overlayfs reads them)
    <cache>/.layers/.lock                unpacks hold it shared, gc() exclusive

A layer's name is the sha256 of its uncompressed tar (the image config's
`rootfs.diff_ids`), checked against the bytes unpacked: an archive cannot file one
layer's content under another's name. An image that shares its base with others
shares those directories on disk and their pages in the page cache. A tool's archive
(`docker save` format: Buildah's `push docker-archive:`, the engine's `get_image`)
is read as a stream; layers already unpacked are skipped unread where the archive
names them by digest.

LayerStack reads an image's tree as the overlay shows it, on the host, never
following a link (imagemode.py: the image's /etc/passwd; layerdiff.py: what the
image had where a sandbox changed something).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import io
import logging
import os
import re
import secrets
import shutil
import stat
import tarfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

from crucible.errors import SandboxFailed
from crucible.sandboxes.local.safetar import OPAQUE_XATTR, extract_layer, is_whiteout
from crucible.sandboxes.streams import ChunkReader

# bwrap passes its overlay options in one page (4096 bytes): lower dirs, each as
# /oldroot/<path>, with room left for the upper and work dirs. An image whose stack is
# longer is unpacked flat instead (images.py).
MAX_LOWER_CHARS = 3000
log = logging.getLogger(__name__)
_BLOB = re.compile(r"(?:^|/)(?:blobs/sha256/)?([0-9a-f]{64})(?:\.tar)?$")
_NOFOLLOW_DIR = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC


def hexid(digest: str) -> str:
    return digest.removeprefix("sha256:")


def stack_ids(diff_ids: Sequence[str]) -> list[str]:
    """The layers to stack, bottom first: a layer listed twice is kept at its top place
    only (the upper copy decides everything the lower one would)."""
    out: list[str] = []
    for d in reversed([hexid(d) for d in diff_ids]):
        if d not in out:
            out.append(d)
    return out[::-1]


def _close(chunks: Iterator[bytes]) -> None:
    close = getattr(chunks, "close", None)
    if close is not None:
        close()


class _Hashing(io.RawIOBase):
    """Reads through `raw`, hashing every byte."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.sha = raw, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.raw.read(len(b))
        self.sha.update(data)
        b[: len(data)] = data
        return len(data)


class LayerStore:
    """The layers folder of one cache, for one owner (`suffix`: RootfsCache's `-u<uid>`)."""

    def __init__(self, root: Path, suffix: str) -> None:
        self.root, self.suffix = root, suffix

    def dir(self, diff_id: str) -> Path:
        return self.root / f"{hexid(diff_id)}{self.suffix}"

    def fits(self, ids: Sequence[str]) -> bool:
        return sum(len(str(self.dir(d))) + 9 for d in ids) <= MAX_LOWER_CHARS

    def share(self) -> int:
        """Blocking: the shared lock an unpack holds until its entry is written and held."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / ".lock", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        return fd

    def unpack(
        self,
        archive: Callable[[], Iterator[bytes]],
        ids: Sequence[str],
        chown: Callable[[Path], None],
        lock: Callable[[str], int] | None = None,
        direct: Callable[[str], Iterator[bytes] | None] | None = None,
    ) -> int:
        """Blocking: unpack those of `ids` not yet here, each from `direct(diff id)` (that
        layer's tar alone, or None) where it gives one, the rest from the archive
        `archive()` streams; `chown` gives a fresh tree to its owner before it is in place.
        `lock(digest)`: an exclusive lock (an fd) held while a layer is unpacked, so that
        images sharing a base, unpacked at once, unpack it once. Returns layers made."""
        need = {hexid(d) for d in ids if not self.dir(d).is_dir()}
        if not need:
            return 0
        self.root.mkdir(parents=True, exist_ok=True)
        made = 0 if direct is None else self._unpack_direct(direct, ids, need, chown, lock)
        if not need:
            return made
        chunks = archive()
        try:
            reader = io.BufferedReader(ChunkReader(chunks), buffer_size=1 << 20)
            with tarfile.open(fileobj=reader, mode="r|") as outer:
                for member in outer:
                    if not member.isreg():
                        continue
                    m = _BLOB.search(member.name)
                    hint = m.group(1) if m else None
                    if hint not in need and (hint is not None or member.name[-9:] != "layer.tar"):
                        continue  # here already, or no layer (config, manifest)
                    fh = outer.extractfile(member)
                    assert fh is not None
                    made += self._locked(
                        hint, need, lock, functools.partial(self._unpack_one, fh, need, hint, chown)
                    )
                    if not need:
                        break
        finally:
            _close(chunks)
        if need:
            raise SandboxFailed(f"the image's archive lacks layer(s) {sorted(need)}")
        return made

    def _unpack_direct(
        self,
        direct: Callable[[str], Iterator[bytes] | None],
        ids: Sequence[str],
        need: set[str],
        chown: Callable[[Path], None],
        lock: Callable[[str], int] | None,
    ) -> int:
        """Those of `need` that `direct` gives, each checked against its digest; a layer it
        gives wrong is left in `need`, for the archive."""
        made = 0
        for diff_id in ids:
            hint = hexid(diff_id)
            if hint in need:
                made += self._locked(
                    hint, need, lock, functools.partial(self._from, direct, diff_id, need, chown)
                )
        return made

    def _from(
        self, direct: Callable[[str], Iterator[bytes] | None], diff_id: str, need: set[str],
        chown: Callable[[Path], None],
    ) -> str | None:  # fmt: skip
        chunks = direct(diff_id)
        if chunks is None:
            return None
        try:
            reader = io.BufferedReader(ChunkReader(chunks), buffer_size=1 << 20)
            return self._unpack_one(reader, need, hexid(diff_id), chown)
        except SandboxFailed as exc:
            log.warning("layer %s from the store: %s; reading the archive", diff_id[:12], exc)
            return None
        finally:
            _close(chunks)

    def _locked(
        self, hint: str | None, need: set[str], lock: Callable[[str], int] | None,
        make: Callable[[], str | None],
    ) -> int:  # fmt: skip
        """make() (unpack a layer, give its digest) under the layer's lock, unless another
        unpack made it meanwhile; 1 when this one made it (then out of `need`), else 0."""
        held = lock(hint) if lock is not None and hint is not None else None
        try:
            if hint is not None and self.dir(hint).is_dir():
                need.discard(hint)  # made meanwhile, by another image's unpack
                return 0
            got = make()
        finally:
            if held is not None:
                os.close(held)
        if got is None:
            return 0
        need.discard(got)
        return 1

    def _unpack_one(
        self, fh: IO[bytes], need: set[str], hint: str | None, chown: Callable[[Path], None]
    ) -> str | None:
        # 0700 until chown (a chown drops setuid): the tar keeps the image's owners and
        # modes, so a task's setuid-root file would be one for any local user meanwhile.
        tmp = self.root / f".tmp-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.mkdir(mode=0o700)
        try:
            tree = tmp / "tree"
            tree.mkdir()
            hashing = _Hashing(fh)
            try:
                extract_layer(io.BufferedReader(hashing, buffer_size=1 << 20), tree)
            except (tarfile.TarError, OSError) as exc:
                raise SandboxFailed(f"unpacking an image layer failed: {exc}") from exc
            digest = hashing.sha.hexdigest()
            if hint is not None and digest != hint:
                raise SandboxFailed(f"the image's layer {hint[:12]} holds other content")
            if digest not in need:
                return None
            chown(tree)
            with contextlib.suppress(OSError):  # made meanwhile by another process
                tree.rename(self.dir(digest))
            return digest
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def gc(self, referenced: Callable[[], set[str]]) -> int:
        """Remove the layers no entry names (`referenced()`: their dir names, asked once no
        unpack is under way: one may be about to name any of them), unless one is."""
        if not self.root.is_dir():
            return 0
        fd = os.open(self.root / ".lock", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0
            removed, keep = 0, referenced()
            for d in self.root.iterdir():
                if d.name == ".lock" or d.name in keep or d.is_symlink():
                    continue
                trash = self.root / f".tmp-gc-{d.name}-{os.getpid()}"
                with contextlib.suppress(OSError):
                    d.rename(trash)
                    removed += not d.name.startswith(".")
                shutil.rmtree(trash, ignore_errors=True)
            return removed
        finally:
            os.close(fd)


class LayerStack:
    """An image's tree as the overlay of its layers (bottom first) shows it, read on the
    host through directory fds that never follow a link."""

    def __init__(self, layers: Sequence[Path]) -> None:
        self.layers = tuple(layers)

    def _probe(self, layer: Path, parts: list[str]) -> tuple[os.stat_result | None, bool]:
        """(the entry's lstat in this layer, whether the layers below are hidden there)."""
        try:
            fd = os.open(layer, _NOFOLLOW_DIR)
        except OSError:
            return None, False
        hidden = False
        try:
            for name in parts[:-1]:
                try:
                    st = os.lstat(name, dir_fd=fd)
                except FileNotFoundError:
                    return None, hidden
                if not stat.S_ISDIR(st.st_mode):  # a file, link or whiteout hides what is below
                    return None, True
                nxt = os.open(name, _NOFOLLOW_DIR, dir_fd=fd)
                os.close(fd)
                fd = nxt
                with contextlib.suppress(OSError):
                    hidden = hidden or os.getxattr(f"/proc/self/fd/{fd}", OPAQUE_XATTR) == b"y"
            try:
                st = os.lstat(parts[-1], dir_fd=fd)
            except FileNotFoundError:
                return None, hidden
            if is_whiteout(f"/proc/self/fd/{fd}/{parts[-1]}", st):
                return None, True
            return st, True
        except OSError:
            return None, True
        finally:
            os.close(fd)

    def locate(self, rel: str) -> tuple[Path, os.stat_result] | None:
        """(the layer that shows `rel`, its lstat there), None where the image has none."""
        parts = [p for p in rel.split("/") if p]
        if not parts:
            return None
        for layer in reversed(self.layers):
            st, stop = self._probe(layer, parts)
            if st is not None:
                return layer, st
            if stop:
                return None
        return None

    def lstat(self, rel: str) -> os.stat_result | None:
        found = self.locate(rel)
        return None if found is None else found[1]

    def find(self, rel: str) -> Path | None:
        """The host path of `rel` in the layer that shows it (for reading, not following)."""
        found = self.locate(rel)
        return None if found is None else found[0] / rel.lstrip("/")

    def open(self, rel: str, flags: int = os.O_RDONLY) -> int:
        """An fd on `rel` as the image shows it, no link followed (OSError: none there)."""
        found = self.locate(rel)
        if found is None:
            raise FileNotFoundError(rel)
        parts = [p for p in rel.split("/") if p]
        fd = os.open(found[0], _NOFOLLOW_DIR)
        try:
            for name in parts[:-1]:
                nxt = os.open(name, _NOFOLLOW_DIR, dir_fd=fd)
                os.close(fd)
                fd = nxt
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        finally:
            os.close(fd)
