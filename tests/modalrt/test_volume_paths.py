"""Volume's own file methods (listdir, read_file, remove_file) stay inside the volume's
folder: `..` and links that lead out are refused, so a program cannot read or delete
host files through them."""

from __future__ import annotations

from pathlib import Path

import pytest

from crucible.modalrt.mounts import MountError, wrap_with_mounts
from crucible.modalrt.sdk.exception import InvalidError
from crucible.modalrt.sdk.volume import Volume
from tests.modalrt.stores import runtime


def test_paths_that_leave_the_volume_are_refused(state: Path, tmp_path: Path) -> None:
    outside = tmp_path / "host-secret.txt"
    outside.write_text("host data")
    with runtime(state):
        vol = Volume.from_name("v", create_if_missing=True)
        folder = state / "volumes" / "v"
        (folder / "ok.txt").write_text("inside")
        (folder / "link").symlink_to(outside)
        (folder / "dirlink").symlink_to(tmp_path, target_is_directory=True)
        assert b"".join(vol.read_file("ok.txt")) == b"inside"
        for path in ("../../host-secret.txt", "link", "dirlink/host-secret.txt", "/../.."):
            with pytest.raises(InvalidError):
                b"".join(vol.read_file(path))
        with pytest.raises(InvalidError):
            vol.remove_file("dirlink/host-secret.txt")
        with pytest.raises(InvalidError):
            vol.listdir("dirlink")
        assert [e.path for e in vol.listdir("/")] == ["dirlink", "link", "ok.txt"]
        # recursive listing does not walk into the linked host folder
        assert [e.path for e in vol.listdir("/", recursive=True)] == ["dirlink", "link", "ok.txt"]
    assert outside.read_text() == "host data"


def test_links_mode_links_each_mount_path_once_and_refuses_a_shared_path(
    state: Path, tmp_path: Path
) -> None:
    """The io stage's mode (no nested bwrap): the mount path becomes a link to the
    volume's folder, made by the first worker and reused by the next; a second volume
    (or an existing folder) at that path is an error that names it, never a silent mix."""
    ckpt, taken = tmp_path / "mnt" / "ckpt", tmp_path / "taken"
    taken.mkdir()
    argv = ["python", "-m", "worker"]
    with runtime(state, mounts="links"):
        for _ in range(2):  # a second worker of the same function
            assert wrap_with_mounts(argv, [(str(ckpt), "a")]) == argv
        assert ckpt.resolve() == (state / "volumes" / "a").resolve()
        (ckpt / "latest.json").write_text("{}")
        assert (state / "volumes" / "a" / "latest.json").read_text() == "{}"
        with pytest.raises(MountError, match="cannot share one"):
            wrap_with_mounts(argv, [(str(ckpt), "b")])
        with pytest.raises(MountError, match=str(taken)):
            wrap_with_mounts(argv, [(str(taken), "a")])
    assert taken.is_dir() and not taken.is_symlink()
