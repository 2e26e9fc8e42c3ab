"""Folders between the head and a node: a task folder out, a trial folder back.

A trial folder comes back whole (record, logs, what collection kept under its caps) as
one tar of regular files and folders; it is unpacked into the head's job folder with
tarfile's `data` filter, so a name that climbs out, a link or a device is refused,
never written. A folder over `INLINE_LIMIT` goes through the shared store the user
named (a path every node and the head mount), else through Ray's object store: it is
never dropped.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import uuid
from pathlib import Path

# Above this a trial folder goes to the shared store, when there is one (bytes).
INLINE_LIMIT = 32 * 1024 * 1024


class UnsafeFolder(Exception):
    """A tar that would write outside its folder, or something not a file or folder."""


def pack_dir(root: Path) -> bytes:
    """The regular files and folders under `root` (links and the rest are left out:
    collection stores links as text), as an uncompressed tar, names relative to root."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            base = Path(dirpath)
            for name in [*dirnames, *sorted(filenames)]:
                path = base / name
                if path.is_symlink() or not (path.is_file() or path.is_dir()):
                    continue
                tar.add(path, arcname=str(path.relative_to(root)), recursive=False)
    return buf.getvalue()


def unpack_into(data: bytes, dest: Path) -> None:
    """Unpack a tar from `pack_dir` into `dest` (created). Raises UnsafeFolder, having
    written nothing of it, for a member that is not a plain file or folder inside `dest`."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        members = tar.getmembers()
        for m in members:
            if not (m.isreg() or m.isdir()):
                raise UnsafeFolder(f"{m.name!r}: not a file or folder")
            parts = Path(m.name).parts
            if m.name.startswith("/") or ".." in parts:
                raise UnsafeFolder(f"{m.name!r}: outside the folder")
        dest.mkdir(parents=True, exist_ok=True)
        tar.extractall(dest, members=members, filter="data")


def replace_dir(data: bytes, dest: Path) -> None:
    """`dest` becomes exactly what `data` holds (an earlier try's folder goes first)."""
    if dest.exists():
        shutil.rmtree(dest)
    unpack_into(data, dest)


def check_store(store: str | None) -> Path | None:
    """The shared store as a folder, or None. An object-store URL is refused (not yet)."""
    if store is None:
        return None
    if "://" in store:
        raise ValueError(
            f"shared store {store!r}: only a path on shared storage is supported; "
            "mount the bucket (s3fs, gcsfuse, NFS) and give its path"
        )
    return Path(store)


def to_store(store: Path, job_id: str, trial_name: str, data: bytes) -> str:
    """Write a large trial folder's tar into the shared store; its path."""
    folder = store / job_id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{trial_name}.{uuid.uuid4().hex[:8]}.tar"
    tmp = path.with_suffix(".part")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return str(path)
