"""One image layer's tar, rebuilt from the image tool's own store, reading that layer only.

Buildah keeps its images in containers-storage, which holds each layer twice over: its
files unpacked (`<graph root>/overlay/<id>/diff`, or `vfs/dir/<id>`) and a tar-split record
(`<graph root>/<driver>-layers/<id>.tar-split.gz`): gzipped JSON lines, each either a
segment of the layer's tar kept byte for byte (headers, padding, the end blocks) or a file
whose contents, `size` bytes, are read from the unpacked tree under `name`. Replaying the
record gives back the layer's exact tar, whose sha256 is its diff id; `buildah push` makes a
layer's blob the same way. A push streams the whole image, though, where the cache lacks
only the image's own top layer when it shares its base with an image already unpacked
(layers.py): this reads the layers it asks for and nothing else.

Nothing here is trusted: the store's trees were written by a task's build. A file is opened
one component at a time from the tree's root, never following a link, never `..`, and must
be a regular file holding at least `size` bytes. The tar that comes out goes through
safetar's hostile-tar rules like any other, and its digest is checked against the diff id
the image names (layers.py), so a record or a tree that does not match fails that layer,
which is then read from the tool's archive as before. The store's own index (layers.json,
written by the tool as the user crucible runs as) says which layer has which diff id.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from crucible.errors import SandboxFailed

CHUNK = 1 << 20
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_TREES = {"overlay": ("overlay", "diff"), "vfs": ("vfs/dir", "")}


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def _parts(name: bytes) -> list[bytes]:
    parts = [p for p in name.split(b"/") if p not in (b"", b".")]
    if not parts or b".." in parts:
        raise SandboxFailed(f"a layer record names {name[:200]!r}")
    return parts


def _open_in(root: Path, name: bytes) -> int:
    """An fd of the regular file `name` under `root`, reached with no link followed."""
    parts = _parts(name)
    fd = os.open(root, _DIR)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
        out = os.open(parts[-1], _FILE, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(out).st_mode):
        os.close(out)
        raise SandboxFailed(f"a layer's {name[:200]!r} is not a regular file")
    return out


def _copy(fd: int, size: int, name: bytes) -> Iterator[bytes]:
    left = size
    while left > 0:
        data = os.read(fd, min(CHUNK, left))
        if not data:
            raise SandboxFailed(f"a layer's {name[:200]!r} is shorter than its record")
        left -= len(data)
        yield data


@dataclass
class Store:
    """One containers-storage store: its graph root and driver (`buildah info`)."""

    graph_root: Path
    driver: str
    _index: dict[str, str] = field(default_factory=dict)
    _stamp: tuple[int, int] | None = None

    @classmethod
    def of(cls, info: dict[str, object]) -> Store | None:
        """The store `buildah info` describes, where its layers can be read here."""
        store = info.get("store")
        if not isinstance(store, dict):
            return None
        root, driver = store.get("GraphRoot"), store.get("GraphDriverName")
        if not isinstance(root, str) or driver not in _TREES or not os.path.isabs(root):
            return None
        return cls(Path(root), str(driver))

    def layer_for(self, diff_id: str) -> str | None:
        """Blocking: the id of a complete layer whose tar has digest `diff_id` (with its
        `sha256:` or without)."""
        index = self.graph_root / f"{self.driver}-layers" / "layers.json"
        try:
            st = index.stat()
        except OSError:
            return None
        if self._stamp != (st.st_mtime_ns, st.st_size):
            try:
                layers = json.loads(index.read_bytes())
            except (OSError, ValueError):
                return None
            self._index = {
                _hex(layer["diff-digest"]): str(layer["id"])
                for layer in layers if isinstance(layer, dict)
                and isinstance(layer.get("id"), str) and isinstance(layer.get("diff-digest"), str)
                and not (layer.get("flags") or {}).get("incomplete")
                and not layer.get("uidmap") and not layer.get("gidmap")  # trees chowned
                and "/" not in layer["id"] and not layer["id"].startswith(".")
            }  # fmt: skip
            self._stamp = (st.st_mtime_ns, st.st_size)
        return self._index.get(_hex(diff_id))

    def tree(self, layer_id: str) -> Path:
        top, sub = _TREES[self.driver]
        tree = self.graph_root / top / layer_id
        return tree / sub if sub else tree

    def tar(self, layer_id: str) -> Iterator[bytes]:
        """Blocking, lazily: the layer's tar, as the tool would hand it over."""
        record = self.graph_root / f"{self.driver}-layers" / f"{layer_id}.tar-split.gz"
        tree = self.tree(layer_id)
        try:
            with gzip.open(record, "rb") as lines:
                for line in lines:
                    yield from self._entry(tree, line)
        except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
            raise SandboxFailed(f"the store's layer {layer_id[:12]}: {exc}") from exc

    def _entry(self, tree: Path, line: bytes) -> Iterator[bytes]:
        entry = json.loads(line)
        kind = entry["type"]
        if kind == 2:  # a segment of the tar, kept as it was
            yield base64.b64decode(entry.get("payload") or b"")
        elif kind == 1:  # a file's contents, from the tree
            size = int(entry.get("size") or 0)
            if size <= 0:
                return
            raw = entry.get("name_raw")
            name = (
                base64.b64decode(raw)
                if raw
                else str(entry["name"]).encode("utf-8", "surrogateescape")
            )
            fd = _open_in(tree, name)
            try:
                yield from _copy(fd, size, name)
            finally:
                os.close(fd)
        else:
            raise SandboxFailed(f"a layer record's entry of type {kind!r}")
