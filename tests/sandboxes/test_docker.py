"""The docker provider against a real engine (skipped locally without one, never in CI)."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import BASE_IMAGE
from tests.helpers.wait import await_until

from crucible.errors import ProviderUnavailable, ResourcesUnavailable, SandboxFailed, TaskInvalid
from crucible.sandboxes.base import Sandbox
from crucible.sandboxes.docker.build import env_tag
from crucible.sandboxes.docker.provider import DockerProvider

docker_only = pytest.mark.docker


async def cmdlines(sb: Sandbox) -> list[str]:
    """Every process in the sandbox, as its command line."""
    res = await sb.exec(
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done"
    )
    assert res.exit_code == 0, res
    return [line.strip() for line in res.stdout.splitlines() if line.strip()]


async def _running(sb: Sandbox, command: str) -> bool:
    return any(c == command for c in await cmdlines(sb))


# -- preflight: no engine needed ------------------------------------------------


async def test_preflight_says_plainly_when_no_engine_answers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    provider = DockerProvider()
    try:
        with pytest.raises(ProviderUnavailable) as info:
            await provider.preflight()
    finally:
        await provider.aclose()
    assert "no Docker engine answers" in info.value.message
    assert str(tmp_path) in info.value.message  # says where it looked
    assert info.value.hint is not None
    assert "DOCKER_HOST" in info.value.hint and "setup-docker.sh" in info.value.hint


async def test_preflight_names_the_extra_when_the_sdk_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)  # makes `import docker` fail
    provider = DockerProvider()
    try:
        with pytest.raises(ProviderUnavailable) as info:
            await provider.preflight()
    finally:
        await provider.aclose()
    assert info.value.hint == "pip install 'crucible[docker]'"


# -- exec -----------------------------------------------------------------------


@docker_only
async def test_exec_streams_exit_codes_env_cwd_and_stdin(
    docker_provider: DockerProvider,
    docker_spec: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "host-secret-value")
    spec = docker_spec(workdir="/work/dir", env={"TASK_VAR": "from-spec"})
    async with await docker_provider.create(spec) as sb:
        res = await sb.exec("echo out; echo err >&2; exit 7")
        assert (res.exit_code, res.stdout, res.stderr, res.timed_out) == (
            7,
            "out\n",
            "err\n",
            False,
        )

        res = await sb.exec(["sh", "-c", 'pwd; echo "$TASK_VAR $EXTRA"'], env={"EXTRA": "x"})
        assert res.stdout == "/work/dir\nfrom-spec x\n"
        assert (await sb.exec("pwd", cwd="/tmp")).stdout == "/tmp\n"

        env = (await sb.exec("env")).stdout
        assert "host-secret-value" not in env and "MODAL_TOKEN_SECRET" not in env
        host_only = tmp_path / "host-only.txt"
        host_only.write_text("host file")
        assert (await sb.exec(f"cat {host_only}")).exit_code != 0

        res = await sb.exec("cat; echo; wc -c", input="line one\nline two")
        assert res.stdout == "line one\nline two\n0\n"
        big = os.urandom(3 << 20)
        res = await sb.exec("sha256sum | cut -c1-64", input=big)
        import hashlib

        assert res.stdout.strip() == hashlib.sha256(big).hexdigest()
        # No input: stdin is at end of file, not a hang.
        assert (await sb.exec("cat", timeout=10)).ok

        res = await sb.exec("printf 'h\\303\\251llo \\342\\234\\223\\n'; printf '\\377\\376' >&2")
        assert res.stdout == "héllo ✓\n"
        assert res.stderr == "\ufffd\ufffd"

        res = await sb.exec("whoami", user="nobody")
        assert res.stdout == "nobody\n"


@docker_only
async def test_timeout_kills_the_whole_process_tree(
    docker_provider: DockerProvider, docker_spec: Any
) -> None:
    async with await docker_provider.create(docker_spec()) as sb:
        res = await sb.exec(
            "sleep 301 & (sleep 302 &) ; setsid sleep 303 & echo started; sleep 304",
            timeout=1.5,
        )
        assert res.timed_out and not res.ok
        assert res.stdout == "started\n"
        left = [c for c in await cmdlines(sb) if "sleep 30" in c]
        assert left == []
        # The sandbox itself is unharmed.
        assert (await sb.exec("echo ok")).stdout == "ok\n"


@docker_only
async def test_a_cancelled_exec_leaves_nothing_running(
    docker_provider: DockerProvider, docker_spec: Any
) -> None:
    async with await docker_provider.create(docker_spec()) as sb:
        task = asyncio.create_task(sb.exec("sleep 901 & sleep 902"))
        await await_until(lambda: _running(sb, "sleep 902"), "the command to run")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not any("sleep 90" in c for c in await cmdlines(sb))


@docker_only
async def test_output_over_the_cap_is_cut_and_flagged(
    docker_provider: DockerProvider, docker_spec: Any
) -> None:
    async with await docker_provider.create(docker_spec()) as sb:
        res = await sb.exec(
            "head -c 3000000 /dev/zero | tr '\\0' a; echo tail >&2", output_cap=1000
        )
        assert res.exit_code == 0 and res.truncated
        assert res.stdout == "a" * 1000
        assert res.stderr == "tail\n"
        res = await sb.exec("echo small", output_cap=1000)
        assert not res.truncated


@docker_only
async def test_background_processes_survive_execs_until_kill_all(
    docker_provider: DockerProvider, docker_spec: Any
) -> None:
    async with await docker_provider.create(docker_spec()) as sb:
        await sb.exec("nohup sleep 501 >/dev/null 2>&1 & setsid sleep 502 >/dev/null 2>&1 &")
        procs = await cmdlines(sb)
        assert any("sleep 501" in c for c in procs) and any("sleep 502" in c for c in procs)
        await sb.kill_all()
        procs = await cmdlines(sb)
        assert not any("sleep 50" in c for c in procs)
        assert any("docker-init" in c for c in procs)  # pid 1 and its keeper live on
        assert (await sb.exec("echo alive")).stdout == "alive\n"


@docker_only
async def test_memory_hog_is_killed_with_a_clear_error(
    docker_provider: DockerProvider, docker_spec: Any
) -> None:
    async with await docker_provider.create(docker_spec(memory_mb=128)) as sb:
        res = await sb.exec("x=a; while :; do x=$x$x; done", timeout=60)
        assert res.exit_code == 137 and not res.timed_out
        assert "out of memory" in res.stderr and "128 MB" in res.stderr
        assert (await sb.exec("echo alive")).ok


@docker_only
async def test_fork_bomb_is_bounded_and_cleared(
    docker_provider: DockerProvider, docker_spec: Any
) -> None:
    async with await docker_provider.create(docker_spec(pids_limit=64)) as sb:
        res = await sb.exec("while :; do sleep 600 & done 2>/dev/null; sleep 600", timeout=3)
        assert not res.ok
        await sb.kill_all()
        assert not any("sleep 600" in c for c in await cmdlines(sb))


# -- the container ------------------------------------------------------------


@docker_only
async def test_container_has_labels_limits_and_no_network(
    docker_provider: DockerProvider, docker_spec: Any, docker_job_id: str
) -> None:
    spec = docker_spec(cpus=1.5, memory_mb=300, pids_limit=99, env={"A": "1"})
    api = await docker_provider.api()
    async with await docker_provider.create(spec) as sb:
        info = api.inspect_container(sb.id)
        labels = info["Config"]["Labels"]
        assert labels["crucible.job"] == docker_job_id
        assert labels["crucible.trial"] == spec.trial_id
        assert labels["crucible.task"] == "docker-test"
        hc = info["HostConfig"]
        assert hc["NanoCpus"] == 1_500_000_000
        assert hc["Memory"] == hc["MemorySwap"] == 300 << 20
        assert hc["PidsLimit"] == 99
        assert hc["NetworkMode"] == "none"
        assert hc["Init"] is True
        assert "no-new-privileges" in hc["SecurityOpt"]
        assert "NET_RAW" in hc["CapDrop"]
        env_names = {e.split("=", 1)[0] for e in info["Config"]["Env"]}
        assert env_names == {"A", "PATH"}  # spec.env and the image's own PATH only
        ifaces = (await sb.exec("ls /sys/class/net")).stdout.split()
        assert ifaces == ["lo"]
        res = await sb.exec("ls -ld /logs/agent /logs/verifier /logs/artifacts")
        assert res.exit_code == 0 and res.stdout.count("drwxrwxrwx") == 3

    async with await docker_provider.create(docker_spec(network="public")) as sb:
        info = api.inspect_container(sb.id)
        # As root on a local engine it starts on "none" and joins the bridge once the
        # host's addresses are blocked (hostblock.join_late); NetworkMode keeps "none".
        assert list(info["NetworkSettings"]["Networks"]) == ["bridge"]
        assert "eth0" in (await sb.exec("ls /sys/class/net")).stdout


@docker_only
async def test_disk_size_is_asked_for_only_where_the_engine_can_enforce_it(
    docker_provider: DockerProvider, docker_spec: Any
) -> None:
    api = await docker_provider.api()
    info = api.info()
    backing = dict(info.get("DriverStatus") or []).get("Backing Filesystem", "")
    if info["Driver"] == "overlay2" and backing != "xfs":
        assert not docker_provider._storage_supported()
    # Told to try anyway, an engine that refuses the quota still gives a sandbox.
    docker_provider._storage_ok = True
    async with await docker_provider.create(docker_spec(storage_mb=512)) as sb:
        opts = api.inspect_container(sb.id)["HostConfig"].get("StorageOpt") or {}
        if docker_provider._storage_ok:
            assert opts == {"size": "512M"}
        else:
            assert opts == {}
        assert (await sb.exec("echo ok")).stdout == "ok\n"


@docker_only
async def test_requests_the_engine_cannot_meet_are_resources_unavailable(
    docker_provider: DockerProvider, docker_spec: Any
) -> None:
    with pytest.raises(ResourcesUnavailable):
        await docker_provider.create(
            docker_spec(network="allowlist", allowed_hosts=["example.org"])
        )
    if docker_provider.capabilities().gpus == 0:
        with pytest.raises(ResourcesUnavailable, match="GPU"):
            await docker_provider.create(docker_spec(gpus=1))


@docker_only
async def test_a_container_that_died_is_sandbox_failed(
    docker_provider: DockerProvider, docker_spec: Any
) -> None:
    sb = await docker_provider.create(docker_spec())
    api = await docker_provider.api()
    api.kill(sb.id)
    with pytest.raises(SandboxFailed):
        await sb.exec("echo hi")
    await sb.close()
    await sb.close()  # idempotent, and quiet for a dead sandbox

    # Dying while a command runs is the sandbox's failure too, not the command's.
    sb = await docker_provider.create(docker_spec())
    running = asyncio.create_task(sb.exec("sleep 600"))
    await await_until(lambda: _running(sb, "sleep 600"), "the command to run")
    api.kill(sb.id)
    with pytest.raises(SandboxFailed):
        await running
    await sb.close()


# -- files ----------------------------------------------------------------------


@docker_only
async def test_files_round_trip_byte_for_byte(
    docker_provider: DockerProvider, docker_spec: Any, tmp_path: Path
) -> None:
    async with await docker_provider.create(docker_spec()) as sb:
        big = os.urandom(21 << 20)
        await sb.write_file("/data/deep/big.bin", big)
        assert await sb.read_file("/data/deep/big.bin") == big
        await sb.write_file("rel.txt", "in workdir", mode=0o600)
        assert (await sb.exec("stat -c %a /app/rel.txt")).stdout == "600\n"
        assert await sb.read_file("/app/rel.txt") == b"in workdir"
        await sb.exec("ln -s /data/deep/big.bin /data/link")
        assert await sb.read_file("/data/link") == big
        with pytest.raises(FileNotFoundError):
            await sb.read_file("/no/such/file")
        assert (await sb.exec("stat -c %a /tmp")).stdout == "1777\n"

        src = tmp_path / "src"
        (src / "sub").mkdir(parents=True)
        (src / "sub" / "run.sh").write_text("#!/bin/sh\necho ran\n")
        (src / "sub" / "run.sh").chmod(0o755)
        (src / "big.bin").write_bytes(big)
        (src / "link").symlink_to("sub/run.sh")
        await sb.upload_dir(src, "/tmp")  # into an existing dir: its mode stays
        assert (await sb.exec("stat -c %a /tmp")).stdout == "1777\n"
        await sb.upload_dir(src, "/up/dir")
        assert (await sb.exec("/up/dir/link")).stdout == "ran\n"

        await sb.exec("ln -s /etc/passwd /up/dir/escape; ln -s ../../../../etc /up/dir/escape2")
        dst = tmp_path / "dst"
        await sb.download_dir("/up/dir", dst)
        assert (dst / "big.bin").read_bytes() == big
        assert (dst / "sub" / "run.sh").read_text() == "#!/bin/sh\necho ran\n"
        assert os.access(dst / "sub" / "run.sh", os.X_OK)
        for link in ("link", "escape", "escape2"):  # links are never made on the host
            assert not os.path.lexists(dst / link)  # noqa: ASYNC240
        with pytest.raises(FileNotFoundError):
            await sb.download_dir("/no/such/dir", tmp_path / "none")


# -- images -------------------------------------------------------------------


def _env_dir(root: Path, dockerfile: str) -> Path:
    env = root / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text(dockerfile)
    return env


async def prune_failed_build(provider: DockerProvider, token: str) -> None:
    """A failed or cancelled build leaves its steps behind as untagged images; drop ours."""
    api = await provider.api()
    await asyncio.sleep(1)  # timing-ok: best effort, a cancelled build commits its last step late
    for image in api.images(filters={"dangling": True}, quiet=True):
        info = api.inspect_image(image)
        if token in str(info.get("ContainerConfig")) + str(info["Config"].get("Labels")):
            api.remove_image(image, force=True)


@docker_only
async def test_image_is_built_once_per_digest_even_under_concurrency(
    docker_provider: DockerProvider, docker_spec: Any, tmp_path: Path
) -> None:
    token = uuid.uuid4().hex
    env = _env_dir(tmp_path, f"FROM {BASE_IMAGE}\nRUN echo {token} > /marker\n")
    digest = f"sha256:{token}{token}"
    api = await docker_provider.api()
    try:
        specs = [docker_spec(dockerfile_dir=env, environment_digest=digest) for _ in range(4)]
        sandboxes = await asyncio.gather(*(docker_provider.create(s) for s in specs))
        try:
            assert docker_provider.images.builds_run == 1
            for sb in sandboxes:
                assert (await sb.read_file("/marker")).decode().strip() == token
        finally:
            await asyncio.gather(*(sb.close() for sb in sandboxes))
        image = api.inspect_image(env_tag(digest))
        assert image["Config"]["Labels"]["crucible.environment_digest"] == digest

        # A later job finds the image by its digest and builds nothing.
        again = DockerProvider()
        try:
            await again.prepare([specs[0]])
            async with await again.create(specs[0]) as sb:
                assert (await sb.exec("cat /marker")).stdout.strip() == token
            assert again.images.builds_run == 0
        finally:
            await again.aclose()
    finally:
        api.remove_image(env_tag(digest), force=True)


@docker_only
async def test_an_image_entrypoint_runs_as_in_harbor_and_its_user_is_kept(
    docker_provider: DockerProvider, docker_spec: Any, tmp_path: Path
) -> None:
    """The image's ENTRYPOINT runs (its set-up happens) with the keeper as its arguments,
    as Harbor's docker environment does; the image's CMD is replaced, its USER kept."""
    token = uuid.uuid4().hex
    entry = f'echo "$0 {token}" > /tmp/entrypoint-ran; exec "$@"'
    env = _env_dir(
        tmp_path,
        f"FROM {BASE_IMAGE}\nLABEL t={token}\nUSER nobody\n"
        f'ENTRYPOINT ["/bin/sh", "-c", "{entry.replace(chr(34), chr(92) + chr(34))}", "entry"]\n'
        'CMD ["--nope"]\n',
    )
    spec = docker_spec(dockerfile_dir=env, environment_digest=token, workdir="/tmp")
    api = await docker_provider.api()
    try:
        async with await docker_provider.create(spec) as sb:
            # The entrypoint runs beside the first exec: wait on its file, not a clock.
            res = await sb.exec(
                "for i in $(seq 200); do [ -s /tmp/entrypoint-ran ] && break; sleep 0.05; done;"  # timing-ok: bounded poll in the sandbox
                " cat /tmp/entrypoint-ran"
            )
            assert res.stdout == f"entry {token}\n", res
            assert (await sb.exec("whoami")).stdout == "nobody\n"
            await sb.exec("echo agent > /logs/agent/out.txt")  # /logs is writable for it
            assert await sb.read_file("/logs/agent/out.txt") == b"agent\n"
            await sb.exec("nohup sleep 700 >/dev/null 2>&1 &")
            await sb.kill_all()  # runs as root whatever the image's user
            assert not any("sleep 700" in c for c in await cmdlines(sb))
            # The keeper the entrypoint exec'd into survived the sweep: the sandbox lives on.
            assert (await sb.exec("echo alive")).stdout == "alive\n"
            assert not any("--nope" in c for c in await cmdlines(sb))
    finally:
        api.remove_image(env_tag(token), force=True)


@docker_only
async def test_a_build_that_fails_is_task_invalid_with_the_log_tail(
    docker_provider: DockerProvider, docker_spec: Any, tmp_path: Path
) -> None:
    token = uuid.uuid4().hex
    env = _env_dir(tmp_path, f"FROM {BASE_IMAGE}\nRUN echo boom-{token} && exit 3\n")
    spec = docker_spec(dockerfile_dir=env, environment_digest=token)
    with pytest.raises(TaskInvalid) as info:
        try:
            await docker_provider.create(spec)
        finally:
            await prune_failed_build(docker_provider, token)
    assert "its image cannot be built" in info.value.message
    assert f"boom-{token}" in info.value.message
    with pytest.raises(TaskInvalid):  # remembered: not built again
        await docker_provider.create(spec)
    assert docker_provider.images.builds_run == 1

    missing = docker_spec(dockerfile_dir=tmp_path / "nothing", environment_digest=token + "x")
    with pytest.raises(TaskInvalid, match="Dockerfile"):
        await docker_provider.create(missing)


@docker_only
async def test_a_build_over_its_time_limit_is_task_invalid(
    docker_provider: DockerProvider, docker_spec: Any, tmp_path: Path
) -> None:
    token = uuid.uuid4().hex
    env = _env_dir(tmp_path, f"FROM {BASE_IMAGE}\nRUN sleep 60 # {token}\n")
    spec = docker_spec(dockerfile_dir=env, environment_digest=token, build_timeout_sec=2)
    with pytest.raises(TaskInvalid, match="build_timeout_sec"):  # not the RUN's 60 s
        try:
            await docker_provider.create(spec)
        finally:
            await prune_failed_build(docker_provider, token)


# -- cleanup and overhead -------------------------------------------------------


@docker_only
async def test_cleanup_removes_only_the_named_jobs_containers(
    docker_provider: DockerProvider, docker_spec: Any, docker_job_id: str
) -> None:
    other_job = f"{docker_job_id}-other"
    mine = [await docker_provider.create(docker_spec()) for _ in range(2)]
    theirs = await docker_provider.create(docker_spec(job_id=other_job))
    try:
        assert await docker_provider.cleanup(docker_job_id) == 2
        for sb in mine:
            with pytest.raises(SandboxFailed):
                await sb.exec("true")
        assert (await theirs.exec("echo still")).stdout == "still\n"
        assert await docker_provider.cleanup(docker_job_id) == 0
    finally:
        assert await docker_provider.cleanup(other_job) == 1
        for sb in [*mine, theirs]:
            await sb.close()
