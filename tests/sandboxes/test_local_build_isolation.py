"""Attacks on the host from a task's Dockerfile, built by the local provider's Buildah
(buildiso.py): a RUN step that breaks out of a chroot finds only its own container, a
mount that reaches the host is refused, and `tasks check --run` builds the same way.

Before buildiso.py, Buildah ran with `--isolation chroot` as root: the double chroot
reached the host's `/`, wrote the marker, read the secret into the image, killed the
victim and connected to the host's loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import re
import secrets
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.build_jobs import running
from tests.helpers.wait import await_until
from tests.sandboxes.build_attack import (
    NOTHING_REACHED,
    HostBait,
    attack_results,
    host_bait,
    hostile_env,
)

import crucible
from crucible.errors import SandboxFailed, TaskInvalid
from crucible.sandboxes.base import NetworkMode, SandboxSpec
from crucible.sandboxes.docker.build import env_tag
from crucible.sandboxes.local import hostuid
from crucible.sandboxes.local.images import ImageStore, RootfsCache
from crucible.sandboxes.local.layers import LayerStack
from crucible.tasks.loader import tree_digest

MADE: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def _remove_images() -> Iterator[None]:
    yield
    tags = [f"localhost/{env_tag(tree_digest(env))}" for env in MADE if env.is_dir()]
    if tags and shutil.which("buildah"):
        subprocess.run(["buildah", "rmi", "-f", *tags], capture_output=True)


@pytest.fixture
def bait(tmp_path: Path) -> Iterator[HostBait]:
    with host_bait(tmp_path / "host") as b:
        yield b


def _read(tree: LayerStack, rel: str) -> str:
    path = tree.find(rel)
    assert path is not None, rel
    return path.read_text()


def _env(tmp_path: Path, dockerfile: str | None = None, bait: HostBait | None = None) -> Path:
    if bait is not None:
        env = hostile_env(tmp_path / "task", bait)
    else:
        env = tmp_path / "task" / f"env-{secrets.token_hex(4)}"
        env.mkdir(parents=True)
        # The nonce in every RUN step: Buildah's layer cache never skips the step.
        nonce = secrets.token_hex(4)
        text = re.sub(r"RUN (?!--)", f"RUN : {nonce}; ", dockerfile or "")  # flags stay flags
        (env / "Dockerfile").write_text(text)
        (env / "nonce").write_text(secrets.token_hex(8))
    MADE.append(env)
    return env


async def _build(
    tmp_path: Path, env: Path, network: NetworkMode = "none"
) -> tuple[LayerStack, str]:
    """Build and unpack `env` as a trial would; (the unpacked image, the build log)."""
    store = ImageStore(RootfsCache(tmp_path / "rootfs"), "buildah")
    store.log_dir = tmp_path / "job"
    spec = SandboxSpec(task_name="hostile", dockerfile_dir=env, network=network)
    try:
        rootfs = await store.resolve(spec)
    finally:
        store.close()
    logs = list((tmp_path / "job" / "builds").glob("*.log"))
    return rootfs.stack, "".join(p.read_text(errors="replace") for p in logs)


@pytest.mark.parametrize("network", ["none", "public"])
async def test_double_chroot_in_a_run_step_never_reaches_the_host(
    buildah: None, tmp_path: Path, bait: HostBait, network: NetworkMode
) -> None:
    tree, log = await _build(tmp_path, _env(tmp_path, bait=bait), network)
    # The step ran (its report is in the log) and reached nothing of the host.
    assert attack_results(log) == NOTHING_REACHED, log[-3000:]
    assert not bait.marker.exists(), "a RUN step wrote a file on the host"
    assert bait.secret_text not in log and bait.secret_text not in _read(tree, "leaked.txt")
    assert bait.victim.poll() is None, "a RUN step killed a host process"
    assert bait.connections() == 0, "a RUN step reached the host's 127.0.0.1"


async def test_build_steps_have_their_own_ids_namespaces_and_network(
    buildah: None, tmp_path: Path
) -> None:
    """Root inside is an unprivileged host uid; without network only loopback, with it a
    route of the build's own (never the host's interfaces); file owners stay the image's."""
    dockerfile = (
        "FROM debian:bookworm-slim\n"
        "RUN cat /proc/self/uid_map; echo PIDS $(ls /proc | grep -c '^[0-9]'); "
        "echo IFACES $(tail -n +3 /proc/net/dev | cut -d: -f1 | sort | tr -d ' ' | tr '\\n' ' '); "
        "mkdir /owned && chown 1234:4321 /owned\n"
    )
    tree, log = await _build(tmp_path, _env(tmp_path, dockerfile), "none")
    # uid 0 inside is the unprivileged build user; every other id is in its range.
    rows = [ln.split() for ln in log.splitlines() if re.fullmatch(r"\s*\d+\s+\d+\s+\d+", ln)]
    uid, (start, count) = _build_user_ids()
    assert rows == [["0", str(uid), "1"], ["1", start, count]] and uid != 0, rows
    assert int(next(ln for ln in log.splitlines() if ln.startswith("PIDS")).split()[1]) < 10
    assert _ifaces(log) == ["lo"], log[-2000:]
    st = tree.lstat("owned")
    assert st is not None
    assert (st.st_uid, st.st_gid) == (1234, 4321)  # the image's owners, not the host range
    _, log = await _build(tmp_path / "net", _env(tmp_path / "net", dockerfile), "public")
    ifaces = _ifaces(log)
    host_ifaces = _host_ifaces()
    assert ifaces == ["lo", "tap0"] and "tap0" not in host_ifaces, (ifaces, host_ifaces)


def _build_user_ids() -> tuple[int, tuple[str, str]]:
    """The build user's uid and its subordinate range, as this machine configures them."""
    uid = pwd.getpwnam("crucible-build").pw_uid
    with open("/etc/subuid") as fh:
        row = next(ln.strip().split(":") for ln in fh if ln.startswith("crucible-build:"))
    return uid, (row[1], row[2])


def _host_ifaces() -> set[str]:
    with open("/proc/net/dev") as fh:
        return {line.split(":")[0].strip() for line in fh.readlines()[2:]}


def _ifaces(log: str) -> list[str]:
    return next(ln for ln in log.splitlines() if ln.startswith("IFACES")).split()[1:]


@pytest.mark.parametrize(
    "run",
    [
        # CVE-2024-1753: a stage's link to / as a bind mount's source is the host's root.
        "RUN --mount=type=bind,from=s,source=/l,target=/h cat /h{secret} || true",
        # The same flag split over a line continuation.
        "RUN --mou\\\nnt=type=bind,from=s,source=/l,target=/h cat /h{secret} || true",
    ],
)
async def test_a_run_mount_that_reaches_the_host_is_refused(
    buildah: None, tmp_path: Path, bait: HostBait, run: str
) -> None:
    dockerfile = (
        "FROM debian:bookworm-slim AS s\nRUN ln -s / /l\nFROM debian:bookworm-slim\n"
        + run.format(secret=bait.secret)
        + "\n"
    )
    with pytest.raises(TaskInvalid, match="uses `--mount`, which crucible's local builds refuse"):
        await _build(tmp_path, _env(tmp_path, dockerfile))
    log = "".join(p.read_text() for p in (tmp_path / "job").rglob("*.log"))
    assert bait.secret_text not in log


@pytest.fixture
def shared_rootfs() -> Iterator[Path]:
    """A rootfs cache the sandboxes' uid can search (pytest's base dir is 0700)."""
    d = Path("/tmp") / f"crucible-test-rootfs-{secrets.token_hex(8)}"
    d.mkdir(mode=0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_tasks_check_run_builds_in_isolation(
    buildah: None, tmp_path: Path, bait: HostBait, shared_rootfs: Path
) -> None:
    """`crucible tasks check --run` builds a generated task's image: the same attack."""
    task = tmp_path / "hostile-task"
    env = hostile_env(tmp_path, bait)
    MADE.append(task / "environment")
    (task / "tests").mkdir(parents=True)
    (task / "solution").mkdir()
    env.rename(task / "environment")
    (task / "task.toml").write_text(
        'schema_version = "1.1"\n[environment]\nnetwork_mode = "no-network"\n'
        "[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 30.0\n"
    )
    (task / "instruction.md").write_text("Write /app/out.\n")
    (task / "tests" / "test.sh").write_text(
        "#!/usr/bin/env bash\n[ -f /app/out ] && echo 1 > /logs/verifier/reward.txt"
        " || echo 0 > /logs/verifier/reward.txt\n"
    )
    (task / "solution" / "solve.sh").write_text(
        "#!/usr/bin/env bash\nmkdir -p /app; : > /app/out\n"
    )
    env_vars = {
        **os.environ,
        "PYTHONPATH": str(Path(crucible.__file__).parents[1]),
        "CRUCIBLE_ROOTFS_DIR": str(shared_rootfs),
    }
    res = subprocess.run(
        [sys.executable, "-m", "crucible.cli.main", "tasks", "check", str(task), "--run", "--json"],
        capture_output=True, text=True, timeout=600, env=env_vars, cwd=tmp_path,
    )  # fmt: skip
    out = json.loads(res.stdout)
    # The image was built (its RUN step is the attack) and both runs ran on it.
    assert out["summary"]["invalid"] == 0 and [r["ok"] for r in out["runs"]] == [True], out
    assert not bait.marker.exists(), "tasks check --run let a RUN step write a host file"
    assert bait.secret_text not in res.stdout + res.stderr
    assert bait.victim.poll() is None, "tasks check --run let a RUN step kill a host process"
    assert bait.connections() == 0


@pytest.mark.parametrize("network", ["none", "public"])
async def test_a_build_that_times_out_leaves_no_step_running(
    buildah: None, tmp_path: Path, network: NetworkMode
) -> None:
    """A RUN step that blocks, and forks a daemon into a session of its own, outlives a
    build that timed out: runc puts each step in a session of its own, so killing the
    build's process group left both running as the build user for good (a miner runs
    forever). Now the build has its own pid namespace, which dies with the build."""
    name = f"/tmp/linger-{secrets.token_hex(4)}"
    dockerfile = (
        "FROM debian:bookworm-slim\n"
        f"RUN cp /bin/sleep {name} && (setsid {name} 86400 &) ; echo STARTED; {name} 86401\n"
    )
    # timing-ok: the build must time out after its step started; a loaded machine may need
    # longer to start it, so a timeout that came first is tried again with more time.
    for timeout in (12, 40, 90):
        env = _env(tmp_path / f"t{timeout}", dockerfile)
        store = ImageStore(RootfsCache(tmp_path / f"rootfs{timeout}"), "buildah")
        store.log_dir = tmp_path / f"job{timeout}"
        spec = SandboxSpec(
            task_name="linger", dockerfile_dir=env, network=network, build_timeout_sec=timeout
        )
        try:
            with pytest.raises(TaskInvalid, match="took more than"):
                await store.resolve(spec)
        finally:
            store.close()
        logs = (tmp_path / f"job{timeout}").rglob("*.log")
        log = "".join(p.read_text(errors="replace") for p in logs)
        if "STARTED" in log:
            break
    assert "STARTED" in log, log[-2000:]  # the step ran before the timeout
    try:
        await await_until(lambda: not running(name), f"the steps named {name} to end", 30)
    finally:
        for pid in running(name):  # never leave them behind, even when the test fails
            os.kill(pid, 9)


def _exposed_setuid_root(cache: Path) -> list[str]:
    """What a local user polling the image cache could run: setuid-root files under a
    folder every user can search (the attacker's loop, below)."""
    found = []
    trees = [(t, t / "rootfs") for t in cache.glob(".trash-unpack-*")]  # a flat unpack
    trees += [(cache / ".layers", t) for t in cache.glob(".layers/.tmp-*")]  # a layer's
    trees += [(t, t / "tree") for t in cache.glob(".layers/.tmp-*")]
    trees += [(t, t) for t in cache.glob(".layers/*")]
    for tmp, tree in trees:
        try:
            if not all(os.stat(p).st_mode & 0o001 for p in (cache, tmp, tree)):
                continue
            for f in os.scandir(tree / "s"):
                st = f.stat(follow_symlinks=False)
                if st.st_uid == 0 and st.st_mode & 0o4000 and st.st_mode & 0o001:
                    found.append(f.path)
        except OSError:
            continue  # not there yet, or gone
    return found


async def test_an_image_being_unpacked_never_offers_its_setuid_root_files(
    buildah: None, tmp_path: Path
) -> None:
    """The image's files keep their owners and modes while they are exported: a task's
    setuid-root shell was one, for every local user, in the world-searchable cache
    (/var/cache/crucible/rootfs) until the tree was given to the sandboxes' uid."""
    dockerfile = (
        "FROM debian:bookworm-slim\n"
        "RUN mkdir /s && cp /bin/sh /s/rootsh && chmod 4755 /s/rootsh && perl -e 'for (1..3000)"
        ' { open(my $f, ">", "/s/x$_") or die; print $f "x" x 64; close $f;'
        ' chmod(04755, "/s/x$_") or die }\'\n'
    )
    env = _env(tmp_path, dockerfile)
    cache = Path("/tmp") / f"crucible-test-rootfs-{secrets.token_hex(8)}"
    cache.mkdir(mode=0o755)  # as the default cache is: the sandboxes' uid must reach it
    store = ImageStore(RootfsCache(cache, owner=hostuid.IMAGE_UID), "buildah")
    store.log_dir = tmp_path / "job"
    seen: list[str] = []
    stop = threading.Event()

    def attacker() -> None:
        while not stop.is_set():
            seen.extend(_exposed_setuid_root(cache))
            stop.wait(0.001)  # timing-ok: the attacker's poll loop, not a wait on a result

    spy = threading.Thread(target=attacker)
    spy.start()
    try:
        rootfs = await store.resolve(SandboxSpec(task_name="setuid", dockerfile_dir=env))
        st = rootfs.stack.lstat("s/rootsh")
        assert st is not None and st.st_uid == hostuid.IMAGE_UID and not st.st_mode & 0o4000
        assert os.stat(rootfs.layers[-1].parent).st_mode & 0o001  # the sandboxes' uid reaches it
    finally:
        stop.set()
        spy.join()
        store.close()
        shutil.rmtree(cache, ignore_errors=True)
    assert not seen, f"a local user could run {seen[0]} (setuid root) during the unpack"


@pytest.mark.parametrize(
    "dockerfile",
    [
        "FROM containers-storage:[vfs@{store}+{run}]debian:bookworm-slim\nRUN true\n",
        # Through an ARG (Buildah expands it in FROM) and in COPY --from.
        "ARG B=containers-storage:[vfs@{store}+{run}]debian:bookworm-slim\nFROM $B\n",
        "FROM debian:bookworm-slim\nCOPY --from=containers-storage:[vfs@{store}+{run}]x / /\n",
    ],
)
async def test_a_base_named_through_a_store_spec_makes_nothing_on_the_host(
    buildah: None, tmp_path: Path, dockerfile: str
) -> None:
    """`FROM containers-storage:[driver@/path+/run]name` opens a store at a path the task
    chose: crucible handed such a base over with root's Buildah, which made the store
    there (folders and lock files, as root, in a folder only root can write)."""
    store, run = tmp_path / "host" / "store", tmp_path / "host" / "run"
    (tmp_path / "host").mkdir(mode=0o700)  # root's: the build user cannot write here
    with pytest.raises(TaskInvalid, match="names an image through `containers-storage:`"):
        await _build(tmp_path, _env(tmp_path, dockerfile.format(store=store, run=run)))
    assert not store.exists() and not run.exists(), "a FROM line made files on the host as root"


@pytest.fixture
def rogue_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home of the build user's own for this test (its usual one is shared by every
    build on the machine), with crucible pointed at it."""
    from crucible.sandboxes.local import builduser

    user = builduser.require_user()
    home = Path("/var/lib/crucible") / f"test-home-{secrets.token_hex(6)}"
    home.mkdir(mode=0o700)
    os.chown(home, user.uid, user.gid)
    monkeypatch.setattr(builduser, "BUILD_HOME", home)
    monkeypatch.setattr(builduser, "STORAGE_CONF", home / ".config/containers/storage.conf")
    yield home
    shutil.rmtree(home, ignore_errors=True)


async def test_a_build_user_gone_rogue_never_gets_root_to_write_for_it(
    buildah: None, tmp_path: Path, rogue_home: Path
) -> None:
    """Defence in depth: a step that escaped its container runs as the build user, which
    owns every name in its home. It linked `stage` and `.config` there to a folder only
    root may write: crucible, as root, made its stage in that folder and chowned it to the
    user, and wrote storage.conf through the link and gave its folder to the user (with
    `.config` -> /etc, that is /etc/containers: root's Buildah's configuration)."""
    from crucible.sandboxes.local import builduser

    user = builduser.require_user()
    host = tmp_path / "host"
    (host / "containers").mkdir(parents=True)
    host.chmod(0o700)
    plant = f"ln -s {host} {rogue_home}/stage && ln -s {host} {rogue_home}/.config"
    argv = [*user.prefix(), "sh", "-c", plant]
    await asyncio.to_thread(subprocess.run, argv, check=True, env=user.env())
    before = sorted(str(p.relative_to(host)) for p in host.rglob("*"))
    env = _env(tmp_path, "FROM debian:bookworm-slim\nRUN true\n")
    with contextlib.suppress(SandboxFailed):  # the user's own storage set-up cannot work
        await _build(tmp_path, env)
    owners = {p: os.lstat(p).st_uid for p in [host, *host.rglob("*")]}
    assert set(owners.values()) == {0}, f"root gave a host folder to the build user: {owners}"
    assert sorted(str(p.relative_to(host)) for p in host.rglob("*")) == before
