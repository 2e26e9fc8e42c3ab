"""The fd walker (sandboxes/collect/tree.py) on real host folders: sockets, depth, caps, holes."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from crucible.sandboxes.collect.collector import Budget, Limits, Sink
from crucible.sandboxes.collect.tree import collect_host_dir, is_small
from crucible.sandboxes.conformance.collection import host_tree


def test_sockets_depth_and_budget(tmp_path: Path) -> None:
    src = tmp_path / "src"
    deep = src.joinpath(*[f"d{i}" for i in range(6)])
    deep.mkdir(parents=True)
    (deep / "too-deep.txt").write_text("x")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(src / "sock"))
        for i in range(30):
            (src / f"f{i:02}").write_bytes(b"y" * 1000)
        lim = Limits(depth=3, total_bytes=10_500, file_bytes=4000)
        sink = Sink("/logs/agent", tmp_path / "out", Budget.of(lim))
        collect_host_dir(src, sink)
    _, odd = host_tree(tmp_path / "out")
    assert odd == []
    assert not (tmp_path / "out" / "d0" / "d1" / "d2" / "d3").exists()
    assert (tmp_path / "out" / "d0" / "d1" / "d2").is_dir()
    kinds = {n.path.rsplit("/", 1)[-1]: n.type for n in sink.record.notes}
    assert kinds["sock"] == "socket"
    # 10 full files and a cut one fit 10 500 bytes; the rest are empty, all marked cut
    sizes = sorted(os.path.getsize(tmp_path / "out" / f"f{i:02}") for i in range(30))
    assert sum(sizes) == 10_500 and sink.record.bytes == 10_500 and sink.record.truncated


def test_dense_zeros_and_holes_stay_holes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "holey", "wb") as f:
        f.write(b"head")
        f.seek(8 << 20)
        f.write(b"tail")
    (src / "zeros").write_bytes(bytes(2 << 20))
    sink = Sink("/x", tmp_path / "out", Budget.of(Limits()))
    collect_host_dir(src, sink)
    holey, zeros = tmp_path / "out" / "holey", tmp_path / "out" / "zeros"
    assert holey.read_bytes() == (src / "holey").read_bytes()
    assert zeros.read_bytes() == bytes(2 << 20)
    assert holey.stat().st_blocks * 512 <= 256 << 10 and zeros.stat().st_blocks == 0


def test_one_entry_with_excludes_costs_nothing_of_the_rest(tmp_path: Path) -> None:
    # A declared artifact: one entry of its folder, excluded names left out uncharged.
    src = tmp_path / "src"
    (src / "art" / "cache").mkdir(parents=True)
    (src / "art" / "keep.txt").write_text("k")
    (src / "art" / "x.log").write_text("l")
    (src / "art" / "cache" / "c").write_text("c")
    for i in range(50):
        (src / f"sibling{i}").write_text("s")
    lim = Limits(entries=3)  # the entry, keep.txt and one spare: siblings would not fit
    sink = Sink("/src", tmp_path / "out", Budget.of(lim), only="art", exclude=["cache", "*.log"])
    collect_host_dir(src, sink)
    files, odd = host_tree(tmp_path / "out")
    assert odd == [] and not sink.record.truncated and sink.record.notes == []
    assert sorted(files) == ["art", "art/keep.txt"]


def test_is_small_takes_only_a_few_small_regular_files(tmp_path: Path) -> None:
    """What the local provider collects inline, without a thread: a folder, a link, a
    fifo, too many entries or too many bytes send it to a thread, as any folder went."""

    def small(setup: str) -> bool:
        d = tmp_path / setup
        d.mkdir()
        for i in range(3):
            (d / f"f{i}").write_bytes(b"x" * 100)
        if setup == "dir":
            (d / "sub").mkdir()
        elif setup == "link":
            (d / "l").symlink_to("/etc/passwd")
        elif setup == "fifo":
            os.mkfifo(d / "p")
        elif setup == "many":
            for i in range(20):
                (d / f"g{i}").write_bytes(b"")
        elif setup == "big":
            (d / "big").write_bytes(b"x" * 5000)
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return is_small(fd, 16, 4096)
        finally:
            os.close(fd)

    assert small("plain")
    for setup in ("dir", "link", "fifo", "many", "big"):
        assert not small(setup), setup
