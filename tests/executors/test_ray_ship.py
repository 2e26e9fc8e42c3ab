"""Attack: a trial folder coming back from a node is unpacked into the head's job folder;
a tar that climbs out of it, or holds a link or a device, is refused whole. Before the
check (tarfile.extractall without filter), `../escape` was written beside the job folder
and a symlink into the head's files was planted in it."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from crucible.executors.ray.ship import UnsafeFolder, pack_dir, replace_dir, unpack_into


def _tar(*members: tuple[str, bytes | None, str | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            else:
                info.size = len(data or b"")
                tar.addfile(info, io.BytesIO(data or b""))
    return buf.getvalue()


@pytest.mark.parametrize(
    "members",
    [
        [("ok.txt", b"1", None), ("../escape", b"x", None)],
        [("/abs", b"x", None)],
        [("link", None, "/etc/passwd")],
    ],
)
def test_a_hostile_trial_folder_is_refused_whole(tmp_path: Path, members: list) -> None:
    dest = tmp_path / "job" / "t__0"
    with pytest.raises(UnsafeFolder):
        unpack_into(_tar(*members), dest)
    assert not (tmp_path / "job" / "escape").exists() and not (tmp_path / "escape").exists()
    assert not dest.exists()  # nothing of it written


def test_a_folder_comes_back_as_it_was(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sandbox" / "logs").mkdir(parents=True)
    (src / "result.json").write_text("{}")
    (src / "sandbox" / "logs" / "a.txt").write_bytes(b"\x00\xff")
    (src / "sandbox" / "link").symlink_to("/etc/passwd")  # collection never makes one
    dest = tmp_path / "dest"
    (dest / "old").mkdir(parents=True)  # an earlier try's folder
    replace_dir(pack_dir(src), dest)
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    assert got == ["result.json", "sandbox", "sandbox/logs", "sandbox/logs/a.txt"]
    assert (dest / "sandbox" / "logs" / "a.txt").read_bytes() == b"\x00\xff"
