"""Unpacking image tars (safetar.py: a flattened one, the Docker tool's flat path, and one
layer, the layer cache's) against hostile archives: nothing lands or links outside the
tree; links, modes and setuid bits stay."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

import pytest

from crucible.sandboxes.local.safetar import extract_layer, extract_stream
from crucible.sandboxes.streams import ChunkReader


def _layer(chunks: list[bytes], dest: Path) -> None:
    extract_layer(io.BufferedReader(ChunkReader(chunks)), dest)


EXTRACTORS = pytest.mark.parametrize("extract", [extract_stream, _layer], ids=["flat", "layer"])


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> list[bytes]:
    buf = BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, BytesIO(data) if data is not None else None)
    raw = buf.getvalue()
    return [raw[i : i + 1000] for i in range(0, len(raw), 1000)]


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize(
    "members",
    [
        [(_member("lib", tarfile.SYMTYPE, "/outside"), None), (_member("lib/evil"), b"x")],
        [(_member("../evil"), b"x")],
        [(_member("hard", tarfile.LNKTYPE, "../../outside/secret"), None)],
        [
            (_member("d", tarfile.SYMTYPE, "../outside"), None),
            (_member("h", tarfile.LNKTYPE, "d/secret"), None),
        ],
    ],
    ids=["through-symlink", "dotdot", "hardlink-out", "hardlink-through-symlink"],
)
@EXTRACTORS
def test_unpacking_an_image_never_writes_outside(
    tmp_path: Path,
    members: list[tuple[tarfile.TarInfo, bytes | None]],
    extract: Callable[[list[bytes], Path], None],
) -> None:
    """Attack: an image's tar tries to write or link outside the rootfs being unpacked."""
    outside, dest = tmp_path / "outside", tmp_path / "root" / "rootfs"
    outside.mkdir()
    (outside / "secret").write_text("s")
    dest.mkdir(parents=True)
    with pytest.raises(tarfile.FilterError):
        extract(_tar(*members), dest)
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert os.stat(outside / "secret").st_nlink == 1


@EXTRACTORS
def test_unpacking_keeps_links_modes_and_skips_devices(
    tmp_path: Path, extract: Callable[[list[bytes], Path], None]
) -> None:
    setuid = _member("usr/bin/su")
    setuid.mode = 0o4755
    extract(
        _tar(
            (_member("usr", tarfile.DIRTYPE), None),
            (_member("usr/bin", tarfile.DIRTYPE), None),
            (setuid, b"su"),
            (_member("bin", tarfile.SYMTYPE, "usr/bin"), None),
            (_member("etc/alt", tarfile.SYMTYPE, "/usr/bin/su"), None),
            (_member("dev/null", tarfile.CHRTYPE), None),
        ),
        tmp_path,
    )
    assert os.readlink(tmp_path / "bin") == "usr/bin"
    assert os.readlink(tmp_path / "etc/alt") == "/usr/bin/su"
    assert os.stat(tmp_path / "usr/bin/su").st_mode & 0o7777 == 0o4755
    assert not (tmp_path / "dev" / "null").exists()
