"""The local rootfs cache's layout (images.py describes it): entries, their layers, gc."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from crucible.sandboxes.local.imagetools import ImageConfig
from crucible.sandboxes.local.layers import LayerStack, LayerStore, hexid

ENTRY_FILE = "image.json"  # a flat entry's (its tree in rootfs/)
# A layered entry's. Not image.json, and its layers under a dot-named folder: a crucible
# from before layers, sharing this cache, then never takes a layered entry for a flat tree
# it lacks (it unpacks its own), and its gc() leaves the layers alone.
LAYERED_FILE = "layers.json"
LAYERS_DIR = ".layers"


class RootfsEntry(BaseModel):
    schema_version: int = 1
    image_id: str
    tool: str
    source: str  # "build <env digest>" or "image <ref>"
    config: ImageConfig
    created_at: str
    layers: list[str] = Field(default_factory=list)  # diff ids, bottom first; [] = flat rootfs/


@dataclass(frozen=True)
class Rootfs:
    layers: tuple[Path, ...]  # the trees to stack as /, bottom first (one: a flat tree)
    entry: RootfsEntry

    @property
    def stack(self) -> LayerStack:
        return LayerStack(self.layers)


def default_cache_dir() -> Path:
    """Shared by every job of this user: CRUCIBLE_ROOTFS_DIR, else /var/cache/crucible/rootfs
    for root (world-traversable, unlike /root), else ~/.cache/crucible/rootfs."""
    env = os.environ.get("CRUCIBLE_ROOTFS_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/crucible/rootfs")
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "crucible" / "rootfs"


def _flock(path: Path, how: int, *, create: bool = False) -> int:
    """Lock a directory (an entry) or a lock file (made when `create`)."""
    flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_CREAT if create else os.O_DIRECTORY)
    fd = os.open(path, flags, 0o600)
    try:
        fcntl.flock(fd, how)
    except BaseException:
        os.close(fd)
        raise
    return fd


class RootfsCache:
    """The directory layout above; blocking helpers, run on threads by ImageStore.

    `owner`: the host uid a sandbox's one mapped uid stands for; every file of an unpacked
    tree is given to it (a file of any other owner would be nobody's inside), and the
    entry is named `<image id>-u<owner>`. None keeps the image's owners.
    """

    def __init__(self, root: Path, owner: int | None = None) -> None:
        self.root = root
        self.owner = owner

    @property
    def suffix(self) -> str:
        return "" if self.owner is None else f"-u{self.owner}"

    def entry_dir(self, image_id: str) -> Path:
        return self.root / f"{hexid(image_id)}{self.suffix}"

    def layer_store(self) -> LayerStore:
        return LayerStore(self.root / LAYERS_DIR, self.suffix)

    def entry(self, d: Path) -> RootfsEntry | None:
        """The entry in folder `d` (layered, else flat), None if none is complete there."""
        for name in (LAYERED_FILE, ENTRY_FILE):
            try:
                return RootfsEntry.model_validate_json((d / name).read_text())
            except FileNotFoundError:
                continue
            except (OSError, ValueError):
                return None
        return None

    def chown_tree(self, tree: Path) -> None:
        """Blocking: give every entry of a freshly unpacked tree to `owner` (links not followed)."""
        if self.owner is None:
            return
        uid = gid = self.owner
        os.lchown(tree, uid, gid)
        for dirpath, dirnames, filenames in os.walk(tree):
            for name in dirnames + filenames:
                os.lchown(os.path.join(dirpath, name), uid, gid)

    def get(self, image_id: str) -> Rootfs | None:
        d = self.entry_dir(image_id)
        entry = self.entry(d)
        if entry is None:
            return None
        if not entry.layers:
            return Rootfs((d / "rootfs",), entry)
        layers = tuple(map(self.layer_store().dir, entry.layers))
        return Rootfs(layers, entry) if all(p.is_dir() for p in layers) else None

    def env_image(self, digest: str) -> str | None:
        with contextlib.suppress(OSError):
            return (self.root / "by-env" / hexid(digest)).read_text().strip() or None
        return None

    def set_env_image(self, digest: str, image_id: str) -> None:
        d = self.root / "by-env"
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{hexid(digest)}.{os.getpid()}"
        tmp.write_text(hexid(image_id))
        tmp.replace(d / hexid(digest))

    def lock(self, key: str) -> int:
        """Blocking: an exclusive lock for building or unpacking `key` (close the fd to release)."""
        d = self.root / ".locks"
        d.mkdir(parents=True, exist_ok=True)
        return _flock(
            d / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.lock", fcntl.LOCK_EX, create=True
        )

    def hold(self, image_id: str) -> int | None:
        """Blocking: a shared lock that keeps gc() off this entry; None if it vanished."""
        try:
            fd = _flock(self.entry_dir(image_id), fcntl.LOCK_SH)
        except FileNotFoundError:
            return None
        if self.get(image_id) is None:  # gc() removed it before we locked
            os.close(fd)
            return None
        return fd

    def gc(self) -> int:
        """Remove every entry no provider holds, and index files that point nowhere."""
        if not self.root.is_dir():
            return 0
        removed = 0
        for d in self.root.iterdir():
            if d.name.startswith(".") or d.name == "by-env" or not d.is_dir():
                continue
            if d.is_symlink():
                continue
            try:
                fd = _flock(d, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # in use by a running job
            except OSError:
                continue
            try:
                trash = self.root / f".trash-{d.name}-{os.getpid()}"
                d.rename(trash)
            finally:
                os.close(fd)
            shutil.rmtree(trash, ignore_errors=True)
            removed += 1
        index = self.root / "by-env"
        if index.is_dir():
            for f in index.iterdir():
                with contextlib.suppress(OSError):
                    if self.get(f.read_text().strip()) is None:
                        f.unlink()
        for d in self.root.glob(".trash-*"):  # left by an interrupted gc or unpack
            shutil.rmtree(d, ignore_errors=True)
        return removed + LayerStore(self.root / LAYERS_DIR, "").gc(self._referenced)

    def _referenced(self) -> set[str]:
        """The layer dirs the entries left name (each entry's owner suffix is its name's)."""
        names: set[str] = set()
        for d in self.root.iterdir():
            entry = self.entry(d) if d.is_dir() and not d.is_symlink() else None
            if entry is None:
                continue
            suffix = d.name.removeprefix(entry.image_id)
            names.update(f"{layer}{suffix}" for layer in entry.layers)
        return names
