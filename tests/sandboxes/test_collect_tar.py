"""Hostile tar streams into the collector (sandboxes/collect/tar.py).

A Docker engine only ever sends what a container's files make, so the members
no engine would send (names that climb out or are absolute, names of another
folder, duplicates, a file where a folder is wanted) are built here as real tar
bytes, streamed in chunks as the engine's API hands them over.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

from crucible.sandboxes.collect.collector import Budget, Limits, Sink
from crucible.sandboxes.collect.tar import collect_tar
from crucible.sandboxes.conformance.collection import host_tree


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", link: str = "") -> bytes:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.linkname = link
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    pad = b"\0" * (-len(data) % tarfile.BLOCKSIZE)
    return info.tobuf(tarfile.PAX_FORMAT) + (data + pad if kind == tarfile.REGTYPE else b"")


def stream(*members: bytes, chunk: int = 7919) -> Iterator[bytes]:
    raw = b"".join(members) + b"\0" * (2 * tarfile.BLOCKSIZE)
    for i in range(0, len(raw), chunk):
        yield raw[i : i + chunk]


def zeros_member(name: str, size: int) -> Iterator[bytes]:
    """A member of `size` zero bytes, produced lazily (never held whole)."""
    info = tarfile.TarInfo(name)
    info.size = size
    yield info.tobuf(tarfile.PAX_FORMAT)
    block = bytes(1 << 20)
    left = size
    while left:
        n = min(left, len(block))
        yield block[:n]
        left -= n
    yield b"\0" * (-size % tarfile.BLOCKSIZE) + b"\0" * (2 * tarfile.BLOCKSIZE)


def test_members_that_climb_out_or_link_are_never_made(tmp_path: Path) -> None:
    dst = tmp_path / "trial" / "out"
    sink = Sink("/logs/agent", dst, Budget.of(Limits()))
    collect_tar(
        stream(
            member("agent", tarfile.DIRTYPE),
            member("agent/ok.txt", data=b"fine"),
            member("agent/../../escaped.txt", data=b"evil"),
            member("/etc/evil", data=b"evil"),
            member("agent/a/../../../x", data=b"evil"),
            member("other/elsewhere.txt", data=b"evil"),
            member("agent/sym", tarfile.SYMTYPE, link="/etc/passwd"),
            member("agent/hard", tarfile.LNKTYPE, link="agent/../../../etc/shadow"),
            member("agent/dev", tarfile.CHRTYPE),
            member("agent/fifo", tarfile.FIFOTYPE),
            member("agent/ok.txt", data=b"second"),  # a duplicate never overwrites
            member("agent/ok.txt", tarfile.DIRTYPE),  # a folder where a file is
            member("agent/ok.txt/below", data=b"x"),
            member("agent/deep/er/file", data=b"no folder members came first: skipped"),
            member("agent/d", tarfile.DIRTYPE),
            member("agent/d/file", data=b"in a folder that was taken"),
        ),
        sink,
        strip=1,
    )
    seen, odd = host_tree(tmp_path)
    assert odd == []
    assert sorted(seen) == [
        "trial",
        "trial/out",
        *(f"trial/out/{p}" for p in ["d", "d/file", "ok.txt"]),
    ]
    assert (dst / "ok.txt").read_bytes() == b"fine"
    notes = {n.path: n for n in sink.record.notes}
    assert notes["/logs/agent/sym"].target == "/etc/passwd"
    assert notes["/logs/agent/hard"].type == "hardlink"
    assert notes["/logs/agent/dev"].type == "char_device"
    assert notes["/logs/agent/fifo"].type == "fifo"
    reasons = " ".join(n.reason for n in sink.record.notes)
    assert reasons.count("climbs out") == 3 and "outside the collected folder" in reasons
    assert "already taken" in reasons and "clashes" in reasons


def test_a_huge_member_costs_the_file_cap_and_no_disk(tmp_path: Path) -> None:
    lim = Limits(file_bytes=4 << 20, total_bytes=8 << 20)
    sink = Sink("/logs/agent", tmp_path / "out", Budget.of(lim))
    collect_tar(
        (c for part in (zeros_member("agent/zeros", 300 << 20),) for c in part), sink, strip=1
    )
    st = (tmp_path / "out" / "zeros").stat()
    assert st.st_size == 4 << 20 and st.st_blocks == 0
    assert sink.record.truncated and sink.record.bytes == 4 << 20


def test_the_stream_stops_at_its_cap(tmp_path: Path) -> None:
    lim = Limits(stream_bytes=8 << 20)
    sink = Sink("/logs/agent", tmp_path / "out", Budget.of(lim))
    taken = 0

    def counted() -> Iterator[bytes]:
        nonlocal taken
        for c in zeros_member("agent/zeros", 1 << 40):  # 1 TiB: never read to the end
            taken += len(c)
            yield c

    collect_tar(counted(), sink, strip=1)
    assert taken <= (8 << 20) + (1 << 20) + 4096
    assert sink.record.truncated and "stream cut" in sink.record.notes[-1].reason


def test_entries_are_capped_per_folder_and_in_total(tmp_path: Path) -> None:
    lim = Limits(dir_entries=10, entries=15, depth=3)
    sink = Sink("/logs/agent", tmp_path / "out", Budget.of(lim))
    members = [member("agent", tarfile.DIRTYPE), member("agent/a/b/c/d/e", data=b"deep")]
    members += [member("agent/one", tarfile.DIRTYPE)]
    members += [member(f"agent/one/{i}", data=b"x") for i in range(40)]
    members += [member(f"agent/d{i}", tarfile.DIRTYPE) for i in range(40)]
    collect_tar(stream(*members), sink, strip=1)
    assert len(os.listdir(tmp_path / "out" / "one")) == 10
    assert not (tmp_path / "out" / "a" / "b" / "c" / "d").exists()
    assert sum(1 for _ in (tmp_path / "out").rglob("*")) == 15
    assert sink.record.truncated
    assert any("entries collected" in n.reason for n in sink.record.notes)


def test_members_of_a_refused_folder_do_not_make_it_again(tmp_path: Path) -> None:
    sink = Sink("/logs/agent", tmp_path / "out", Budget.of(Limits(dir_entries=3, depth=2)))
    members = [member("agent", tarfile.DIRTYPE)]
    members += [member(f"agent/d{i}", tarfile.DIRTYPE) for i in range(6)]
    members += [member(f"agent/d{i}/f", data=b"x") for i in range(6)]
    members += [member("agent/d0/e", tarfile.DIRTYPE), member("agent/d0/e/deep", data=b"x")]
    members += [member("agent/nodir/f", data=b"no folder member came first")]
    collect_tar(stream(*members), sink, strip=1)
    assert sorted(os.listdir(tmp_path / "out")) == ["d0", "d1", "d2"]
    assert sorted(os.listdir(tmp_path / "out" / "d0")) == ["e", "f"]
    assert os.listdir(tmp_path / "out" / "d0" / "e") == []  # deeper than 2: not taken


def test_a_garbled_or_cut_stream_is_an_error_in_the_record(tmp_path: Path) -> None:
    good = member("agent/ok.txt", data=b"fine" * 1000)
    for i, chunks in enumerate(([b"\xff" * 5000], [good[:700]])):
        sink = Sink("/logs/agent", tmp_path / f"out{i}", Budget.of(Limits()))
        collect_tar(iter(chunks), sink, strip=1)
        assert sink.record.error is not None and "tar" in sink.record.error
    _, odd = host_tree(tmp_path)
    assert odd == []


def test_a_folder_made_of_many_dense_zero_files_is_sparse_on_host(tmp_path: Path) -> None:
    data = bytes(3 << 20) + b"end"
    sink = Sink("/x", tmp_path / "out", Budget.of(Limits()))
    buf = io.BytesIO(member("x/f", data=data))
    collect_tar(iter([buf.getvalue()]), sink, strip=1)
    st = (tmp_path / "out" / "f").stat()
    assert st.st_size == len(data) and st.st_blocks * 512 <= 128 << 10
    assert (tmp_path / "out" / "f").read_bytes() == data


def test_a_stream_that_broke_off_is_read_again_from_a_clean_start(tmp_path: Path) -> None:
    """What a provider does after an archiver tripped over a file changing under it: the
    sink is restarted (its folder gone, its charges back) and the next read is whole."""
    budget = Budget.of(Limits())
    before = (budget.entries_left, budget.bytes_left)
    sink = Sink("/logs/agent", tmp_path / "out", budget)
    first = [member("agent/a.txt", data=b"a" * 600), member("agent/b.txt", data=b"b" * 600)[:700]]
    assert collect_tar(iter(first), sink, strip=1) is False
    assert sink.record.files == 1 and (tmp_path / "out" / "a.txt").exists()
    sink.restart()
    assert not (tmp_path / "out").exists() and (budget.entries_left, budget.bytes_left) == before
    whole = stream(member("agent/a.txt", data=b"a" * 600), member("agent/b.txt", data=b"b" * 6))
    assert collect_tar(whole, sink, strip=1) is True
    assert sink.record.error is None and sink.record.files == 2 and sink.record.bytes == 606
    assert budget.entries_left == before[0] - 2 and budget.bytes_left == before[1] - 606
    assert (tmp_path / "out" / "b.txt").read_bytes() == b"b" * 6
