"""The local image cache by layers (layers.py): a layer shared by two images is unpacked
once and stacked under both; whiteouts and opaque folders behave as on docker; no
sandbox's write reaches a shared layer; hostile layer archives are refused; cleanup
removes the layers no image names."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import io
import os
import secrets
import shutil
import subprocess
import tarfile
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tests.helpers.rootfs import private_rootfs_dir

from crucible.errors import SandboxFailed
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.docker.build import env_tag
from crucible.sandboxes.local.images import ImageStore, RootfsCache, RootfsEntry
from crucible.sandboxes.local.imagetools import ImageConfig
from crucible.sandboxes.local.layers import LayerStack, LayerStore, stack_ids
from crucible.sandboxes.local.provider import LocalProvider, LocalSandbox
from crucible.tasks.loader import tree_digest

# A layer that deletes a file and replaces a folder (Buildah writes an opaque marker).
IMAGE_A = """\
FROM debian:bookworm-slim
COPY nonce.txt /nonce-a
RUN mkdir -p /d/sub && echo a > /d/a && echo b > /d/sub/b && echo keep > /keep && echo gone > /gone
RUN rm /gone && rm -rf /d && mkdir /d && echo c > /d/c
"""
IMAGE_B = """\
FROM debian:bookworm-slim
COPY nonce.txt /nonce-b
"""
MADE: list[Path] = []


@pytest.fixture(scope="module")
def rootfs_dir() -> Iterator[Path]:
    """This module's own cache, where the image uid can reach it (not under pytest's 0700)."""
    with private_rootfs_dir("crucible-test-layers") as d:
        yield d
    tags = [f"localhost/{env_tag(tree_digest(env))}" for env in MADE]
    if tags and shutil.which("buildah"):
        subprocess.run(["buildah", "rmi", "-f", *tags], capture_output=True)


def _env(root: Path, dockerfile: str) -> Path:
    env = root / f"env-{secrets.token_hex(4)}"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text(dockerfile)
    (env / "nonce.txt").write_text(secrets.token_hex(16))
    MADE.append(env)
    return env


@pytest.fixture(scope="module")
def envs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("layer-envs")
    return _env(root, IMAGE_A), _env(root, IMAGE_B)


def _spec(env: Path) -> SandboxSpec:
    return SandboxSpec(
        dockerfile_dir=env, task_name="layers", memory_mb=256, pids_limit=128,
        job_id=f"test-{secrets.token_hex(4)}",
    )  # fmt: skip


@pytest.fixture
async def provider(buildah: None, rootfs_dir: Path) -> AsyncIterator[LocalProvider]:
    p = LocalProvider(image_tool="buildah")
    await p.preflight()
    yield p
    await p.aclose()


async def _run(sb: LocalSandbox, cmd: str) -> str:
    r = await sb.exec(cmd, timeout=30)
    assert r.ok, (cmd, r.stdout, r.stderr)
    return r.stdout


async def test_images_sharing_a_base_share_its_unpacked_layers(
    provider: LocalProvider, envs: tuple[Path, Path]
) -> None:
    # At once, as a job prepares its images: the shared base is still unpacked once.
    a, b = await asyncio.gather(provider.create(_spec(envs[0])), provider.create(_spec(envs[1])))
    try:
        assert provider.images.store.layers_made == 5
        assert isinstance(a, LocalSandbox) and isinstance(b, LocalSandbox)
        assert a.image is not None and b.image is not None
        la, lb = a.image.rootfs.layers, b.image.rootfs.layers
        assert len(la) == 4 and len(lb) == 2  # base, COPY, two RUNs / base, COPY
        assert la[0] == lb[0] and os.stat(la[0]).st_ino == os.stat(lb[0]).st_ino
        assert set(la[1:]).isdisjoint(lb[1:])
        # A crucible from before layers, sharing the cache, sees no flat entry it lacks the
        # tree of, and its gc() (which skips dot-names) leaves the layers alone.
        entry_dir = provider.images.store.cache.entry_dir(a.image.rootfs.entry.image_id)
        assert (entry_dir / "layers.json").is_file() and not (entry_dir / "image.json").exists()
        assert la[0].parent.name == ".layers"
        # The base is on disk once: the cache holds the two images' five layers, not two trees.
        assert len(list((la[0].parent).glob("[0-9a-f]*"))) == 5
        assert (await _run(b, "cat /nonce-b; test ! -e /nonce-a && echo ok")).endswith("ok\n")
    finally:
        await a.close()
        await b.close()


async def test_whiteouts_and_opaque_folders_behave_in_the_sandbox(
    provider: LocalProvider, envs: tuple[Path, Path]
) -> None:
    """A file deleted by a later layer is absent; a folder made anew hides what the
    layers below had in it; the rest of the stack shows through."""
    async with await provider.create(_spec(envs[0])) as sb:
        assert isinstance(sb, LocalSandbox) and sb.image is not None
        out = await _run(
            sb, "test ! -e /gone && echo gone; ls -A /d; cat /keep /etc/debian_version"
        )
        lines = out.splitlines()
        assert lines[:3] == ["gone", "c", "keep"] and lines[3].startswith("12.")
        stack = sb.image.rootfs.stack  # the host's view agrees with the sandbox's
        assert stack.lstat("gone") is None and stack.lstat("d/a") is None
        assert stack.lstat("d/c") is not None and stack.lstat("keep") is not None
        assert await sb.changed_system_paths() == []


ATTACK = r"""
set -u
echo pwned > /etc/debian_version
chmod 777 /etc/login.defs; echo pwned >> /keep
ln /etc/debian_version /etc/linked 2>/dev/null; mv /etc/issue /etc/issue.moved
exec 3</usr/share/common-licenses/GPL-3
: > /proc/self/fd/3; echo pwned > /proc/self/fd/3
truncate -s 0 /usr/bin/dpkg
rm -rf /usr/share/doc
echo done
"""


async def test_a_sandbox_never_writes_a_shared_layer(
    provider: LocalProvider, envs: tuple[Path, Path]
) -> None:
    """Attack: an agent in a sandbox of image A writes, chmods, links, renames, truncates
    (also through /proc/self/fd) and deletes files of the layers it shares; a second
    sandbox of A and one of image B (sharing the base) see them unchanged, as does the host."""
    a = await provider.create(_spec(envs[0]))
    try:
        assert isinstance(a, LocalSandbox) and a.image is not None
        base = a.image.rootfs.layers[0]
        watched = ["etc/debian_version", "etc/login.defs", "etc/issue", "usr/bin/dpkg"]
        watched.append("usr/share/common-licenses/GPL-3")
        before = {p: _digest(base / p) for p in watched}
        mode = os.stat(base / "etc/login.defs").st_mode
        assert (await _run(a, ATTACK)).endswith("done\n")
        assert (await _run(a, "cat /etc/debian_version")) == "pwned\n"  # its own layer has it
    finally:
        await a.close()
    assert {p: _digest(base / p) for p in watched} == before
    assert os.stat(base / "etc/login.defs").st_mode == mode and (base / "usr/share/doc").is_dir()
    for env in envs:
        async with await provider.create(_spec(env)) as sb:
            out = await _run(
                sb,
                "cat /etc/debian_version; stat -c %a /etc/login.defs; test -e /etc/issue; "
                "test ! -e /etc/linked; test -s /usr/bin/dpkg; test -d /usr/share/doc; "
                "grep -c 'GNU GENERAL PUBLIC LICENSE' /usr/share/common-licenses/GPL-3",
            )
            assert out.splitlines()[0].startswith("12.") and out.splitlines()[1:] == ["644", "1"]
    async with await provider.create(_spec(envs[0])) as sb:
        assert await _run(sb, "cat /keep") == "keep\n"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- hostile layer archives and cleanup, without any tool ---------------------------------


def _tar(*members: tuple[tarfile.TarInfo, bytes | None], pax: bool = False) -> bytes:
    buf = io.BytesIO()
    fmt = tarfile.PAX_FORMAT if pax else tarfile.GNU_FORMAT
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _m(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", **pax: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.pax_headers = dict(pax)
    return info


def _archive(layers: list[bytes], names: list[str] | None = None) -> list[bytes]:
    """A `docker save` archive of these layer tars, named by digest unless `names`."""
    names = names or [f"{hashlib.sha256(t).hexdigest()}.tar" for t in layers]
    raw = _tar(*((_m(n), t) for n, t in zip(names, layers, strict=True)))
    return [raw[i : i + 4096] for i in range(0, len(raw), 4096)]


def _unpack(store: LayerStore, layers: list[bytes], names: list[str] | None = None) -> list[str]:
    ids = [hashlib.sha256(t).hexdigest() for t in layers]
    store.unpack(lambda: iter(_archive(layers, names)), ids, lambda _: None)
    return ids


LOWER = _tar(
    (_m("d", tarfile.DIRTYPE), None), (_m("d/old"), b"old"), (_m("f"), b"f"),
    (_m("e", tarfile.DIRTYPE), None), (_m("e/kept"), b"kept"),
)  # fmt: skip
UPPER = _tar(
    (_m("d", tarfile.DIRTYPE), None), (_m("d/.wh..wh..opq"), b""), (_m("d/new"), b"new"),
    (_m(".wh.f"), b""), (_m("e/.wh..wh.plnk"), b""), (_m("e/added"), b"a"),
)  # fmt: skip


def test_whiteouts_and_opaque_markers_as_the_overlay_reads_them(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers", "")
    ids = _unpack(store, [LOWER, UPPER])
    upper = store.dir(ids[1])
    assert os.stat(upper / "f").st_rdev == 0 and not (upper / ".wh.f").exists()
    assert os.getxattr(upper / "d", "user.overlay.opaque") == b"y"
    assert not (upper / "d/.wh..wh..opq").exists() and not (upper / "e/.wh..wh.plnk").exists()
    stack = LayerStack([store.dir(i) for i in ids])
    assert stack.lstat("f") is None and stack.lstat("d/old") is None
    assert stack.lstat("d/new") is not None and stack.lstat("e/kept") is not None
    # Unpacked once: a second image with the same lower layer makes nothing new.
    assert store.unpack(lambda: iter(_archive([LOWER])), ids[:1], lambda _: None) == 0


@pytest.mark.parametrize(
    "members",
    [
        [(_m("lib", tarfile.SYMTYPE, "/outside"), None), (_m("lib/evil"), b"x")],
        [(_m("../evil"), b"x")],
        [(_m("hard", tarfile.LNKTYPE, "../../../../outside/secret"), None)],
        [(_m("lib", tarfile.SYMTYPE, "../../../../outside"), None), (_m("lib/.wh.secret"), b"")],
        [(_m("lib", tarfile.SYMTYPE, "../../../../outside"), None), (_m("lib/.wh..wh..opq"), b"")],
        [  # a folder seen real, then replaced by a link out, then written through
            (_m("lib", tarfile.DIRTYPE), None),
            (_m("lib/x"), b"x"),
            (_m("lib", tarfile.SYMTYPE, "../../../../outside"), None),
            (_m("lib/evil"), b"x"),
        ],
        [  # the same, the folder replaced through a whiteout of it
            (_m("lib", tarfile.DIRTYPE), None),
            (_m("lib/x"), b"x"),
            (_m(".wh.lib"), b""),
            (_m("lib", tarfile.SYMTYPE, "../../../../outside"), None),
            (_m("lib/evil"), b"x"),
        ],
    ],
    ids=[
        "through-symlink",
        "dotdot",
        "hardlink-out",
        "whiteout-out",
        "opaque-out",
        "dir-then-link",
        "dir-whiteout-then-link",
    ],
)
def test_a_hostile_layer_never_reaches_outside(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]
) -> None:
    """Attack: a layer writes, links, whites out or marks opaque outside its folder."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    with pytest.raises(SandboxFailed):
        _unpack(LayerStore(tmp_path / "cache" / "layers", ""), [_tar(*members)])
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_text() == "s" and os.stat(outside / "secret").st_nlink == 1
    assert os.listxattr(outside) == []
    assert list((tmp_path / "cache" / "layers").iterdir()) == []  # nothing half-made is left


def test_a_layer_cannot_plant_devices_or_overlay_xattrs(tmp_path: Path) -> None:
    """Attack: a device node named like a file (it would read as a whiteout), and pax xattrs
    that would make a folder opaque or redirect it: none is made."""
    layer = _tar(
        (_m("etc", tarfile.DIRTYPE, **{"SCHILY.xattr.user.overlay.opaque": "y"}), None),
        (_m("usr", tarfile.DIRTYPE, **{"SCHILY.xattr.user.overlay.redirect": "/etc"}), None),
        (_m("passwd", tarfile.CHRTYPE), None),
        pax=True,
    )
    store = LayerStore(tmp_path / "layers", "")
    (tree,) = [store.dir(i) for i in _unpack(store, [layer])]
    assert os.listxattr(tree / "etc") == [] and os.listxattr(tree / "usr") == []
    assert not os.path.lexists(tree / "passwd")


def test_a_layer_filed_under_another_digest_is_refused(tmp_path: Path) -> None:
    """Attack: an archive names a blob by the digest of the layer it wants to replace."""
    store = LayerStore(tmp_path / "layers", "")
    wanted = hashlib.sha256(LOWER).hexdigest()
    evil = _tar((_m("f"), b"evil"))
    with pytest.raises(SandboxFailed, match="other content"):
        store.unpack(lambda: iter(_archive([evil], [f"{wanted}.tar"])), [wanted], lambda _: None)
    assert not store.dir(wanted).exists()


def test_cleanup_removes_the_layers_no_image_names(tmp_path: Path) -> None:
    cache = RootfsCache(tmp_path, owner=4242)
    store = cache.layer_store()
    base, top_a, top_b = _unpack(store, [LOWER, UPPER, _tar((_m("b"), b"b"))])
    for image_id, layers in (("a" * 64, [base, top_a]), ("b" * 64, [base, top_b])):
        d = cache.entry_dir(image_id)
        d.mkdir(parents=True)
        entry = RootfsEntry(
            image_id=image_id, tool="t", source="s", config=ImageConfig(), created_at="x",
            layers=layers,
        )  # fmt: skip
        (d / "layers.json").write_text(entry.model_dump_json())
    held = cache.hold("a" * 64)
    assert held is not None
    try:
        assert cache.gc() == 2  # image b's entry and its own top layer
        assert store.dir(base).is_dir() and store.dir(top_a).is_dir()
        assert not store.dir(top_b).exists()
        rootfs = cache.get("a" * 64)
        assert rootfs is not None and rootfs.layers == (store.dir(base), store.dir(top_a))
    finally:
        os.close(held)
    assert cache.gc() == 3 and not any(p.name[0] != "." for p in store.root.iterdir())


def test_an_unpack_under_way_keeps_cleanup_off_the_layers(tmp_path: Path) -> None:
    cache = RootfsCache(tmp_path)
    store = cache.layer_store()
    (layer,) = _unpack(store, [LOWER])  # no entry names it yet
    share = store.share()
    try:
        assert cache.gc() == 0 and store.dir(layer).is_dir()
    finally:
        os.close(share)
    assert cache.gc() == 1 and not store.dir(layer).exists()


async def test_a_layer_is_read_from_buildahs_store_not_its_whole_archive(
    buildah: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each layer the cache lacks comes from Buildah's store alone (storelayer.py): the
    image's archive, which streams every layer, is not asked for, and what is unpacked is
    what the image holds (its digest is checked)."""
    from crucible.sandboxes.local import imagesave

    def no_archive(*_: object) -> Iterator[bytes]:
        raise AssertionError("the whole image's archive was streamed")
        yield b""

    monkeypatch.setattr(imagesave, "save", no_archive)
    tmp = Path("/tmp") / f"crucible-test-direct-{secrets.token_hex(6)}"
    store = ImageStore(RootfsCache(tmp, owner=os.geteuid()), "buildah")
    try:
        rootfs = await store.resolve(SandboxSpec(image="debian:bookworm-slim"))
        assert rootfs.entry.layers and store.layers_made == len(rootfs.entry.layers)
        assert rootfs.stack.lstat("etc/debian_version") is not None
    finally:
        store.close()
        shutil.rmtree(tmp, ignore_errors=True)


async def test_the_flat_cache_stays_selectable(buildah: None, tmp_path: Path) -> None:
    """layered=False: the whole tree unpacked flat, as before layers (bench/local_layers.py
    compares the two)."""
    tmp = Path("/tmp") / f"crucible-test-flat-{secrets.token_hex(6)}"
    store = ImageStore(RootfsCache(tmp, owner=os.geteuid()), "buildah", layered=False)
    try:
        rootfs = await store.resolve(SandboxSpec(image="debian:bookworm-slim"))
        assert rootfs.layers == (store.cache.entry_dir(rootfs.entry.image_id) / "rootfs",)
        assert rootfs.entry.layers == [] and rootfs.stack.lstat("etc/debian_version") is not None
    finally:
        store.close()
        shutil.rmtree(tmp, ignore_errors=True)


def test_images_unpacked_at_once_unpack_their_shared_layer_once(tmp_path: Path) -> None:
    """Two unpacks that both lack the base (each has computed what it needs) stream it at
    the same time: one unpacks it, the other finds it made and skips it."""
    cache = RootfsCache(tmp_path)
    store = cache.layer_store()
    both = threading.Barrier(2)
    ids = [hashlib.sha256(LOWER).hexdigest()]

    def archive() -> Iterator[bytes]:
        both.wait(timeout=60)  # each has computed its `need` by now
        yield from _archive([LOWER])

    def lock(digest: str) -> int:
        return cache.lock(f"layer:{digest}")

    with ThreadPoolExecutor(2) as pool:
        made = list(pool.map(lambda _: store.unpack(archive, ids, lambda _: None, lock), [1, 2]))
    assert sorted(made) == [0, 1] and store.dir(ids[0]).is_dir()


def test_a_stack_too_long_for_one_mount_is_unpacked_flat(tmp_path: Path) -> None:
    """bwrap's overlay options fit in one page: an image of many layers cannot be stacked
    (images.py then unpacks it flat); a layer listed twice is stacked once, at its top place."""
    store = LayerStore(tmp_path / "layers", "-u536870911")
    ids = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(40)]
    assert store.fits(ids[:10]) and not store.fits(ids)
    assert stack_ids([f"sha256:{ids[0]}", ids[1], f"sha256:{ids[0]}"]) == [ids[1], ids[0]]


def test_bwraps_overlay_honours_the_markers(tmp_path: Path) -> None:
    """The layers above, stacked by bubblewrap as a sandbox's are (--overlay-src each, the
    top one last): the whiteout hides /f, the opaque /d hides the lower /d/old."""
    from crucible.sandboxes.local.imagemode import overlay_bwrap

    store = LayerStore(tmp_path / "layers", "")
    ids = _unpack(store, [LOWER, UPPER])
    argv = [overlay_bwrap(), "--unshare-user", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64"):
        if os.path.islink(f"/{name}"):
            argv += ["--symlink", os.readlink(f"/{name}"), f"/{name}"]
    for i in ids:
        argv += ["--overlay-src", str(store.dir(i))]
    argv += ["--tmp-overlay", "/img", "--proc", "/proc", "--dev", "/dev", "--"]
    script = "cd /img && ls -A . d e && cat d/new e/kept"
    out = subprocess.run([*argv, "sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [".:", "d", "e", "d:", "new", "e:", "added", "kept", "newkept"]


def test_cleanup_asks_which_layers_are_named_only_once_no_unpack_can_start(
    tmp_path: Path,
) -> None:
    """An unpack that finds a layer here and names it in its entry holds the lock shared:
    gc() reads the entries only once it holds the lock, so none is named behind its back."""
    store = LayerStore(tmp_path / "layers", "")
    (layer,) = _unpack(store, [LOWER])
    seen: list[bool] = []

    def referenced() -> set[str]:
        fd = os.open(store.root / ".lock", os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            seen.append(False)  # an unpack could start now
        except BlockingIOError:
            seen.append(True)
        finally:
            os.close(fd)
        return {store.dir(layer).name}

    assert store.gc(referenced) == 0 and seen == [True] and store.dir(layer).is_dir()
