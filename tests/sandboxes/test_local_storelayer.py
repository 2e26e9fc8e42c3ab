"""A layer's tar rebuilt from a containers-storage store (storelayer.py), against a store this
test lays out itself, hostile where an attacker's build could make it so: the unpacked tree
is what a task's build wrote, so a record must never read through its links, out of it, or
from a FIFO, and a tree that does not match the layer's digest is never filed under it."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import tarfile
import threading
from pathlib import Path

import pytest

from crucible.errors import SandboxFailed
from crucible.sandboxes.local.layers import LayerStore
from crucible.sandboxes.local.storelayer import Store


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _record(raw: bytes) -> bytes:
    """The tar-split record of `raw`: its bytes as segments, each file's contents by name."""
    lines, pos = [], 0
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        for m in tar.getmembers():
            lines.append(
                {"type": 2, "payload": base64.b64encode(raw[pos : m.offset_data]).decode()}
            )
            lines.append({"type": 1, "name": m.name, "size": m.size})
            pos = m.offset_data + m.size
    lines.append({"type": 2, "payload": base64.b64encode(raw[pos:]).decode()})
    return gzip.compress(b"".join(json.dumps(x).encode() + b"\n" for x in lines))


def _store(
    root: Path, raw: bytes, files: dict[str, bytes], layer: str = "l1", **extra: object
) -> tuple[Store, str]:
    """A store holding one layer whose tar is `raw`, its tree holding `files`."""
    diff_id = f"sha256:{hashlib.sha256(raw).hexdigest()}"
    (root / "overlay-layers").mkdir(parents=True, exist_ok=True)
    (root / "overlay-layers" / "layers.json").write_text(
        json.dumps([{"id": layer, "diff-digest": diff_id, **extra}])
    )
    (root / "overlay-layers" / f"{layer}.tar-split.gz").write_bytes(_record(raw))
    tree = root / "overlay" / layer / "diff"
    tree.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    store = Store.of({"store": {"GraphRoot": str(root), "GraphDriverName": "overlay"}})
    assert store is not None
    return store, diff_id


FILES = {"etc/motd": b"hello\n", "bin/tool": b"#!/bin/sh\necho ok\n" * 100}


def test_a_layer_is_rebuilt_byte_for_byte(tmp_path: Path) -> None:
    raw = _tar(FILES)
    store, diff_id = _store(tmp_path / "s", raw, FILES)
    layer = store.layer_for(diff_id)
    assert layer == "l1"
    assert b"".join(store.tar(layer)) == raw
    assert store.layer_for("sha256:" + "0" * 64) is None


def test_layers_with_id_maps_or_unfinished_are_not_read(tmp_path: Path) -> None:
    raw = _tar(FILES)
    mapped, d1 = _store(tmp_path / "a", raw, FILES, uidmap=[{"container_id": 0, "host_id": 1}])
    unfinished, d2 = _store(tmp_path / "b", raw, FILES, flags={"incomplete": True})
    assert mapped.layer_for(d1) is None and unfinished.layer_for(d2) is None
    bad = [{"store": {"GraphRoot": "rel", "GraphDriverName": "overlay"}}, {"store": {}}, {}]
    assert all(Store.of(b) is None for b in bad)  # type: ignore[arg-type]


def test_a_record_never_reads_through_a_link_out_of_the_tree(tmp_path: Path) -> None:
    secret = tmp_path / "host" / "secret"
    secret.parent.mkdir()
    secret.write_bytes(b"HOST-SECRET")
    files = {"a/secret": b"x" * 11}
    raw = _tar(files)
    store, _ = _store(tmp_path / "s", raw, {})
    tree = store.tree("l1")
    (tree / "a").symlink_to(secret.parent)  # the build left a link where the record looks
    with pytest.raises(SandboxFailed):
        b"".join(store.tar("l1"))
    (tree / "a").unlink()
    (tree / "a").mkdir()
    (tree / "a" / "secret").symlink_to(secret)  # and a link as the file itself
    with pytest.raises(SandboxFailed):
        b"".join(store.tar("l1"))


@pytest.mark.parametrize("name", ["../../host/secret", "/etc/passwd", "a/../../x", ""])
def test_a_record_naming_a_way_out_is_refused(tmp_path: Path, name: str) -> None:
    store, _ = _store(tmp_path / "s", _tar({"f": b"1"}), {"f": b"1"})
    rec = tmp_path / "s" / "overlay-layers" / "l1.tar-split.gz"
    rec.write_bytes(gzip.compress(json.dumps({"type": 1, "name": name, "size": 4}).encode()))
    with pytest.raises(SandboxFailed):
        b"".join(store.tar("l1"))


def test_a_fifo_in_the_tree_is_refused_without_waiting(tmp_path: Path) -> None:
    files = {"pipe": b"abcd"}
    store, _ = _store(tmp_path / "s", _tar(files), {})
    os.mkfifo(store.tree("l1") / "pipe")
    done: list[BaseException] = []

    def read() -> None:
        try:
            b"".join(store.tar("l1"))
        except BaseException as exc:  # what it raised, for the assertion
            done.append(exc)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "a FIFO the build left blocked the unpack"
    assert done and isinstance(done[0], SandboxFailed)


def _unpack(cache: Path, store: Store, diff_id: str, archive: list[bytes]) -> Path:
    layers = LayerStore(cache, "")

    def direct(d: str):
        layer = store.layer_for(d)
        return None if layer is None else store.tar(layer)

    layers.unpack(lambda: iter(archive), [diff_id], lambda _: None, None, direct)
    return layers.dir(diff_id)


def _docker_archive(raw: bytes) -> list[bytes]:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(f"{hashlib.sha256(raw).hexdigest()}.tar")
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
    return [buf.getvalue()]


def test_the_layer_comes_from_the_store_alone(tmp_path: Path) -> None:
    raw = _tar(FILES)
    store, diff_id = _store(tmp_path / "s", raw, FILES)
    out = _unpack(tmp_path / "cache", store, diff_id, [])  # an empty archive: never read
    assert (out / "etc/motd").read_bytes() == b"hello\n"


def test_a_tree_that_does_not_match_its_digest_is_never_filed_under_it(tmp_path: Path) -> None:
    raw = _tar(FILES)
    forged = dict(FILES, **{"etc/motd": b"PWNED\n"})  # the same size: only the digest tells
    store, diff_id = _store(tmp_path / "s", raw, forged)
    # The archive then gives the layer as the image has it.
    out = _unpack(tmp_path / "c1", store, diff_id, _docker_archive(raw))
    assert (out / "etc/motd").read_bytes() == b"hello\n"
    # With an archive that lacks it, the unpack fails rather than keep the forged tree.
    with pytest.raises(SandboxFailed):
        _unpack(tmp_path / "c2", store, diff_id, _docker_archive(_tar({"x": b"y"})))
    assert not LayerStore(tmp_path / "c2", "").dir(diff_id).exists()
