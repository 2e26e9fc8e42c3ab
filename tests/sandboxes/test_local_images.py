"""Image-backed local sandboxes with real builds (Buildah, and Docker once): the task's image
is `/`, its config is honoured, each trial writes only its own layer, builds run once per
digest, failures say what to do, and the rootfs cache is collected when unused."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tests.helpers.rootfs import private_rootfs_dir
from tests.helpers.wait import await_until

from crucible.errors import ProviderUnavailable, ResourcesUnavailable, TaskInvalid
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.docker.build import env_tag
from crucible.sandboxes.local.imagemode import resolve_user
from crucible.sandboxes.local.images import ImageStore, RootfsCache, RootfsEntry
from crucible.sandboxes.local.imagetools import ImageConfig
from crucible.sandboxes.local.provider import LocalProvider, LocalSandbox
from crucible.tasks.loader import tree_digest

DOCKERFILE = """\
FROM debian:bookworm-slim
ENV GREETING="hello from the image" PATH=/opt/tool/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /app
COPY nonce.txt /opt/tool/nonce.txt
COPY entry.sh /entry.sh
RUN mkdir -p /opt/tool/bin && printf '#!/bin/sh\\necho tool-ran\\n' > /opt/tool/bin/only-in-image \\
    && chmod +x /opt/tool/bin/only-in-image && rm /etc/debian_version
ENTRYPOINT ["/bin/sh", "/entry.sh"]
"""
ENTRY = 'echo "$@" > /tmp/entrypoint-ran\nexec "$@"\n'


MADE: list[Path] = []  # environments this module built: their images go at its end


@pytest.fixture(scope="module", autouse=True)
def rootfs_dir() -> Iterator[Path]:
    """A cache of this module's own: builds and unpacks here are real and counted. Not
    under pytest's 0700 base dir: the image uid (hostuid.IMAGE_UID, when we are root)
    must search every directory on the way to the trees."""
    with private_rootfs_dir("crucible-test-rootfs") as d:
        yield d
    # Each run's nonces make new images: remove them from the tools' storage.
    tags = [env_tag(tree_digest(env)) for env in MADE]
    if tags and shutil.which("buildah"):
        subprocess.run(
            ["buildah", "rmi", "-f", *(f"localhost/{t}" for t in tags)], capture_output=True
        )
    if tags and shutil.which("docker"):
        subprocess.run(["docker", "rmi", "-f", *tags], capture_output=True)


def make_env(root: Path, dockerfile: str = DOCKERFILE) -> Path:
    """An environment/ folder whose digest is new (a nonce): its first use really builds."""
    env = root / f"env-{secrets.token_hex(4)}"
    MADE.append(env)
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text(dockerfile)
    (env / "nonce.txt").write_text(secrets.token_hex(16))
    (env / "entry.sh").write_text(ENTRY)
    return env


@pytest.fixture(scope="module")
def env_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_env(tmp_path_factory.mktemp("env"))


def spec(env: Path | None = None, **kw: object) -> SandboxSpec:
    kw.setdefault("job_id", f"test-{uuid.uuid4().hex[:8]}")
    return SandboxSpec(dockerfile_dir=env, task_name="img", memory_mb=256, pids_limit=128, **kw)  # type: ignore[arg-type]


@pytest.fixture
async def provider(buildah: None) -> AsyncIterator[LocalProvider]:
    p = LocalProvider(image_tool="buildah")
    await p.preflight()
    yield p
    await p.aclose()


async def wait_for_file(sb: LocalSandbox, path: str) -> str:
    async def read() -> str | None:
        r = await sb.exec(f"cat {path}", timeout=5)
        return r.stdout if r.ok else None

    return await await_until(read, f"{path} in the sandbox")


async def test_task_runs_on_its_image_with_its_config(
    provider: LocalProvider, env_dir: Path
) -> None:
    async with await provider.create(spec(env_dir)) as sb:
        assert isinstance(sb, LocalSandbox)
        r = await sb.exec(
            'echo "$GREETING"; pwd; only-in-image; cat /opt/tool/nonce.txt; '
            "test -e /etc/debian_version && echo has-debian-version; "
            "command -v python3 || echo no-python",
            timeout=10,
        )
        nonce = (env_dir / "nonce.txt").read_text()
        # ENV, WORKDIR, COPY, RUN (a file deleted in a later layer stays deleted), and
        # none of the host's userland (the host has python3 in /usr/bin).
        assert r.stdout.split("\n") == [
            "hello from the image",
            "/app",
            "tool-ran",
            nonce + "no-python",
            "",
        ]
        # ENTRYPOINT ran with Harbor's arguments.
        assert await wait_for_file(sb, "/tmp/entrypoint-ran") == "sh -c sleep infinity\n"
        assert await sb.changed_system_paths() == []
        # apt downloads as root (no _apt privilege drop without capabilities), so an
        # agent can `apt-get install` as on docker.
        apt = await sb.exec("apt-config dump APT::Sandbox::User", timeout=10)
        assert apt.stdout == 'APT::Sandbox::User "root";\n'


async def test_system_writes_stay_in_the_trial_and_are_recorded(
    provider: LocalProvider, env_dir: Path
) -> None:
    """Attack: replace a tool, delete /etc/passwd, plant a loader path and a link; the
    shared rootfs and a concurrent trial of the same image never see it."""
    a = await provider.create(spec(env_dir))
    b = await provider.create(spec(env_dir))
    try:
        assert isinstance(a, LocalSandbox) and a.image is not None
        lower = a.image.rootfs.stack  # the image's tree as its layers show it
        attack = (
            "echo pwned > /opt/tool/bin/only-in-image && echo pwned > /usr/bin/only-mine && "
            "rm /etc/passwd && mkdir -p /usr/lib/evil && ln -sf /tmp/x /usr/bin/env && "
            "echo fine > /app/work.txt && echo fine > /tmp/t"
        )
        assert (await a.exec(attack, timeout=10)).ok
        assert (
            await b.exec(
                "only-in-image; test -e /etc/passwd && test ! -e /usr/bin/only-mine", timeout=10
            )
        ).stdout == "tool-ran\n"
        assert lower.lstat("etc/passwd") is not None and lower.lstat("usr/bin/only-mine") is None
        tool = lower.find("opt/tool/bin/only-in-image")
        assert tool is not None and "pwned" not in tool.read_text()
        changed = await a.changed_system_paths()
        # The whole layer outside the agent's places (/opt too); an empty new folder is not
        # a change of any file (what it will hold is).
        assert changed == [
            "deleted /etc/passwd",
            "changed /opt/tool/bin/only-in-image",
            "changed /usr/bin/env",
            "added /usr/bin/only-mine",
        ]
        record = await a.system_changes()
        assert record is not None and all(c.executable for c in record.changes[1:])
        assert await b.changed_system_paths() == []
        layers = a.image.layers
    finally:
        await a.close()
        await b.close()
    assert not layers.exists()  # the private layer goes with its sandbox


async def test_a_layer_shaped_to_point_at_the_host_is_read_without_following(
    provider: LocalProvider, env_dir: Path
) -> None:
    """Attack: /sbin becomes a link to / and /usr/lib/x a link to /root (on the host,
    root's home); the record names what changed and nothing of what the links point at."""
    async with await provider.create(spec(env_dir)) as sb:
        r = await sb.exec("rm -f /sbin && ln -s / /sbin && ln -s /root /usr/lib/x", timeout=10)
        assert r.ok, r.stderr
        assert await sb.changed_system_paths() == ["changed /sbin", "added /usr/lib/x"]


async def test_the_images_user_runs_the_commands(provider: LocalProvider, tmp_path: Path) -> None:
    """USER as docker's default exec user: its uid, gid and HOME, writing its own files
    and the logs; an unknown USER is the task's error."""
    env = make_env(
        tmp_path,
        "FROM debian:bookworm-slim\nRUN useradd -m -u 1234 app\nUSER app:users\nWORKDIR /home/app\n",
    )
    async with await provider.create(spec(env, workdir="/home/app")) as sb:
        r = await sb.exec(
            "id -u; id -g; id -un; echo $HOME; touch mine && echo 1 > /logs/verifier/reward.txt "
            "&& stat -c %U mine",
            timeout=10,
        )
        assert r.stdout.split() == ["1234", "100", "app", "/home/app", "app"], r.stderr
    bad = make_env(tmp_path / "bad", "FROM debian:bookworm-slim\nUSER nobody-here\n")
    with pytest.raises(TaskInvalid, match="nobody-here"):
        await provider.create(spec(bad))


@pytest.mark.skipif(os.geteuid() != 0, reason="the layer gets a tmpfs of its own only as root")
async def test_a_full_layer_is_no_space_never_out_of_memory(
    provider: LocalProvider, env_dir: Path
) -> None:
    """Attack: fill the writable layer; the sandbox says "no space left" at storage_mb, and
    its memory stays free for what runs next (the verifier)."""
    async with await provider.create(spec(env_dir, storage_mb=64)) as sb:
        r = await sb.exec("dd if=/dev/zero of=/usr/big bs=1M count=300", timeout=30)
        assert r.exit_code != 0 and "No space left" in r.stderr
        # 150 MiB of the 256 MiB limit in one buffer: there only if the files took no more.
        after = await sb.exec("dd if=/dev/zero of=/dev/null bs=150M count=1", timeout=30)
        assert after.ok, after.stderr
        assert await sb.changed_system_paths() == ["added /usr/big"]


async def test_exec_server_kit_is_out_of_reach(provider: LocalProvider, env_dir: Path) -> None:
    """Attack: the host shells that serve execs cannot be changed, read through pid 1 or
    killed, and their libraries never reach the image's programs."""
    async with await provider.create(spec(env_dir)) as sb:
        r = await sb.exec(
            "echo x > /.crucible-host/bash || echo ro; cat /proc/1/maps >/dev/null 2>&1 || echo hidden; "
            "kill -9 1; grep -c crucible-host /proc/self/maps; echo LD=$LD_LIBRARY_PATH",
            timeout=10,
        )
        assert r.stdout.split() == ["ro", "hidden", "0", "LD="]
        assert (await sb.exec("echo alive", timeout=10)).stdout == "alive\n"


async def test_one_build_per_digest_across_trials_and_jobs(buildah: None, tmp_path: Path) -> None:
    env = make_env(tmp_path)
    p, q = LocalProvider(image_tool="buildah"), LocalProvider(image_tool="buildah")
    try:  # two jobs at once (their locks are files: as two processes'), four trials each
        boxes = await asyncio.gather(*(x.create(spec(env)) for x in (p, q) for _ in range(4)))
        builds = p.images.store.builds_run + q.images.store.builds_run
        unpacks = p.images.store.unpacks_run + q.images.store.unpacks_run
        assert (builds, unpacks) == (1, 1)
        for box in boxes:
            await box.close()
    finally:
        await p.aclose()
        await q.aclose()
    later = LocalProvider(image_tool="buildah")  # a later job: nothing to build or unpack
    try:
        async with await later.create(spec(env)) as sb:
            assert (await sb.exec("only-in-image", timeout=10)).stdout == "tool-ran\n"
        assert (later.images.store.builds_run, later.images.store.unpacks_run) == (0, 0)
    finally:
        await later.aclose()


PROXY_SECRET = "http://operator:proxy-pass-5e1f@127.0.0.1:9"


async def test_a_build_step_never_reads_the_hosts_proxy_credentials(
    provider: LocalProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Attack: Buildah hands the host's proxy variables to every RUN step by default, and a
    # proxy URL often carries the operator's credentials. The step writes what it sees
    # into the image, where the agent (and anything the step sends) gets it.
    for name in ("http_proxy", "HTTPS_PROXY", "no_proxy", "FTP_PROXY"):
        monkeypatch.setenv(name, PROXY_SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-never-in-a-build")
    env = make_env(tmp_path, "FROM debian:bookworm-slim\nARG http_proxy\nARG HTTPS_PROXY\n"
                   "RUN (env; echo \"arg=$http_proxy $HTTPS_PROXY\") > /build-env\n")  # fmt: skip
    async with await provider.create(spec(env)) as sb:
        seen = (await sb.exec("cat /build-env", timeout=10)).stdout
    assert "arg=" in seen
    assert "proxy-pass" not in seen and "sk-host" not in seen, seen


async def test_failed_build_is_task_invalid_with_the_log(
    provider: LocalProvider, tmp_path: Path
) -> None:
    env = make_env(tmp_path, "FROM debian:bookworm-slim\nRUN echo marker-$((6*7)) && false\n")
    provider.log_dir = tmp_path / "job"
    for _ in range(2):  # the second trial fails at once: the failure is the task's
        with pytest.raises(TaskInvalid) as err:
            await provider.create(spec(env))
        assert "marker-42" in str(err.value)
    assert provider.images.store.builds_run == 1
    (log,) = (tmp_path / "job" / "builds").iterdir()
    assert "marker-42" in log.read_text()


async def test_a_context_linking_out_of_the_task_is_refused_before_any_build(
    provider: LocalProvider, tmp_path: Path
) -> None:
    """Attack: environment/ holds links to a host secret (absolute, and a relative climb);
    each is named before the builder sees the context, and nothing is built."""
    secret = tmp_path / "shadow"
    secret.write_text("root:host-secret-4b1d9e:19000::::::\n")
    env = make_env(tmp_path / "task", "FROM debian:bookworm-slim\nCOPY shadow up /\n")
    (env / "shadow").symlink_to(secret)
    (env / "up").symlink_to("../../shadow")
    with pytest.raises(TaskInvalid) as err:
        await provider.create(spec(env))
    said = err.value.message
    assert f"{env}/shadow: a link to an absolute path" in said
    assert f"{env}/up: a link out of the build context" in said
    assert "host-secret" not in said and provider.images.store.builds_run == 0


async def test_no_image_tool_is_an_error_never_the_host(
    buildah: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # buildah cannot be found
    p = LocalProvider(image_tool="buildah")
    try:
        with pytest.raises(ResourcesUnavailable) as err:
            await p.create(spec(make_env(tmp_path)))
        assert "apt-get install -y buildah" in (err.value.hint or "")
        assert "--env docker" in (err.value.hint or "")
        assert not p._live
    finally:
        await p.aclose()


async def test_userland_param(buildah: None, env_dir: Path) -> None:
    with pytest.raises(ProviderUnavailable):
        LocalProvider(userland="sideways")
    host = LocalProvider(userland="host")
    image = LocalProvider(userland="image", image_tool="buildah")
    try:
        async with await host.create(spec(env_dir)) as sb:  # asked for explicitly
            assert (await sb.exec("command -v python3", timeout=10)).ok
            assert await sb.changed_system_paths() == []
        async with await image.create(spec()) as sb:  # no image: the base one
            r = await sb.exec("command -v python3 || cat /etc/debian_version", timeout=10)
            assert r.stdout.startswith("12.")
    finally:
        await host.aclose()
        await image.aclose()


@pytest.mark.docker
async def test_docker_tool_gives_the_same_tree(docker_engine: None, tmp_path: Path) -> None:
    env = make_env(tmp_path)
    p = LocalProvider(image_tool="docker")
    try:
        async with await p.create(spec(env)) as sb:
            r = await sb.exec(
                "only-in-image; test -e /etc/debian_version || echo whiteout-kept; echo $GREETING",
                timeout=10,
            )
            assert r.stdout == "tool-ran\nwhiteout-kept\nhello from the image\n"
            assert isinstance(sb, LocalSandbox) and sb.image is not None
            assert sb.image.rootfs.entry.tool == "docker"
    finally:
        await p.aclose()


@pytest.mark.docker
async def test_a_prebuilt_image_only_docker_has_is_found_there(
    buildah: None, docker_engine: None
) -> None:
    """docker_image names an image Buildah's storage lacks (setup-docker.sh tags
    crucible-base:bookworm on the engine only): the next tool in line has it."""
    p = LocalProvider()
    try:
        async with await p.create(spec(image="crucible-base:bookworm")) as sb:
            assert isinstance(sb, LocalSandbox) and sb.image is not None
            assert sb.image.rootfs.entry.tool == "docker"
            assert (await sb.exec("cat /etc/debian_version", timeout=10)).stdout.startswith("12.")
        with pytest.raises(ResourcesUnavailable, match="buildah or docker"):  # no registry here
            await p.create(spec(image=f"crucible-absent:{secrets.token_hex(4)}"))
    finally:
        await p.aclose()


async def test_unpacked_tree_goes_to_the_sandbox_uid_when_it_is_not_ours(
    buildah: None, tmp_path: Path
) -> None:
    """When a sandbox's root maps to an unprivileged host uid, only that uid is mapped
    inside: every file of the image it runs on must be that uid's, in an entry of its own."""
    store = ImageStore(RootfsCache(tmp_path, owner=54321), "buildah")
    try:
        rootfs = await store.resolve(SandboxSpec(image="debian:bookworm-slim"))
    finally:
        store.close()
    assert all(layer.name.endswith("-u54321") for layer in rootfs.layers)
    owners = {
        os.lstat(os.path.join(d, n)).st_uid
        for layer in rootfs.layers
        for d, ds, fs in os.walk(layer)
        for n in ds + fs
    }
    assert owners == {54321} and {layer.stat().st_uid for layer in rootfs.layers} == {54321}


def test_gc_removes_only_entries_no_job_holds(tmp_path: Path) -> None:
    cache = RootfsCache(tmp_path)
    for image_id in ("a" * 64, "b" * 64):
        d = cache.entry_dir(image_id)
        (d / "rootfs").mkdir(parents=True)
        entry = RootfsEntry(
            image_id=image_id, tool="t", source="s", config=ImageConfig(), created_at="x"
        )
        (d / "image.json").write_text(entry.model_dump_json())
        cache.set_env_image(image_id, image_id)
    held = cache.hold("a" * 64)
    assert held is not None
    try:
        assert cache.gc() == 1
        assert cache.get("a" * 64) is not None and cache.get("b" * 64) is None
        assert cache.env_image("a" * 64) == "a" * 64 and cache.env_image("b" * 64) is None
    finally:
        os.close(held)
    assert cache.gc() == 1 and cache.get("a" * 64) is None


@pytest.mark.parametrize("link", ["etc", "etc/passwd"])
def test_the_users_lookup_never_follows_the_images_links(tmp_path: Path, link: str) -> None:
    """Attack: the image's /etc (or its passwd) links to a host file naming the USER; the
    lookup reads only the image's own files, so the user is unknown."""
    host = tmp_path / "host-etc"
    host.mkdir()
    (host / "passwd").write_text("app:x:4321:4321::/root:/bin/sh\n")
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    if link == "etc":
        (rootfs / "etc").rmdir()
        (rootfs / "etc").symlink_to(host)
    else:
        (rootfs / "etc" / "passwd").symlink_to(host / "passwd")
    with pytest.raises(TaskInvalid, match="no user 'app'"):
        resolve_user(rootfs, "app")
