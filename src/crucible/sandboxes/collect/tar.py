"""Collecting a tar stream that a sandbox produced (Docker's archive API, an in-sandbox tar).

The stream is read as it arrives (tarfile's "r|" mode over the chunks, never
buffered whole) and no further than the stream cap. Every member is hostile:
names that are absolute, climb out with "..", or fall outside the collected
folder are skipped; symbolic and hard links, devices and fifos are recorded as
text and never made; regular members (GNU sparse ones too) are copied in
chunks up to the caps, zero runs left as holes. Folders are made fd-relative
from the sink's root, one O_NOFOLLOW step at a time.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterable

from crucible.records.text import storable_text
from crucible.sandboxes.collect.manifest import CHUNK, EntryType
from crucible.sandboxes.collect.sink import Full, Sink, host_name_ok
from crucible.sandboxes.streams import ChunkReader, StreamCap

_KINDS: tuple[tuple[str, EntryType], ...] = (
    ("isdir", "dir"),
    ("isreg", "file"),
    ("issym", "symlink"),
    ("islnk", "hardlink"),
    ("isfifo", "fifo"),
    ("ischr", "char_device"),
    ("isblk", "block_device"),
)


def _kind(m: tarfile.TarInfo) -> EntryType:
    return next((kind for test, kind in _KINDS if getattr(m, test)()), "other")


def tar_allowance(sink: Sink) -> int:
    """The most bytes a tar stream needs to carry all that the sink can still take: its
    byte budget, plus a header block and padding per entry left and the end blocks.
    A provider that must stage a stream before reading it (Modal) cuts it there."""
    room = sink.budget.bytes_left + 1024 * (sink.budget.entries_left + 2) + 10240
    return min(room, sink.limits.stream_bytes)


def collect_tar(chunks: Iterable[bytes], sink: Sink, *, strip: int, cap: int | None = None) -> bool:
    """Copy the members of a tar of sink.src into the sink; False when the stream broke
    off (the sink's record says so: a provider whose archiver can trip over files that
    change under it may restart the sink and read again).

    `strip`: 1 when members are named after the folder itself (Docker:
    "agent/x"), 0 when they are relative to it (`tar -C src .`: "./x").
    `cap`: where the stream is cut (default: the limits' stream_bytes); a
    longer stream is noted as cut.
    """
    limit = sink.limits.stream_bytes if cap is None else min(cap, sink.limits.stream_bytes)
    raw = ChunkReader(chunks, limit)
    top: str | None = None
    try:
        with tarfile.open(fileobj=io.BufferedReader(raw, CHUNK), mode="r|") as tar:
            while (m := tar.next()) is not None:
                # tarfile keeps every member it has seen; a stream of millions must not.
                tar.members.clear()  # type: ignore[attr-defined]
                name = m.name
                parts = [p for p in name.split("/") if p not in ("", ".")]
                if name.startswith("/") or ".." in parts:
                    sink.note((name,), _kind(m), "a name that climbs out: skipped")
                    continue
                if strip:
                    top = top if top is not None else (parts[0] if parts else "")
                    if not parts or parts[0] != top:
                        sink.note((name,), _kind(m), "outside the collected folder: skipped")
                        continue
                    parts = parts[1:]
                if not parts:
                    if m.issym():  # the folder itself is a link: nothing to copy
                        sink.note(
                            (), "symlink", "a link: recorded, not followed", target=m.linkname
                        )
                    continue
                try:
                    _member(tar, m, name, parts, sink)
                except NotADirectoryError:  # "a" was a file, now "a/b" wants it a folder
                    sink.note((name,), _kind(m), "clashes with an earlier member: skipped")
    except StreamCap:
        msg = f"stream cut at {limit} bytes"
        sink.note((), "dir", msg, truncated=True)
    except Full:
        pass
    except tarfile.TarError as exc:
        sink.record.error = storable_text(f"unreadable tar stream: {exc}")
        return False
    finally:
        raw.close()
        sink.close()
    return True


def _member(
    tar: tarfile.TarFile, m: tarfile.TarInfo, name: str, parts: list[str], sink: Sink
) -> None:
    kind = _kind(m)
    if not all(host_name_ok(p) for p in parts):
        sink.note((name,), kind, "a name the host cannot hold: skipped")
        return
    if sink.take_entry(parts, is_dir=kind == "dir", known=True) != "ok":
        return
    if kind == "dir":
        os.close(sink.dir_of(parts))
        sink.record.dirs += 1
    elif kind == "file":
        f = tar.extractfile(m)
        if f is not None:
            sink.add_file(parts, m.size, bool(m.mode & 0o111), f)
    elif kind in ("symlink", "hardlink"):
        sink.note(parts, kind, "a link: recorded, not made", target=m.linkname)
    else:
        sink.note(parts, kind, "not a regular file: not read", size=m.size)
