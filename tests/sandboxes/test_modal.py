"""The modal provider, driven through the SDK stand-in (tests/sandboxes/modal_standin.py):
real execs in bubblewrap, files, the create path with its rate limit, retries,
credentials and cancellation."""

from __future__ import annotations

import asyncio
import bisect
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.wait import await_until
from tests.sandboxes.modal_fixtures import TOKEN, make, spec
from tests.sandboxes.modal_standin import World, exception, install

from crucible.errors import AuthError, ResourcesUnavailable, SandboxFailed, TaskInvalid
from crucible.sandboxes.modal import provider as modal_provider
from crucible.sandboxes.modal.provider import (
    ModalProvider,
    ModalSandbox,
    gpu_request,
    network_kwargs,
)
from crucible.sandboxes.registry import get_provider

# --- credentials and preflight ---------------------------------------------


async def test_missing_credentials_fail_preflight_and_touch_nothing(
    clean_env: Path, tmp_path: Path
) -> None:
    mod, world = install(tmp_path / "cloud")
    provider = ModalProvider(sdk=mod)
    with pytest.raises(AuthError, match="no Modal credentials") as info:
        await provider.preflight()
    assert "modal token new" in (info.value.hint or "")
    assert world.calls == []  # no client, no App.lookup, no Sandbox.create
    with pytest.raises(AuthError):
        await provider.create(spec())
    assert world.called("App.lookup") == [] and world.called("Sandbox.create") == []


async def test_refused_credentials_fail_preflight_at_the_first_rpc(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    mod, world = install(tmp_path / "cloud", token=TOKEN)
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-wrong")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-wrong")
    with pytest.raises(AuthError, match="refused") as info:
        await ModalProvider(sdk=mod).preflight()
    assert "modal token" in (info.value.hint or "")
    assert world.called("Client.from_credentials")  # accepted: it sends nothing
    # Modal checks the token at the first RPC (the app lookup), not at client creation.
    assert len(world.called("App.lookup")) == 1 and world.called("Sandbox.create") == []


async def test_private_config_param_is_used(clean_env: Path, tmp_path: Path) -> None:
    mod, world = install(tmp_path / "cloud", token=TOKEN)
    cfg = tmp_path / "modal.toml"
    cfg.write_text(f'token_id = "{TOKEN[0]}"\ntoken_secret = "{TOKEN[1]}"\n')
    cfg.chmod(0o600)
    await ModalProvider(sdk=mod, config=str(cfg)).preflight()
    assert world.called("Client.from_credentials") == [{"token_id": TOKEN[0]}]


def test_params_are_validated() -> None:
    with pytest.raises(ValueError, match="unknown modal env-param"):
        ModalProvider(colour="red")
    with pytest.raises(ValueError, match="create_rate: not a number"):
        ModalProvider(create_rate="fast")
    with pytest.raises(ValueError, match="max_starting"):
        ModalProvider(max_starting="0")
    with pytest.raises(ValueError, match="env"):
        ModalProvider(env="novalue")
    p = ModalProvider(
        app_name="evals", env='{"A": "1"}', region="us-east,us-west", cpu="2", memory="4096",
        gpu="a100:2", create_rate="12.5", max_starting="7", timeout="600", idle_timeout="60",
    )  # fmt: skip
    assert p.params.env == {"A": "1"} and p.params.region == ["us-east", "us-west"]
    assert (p.params.cpu, p.params.memory, p.params.gpu) == (2.0, 4096, "A100:2")
    assert p.gate.limiter.rate == 12.5 and p.gate.max_starting == 7
    assert ModalProvider(env="A=1;B=x=y").params.env == {"A": "1", "B": "x=y"}
    assert isinstance(get_provider("modal", {"app_name": "x"}), ModalProvider)


# --- mapping a spec onto Sandbox.create -----------------------------------


def test_gpu_and_network_mapping() -> None:
    assert gpu_request(spec(), None) is None
    assert gpu_request(spec(gpus=1, gpu_types=["h100"]), None) == "H100:1"
    assert gpu_request(spec(gpus=2), None) == "ANY:2"
    assert gpu_request(spec(gpus=2, gpu_types=["A100-80GB", "H100"]), None) == "A100-80GB:2"
    assert gpu_request(spec(gpus=1), "L4") == "L4"
    with pytest.raises(ResourcesUnavailable):
        gpu_request(spec(gpus=9), None)
    assert network_kwargs(spec(network="none")) == {"block_network": True}
    assert network_kwargs(spec(network="public")) == {}
    assert network_kwargs(
        spec(network="allowlist", allowed_hosts=["example.org", "10.1.2.3", "*.example.com"])
    ) == {
        "outbound_cidr_allowlist": ["10.1.2.3/32"],
        "outbound_domain_allowlist": ["example.org", "*.example.com"],
    }
    assert network_kwargs(spec(network="allowlist")) == {"block_network": True}


async def test_create_passes_resources_tags_env_and_never_credentials(
    standin: tuple[Any, World],
) -> None:
    _, world = standin
    provider = await make(standin, env="EXTRA=1", region="us-east", idle_timeout="120")
    s = spec(gpus=1, gpu_types=["H100"], cpus=4, memory_mb=8192,
             env={"FOO": "bar", "MODAL_TOKEN_SECRET": TOKEN[1], "LEAK": TOKEN[1]})  # fmt: skip
    sb = await provider.create(s)
    try:
        (kw,) = world.called("Sandbox.create")
        # cpus are vCPUs; Modal counts physical cores (2 vCPUs each); both are capped.
        assert kw["gpu"] == "H100:1" and kw["cpu"] == (2.0, 2.0) and kw["memory"] == (8192, 8192)
        assert (
            kw["block_network"] is True and kw["region"] == "us-east" and kw["idle_timeout"] == 120
        )
        assert kw["tags"]["crucible.job"] == "job-1" and kw["tags"]["crucible.trial"] == "t-1"
        assert kw["env"] == {"FOO": "bar", "EXTRA": "1"}
        assert kw["workdir"] == "/app" and kw["client"] is not None
        res = await sb.exec("env")
        assert TOKEN[1] not in res.stdout and TOKEN[0] not in res.stdout
        assert "FOO=bar" in res.stdout
        assert "LEAK" not in (await sb.exec("env", env={"LEAK": TOKEN[1], "OK": "1"})).stdout
    finally:
        await sb.close()


async def test_image_built_once_per_key_and_failures_stay_with_their_tasks(
    standin: tuple[Any, World], tmp_path: Path
) -> None:
    _, world = standin
    env_ok = tmp_path / "ok"
    env_bad = tmp_path / "bad-env"
    for d in (env_ok, env_bad):
        d.mkdir()
        (d / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    world.failing_images.add("bad-env")
    provider = await make(standin)
    specs = [
        spec(image=None, dockerfile_dir=env_ok, environment_digest="d-ok", trial_id=f"ok-{i}")
        for i in range(5)
    ]
    specs += [spec(image="debian:12", trial_id=f"reg-{i}") for i in range(3)]
    bad = spec(image=None, dockerfile_dir=env_bad, environment_digest="d-bad", trial_id="bad")
    await provider.prepare([*specs, bad])
    assert sorted(world.builds) == sorted([f"dockerfile:{env_ok}/Dockerfile", "registry:debian:12"])
    sandboxes = await asyncio.gather(*(provider.create(s) for s in specs))
    assert len(world.called("Image.build")) == 3  # ok, registry, and the one failed attempt
    with pytest.raises(TaskInvalid, match="image build failed"):
        await provider.create(bad)
    assert len(world.called("Image.build")) == 3  # the failure is remembered, not retried per trial
    (kw,) = [c for c in world.called("Sandbox.create") if c["tags"]["crucible.trial"] == "ok-0"]
    assert kw["image"].ref == f"dockerfile:{env_ok}/Dockerfile"
    await asyncio.gather(*(sb.close() for sb in sandboxes))


async def test_a_context_linking_a_host_file_is_never_handed_to_modal(
    standin: tuple[Any, World], tmp_path: Path
) -> None:
    """Attack: Modal's client uploads a Dockerfile's COPY sources from the host; a context
    entry linking a host secret is refused before the SDK is asked for any image."""
    _, world = standin
    (tmp_path / "id_rsa").write_text("host-secret-4b1d9e\n")
    env = tmp_path / "env"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nCOPY key /root/key\n")
    (env / "key").symlink_to(tmp_path / "id_rsa")
    provider = await make(standin)
    with pytest.raises(TaskInvalid, match=r"env/key: a link to an absolute path"):
        await provider.create(spec(image=None, dockerfile_dir=env, environment_digest="d-x"))
    assert world.called("Image.from_dockerfile") == [] and world.builds == []


# --- exec and files ---------------------------------------------------------


async def test_exec_semantics(standin: tuple[Any, World]) -> None:
    provider = await make(standin)
    async with await provider.create(spec(env={"TASKVAR": "t"})) as sb:
        res = await sb.exec(
            "echo out; echo err >&2; pwd; echo $TASKVAR $MINE; exit 3", env={"MINE": "m"}
        )
        assert (res.exit_code, res.stdout, res.stderr) == (3, "out\n/app\nt m\n", "err\n")
        assert not res.ok and not res.timed_out
        assert (await sb.exec(["cat"], input="über\x00bytes")).stdout == "über\x00bytes"
        assert (await sb.exec(["pwd"], cwd="/tmp")).stdout == "/tmp\n"
        slow = await sb.exec("sleep 30; echo never", timeout=1)
        assert slow.timed_out and slow.exit_code == -1 and slow.stdout == ""
        big = await sb.exec("head -c 100000 /dev/zero | tr '\\0' x", output_cap=1000)
        assert big.truncated and len(big.stdout) == 1000 and big.exit_code == 0
        assert (await sb.exec("cat", timeout=5)).stdout == ""  # stdin is closed, not left open


async def test_files_round_trip(standin: tuple[Any, World], tmp_path: Path) -> None:
    provider = await make(standin)
    src = tmp_path / "src"
    (src / "nested").mkdir(parents=True)
    payload = bytes(range(256)) * 4096
    (src / "nested" / "blob.bin").write_bytes(payload)
    (src / "ünï.txt").write_text("ok")
    async with await provider.create(spec()) as sb:
        await sb.write_file("notes/a.sh", "#!/bin/sh\necho hi\n", mode=0o755)
        assert (await sb.exec("./notes/a.sh")).stdout == "hi\n"
        assert await sb.read_file("/app/notes/a.sh") == b"#!/bin/sh\necho hi\n"
        with pytest.raises(FileNotFoundError):
            await sb.read_file("/app/absent")
        await sb.upload_dir(src, "/data")
        assert (await sb.exec("sha256sum /data/nested/blob.bin | cut -c1-8")).exit_code == 0
        await sb.download_dir("/data", tmp_path / "back")
        assert (tmp_path / "back" / "nested" / "blob.bin").read_bytes() == payload
        assert (tmp_path / "back" / "ünï.txt").read_text() == "ok"
        with pytest.raises(FileNotFoundError):
            await sb.download_dir("/nowhere", tmp_path / "x")
        await sb.kill_all()
        assert (await sb.exec("echo alive")).stdout == "alive\n"


async def test_background_process_survives_execs_until_kill_all(standin: tuple[Any, World]) -> None:
    provider = await make(standin)
    async with await provider.create(spec()) as sb:
        started = await sb.exec(
            "setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo $! > /tmp/bg.pid"
        )
        assert started.ok
        assert (await sb.exec("kill -0 $(cat /tmp/bg.pid) && echo running")).stdout == "running\n"
        await sb.kill_all()
        # A killed process is a zombie until pid 1 reaps it: allow it a moment.
        gone = (
            "for _ in $(seq 40); do kill -0 $(cat /tmp/bg.pid) 2>/dev/null"
            " || { echo gone; exit; }; sleep 0.05; done"  # timing-ok: a bounded poll in the sandbox
        )
        assert (await sb.exec(gone)).stdout == "gone\n"


# --- lifecycle: terminate on every path out --------------------------------


async def test_close_terminates_and_is_idempotent(standin: tuple[Any, World]) -> None:
    _, world = standin
    provider = await make(standin)
    sb = await provider.create(spec())
    assert len(world.live()) == 1
    await sb.close()
    await sb.close()
    assert world.live() == [] and len(world.called("Sandbox.terminate")) == 1
    with pytest.raises(SandboxFailed):
        await sb.exec("true")


async def test_cancelled_mid_exec_still_terminates(standin: tuple[Any, World]) -> None:
    _, world = standin
    provider = await make(standin)

    async def trial() -> None:
        async with await provider.create(spec()):
            await asyncio.sleep(30)

    task = asyncio.create_task(trial())
    await await_until(world.live, "a live sandbox")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert world.live() == []


async def test_cancelled_mid_create_terminates_the_late_sandbox(standin: tuple[Any, World]) -> None:
    _, world = standin
    world.create_latency = 0.3
    provider = await make(standin)
    task = asyncio.create_task(provider.create(spec()))
    await await_until(lambda: world.called("Sandbox.create"), "the create call")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await provider.aclose()  # waits for the late create and its terminate
    assert len(world.sandboxes) == 1 and world.live() == []


async def test_cancelled_while_queued_never_creates(standin: tuple[Any, World]) -> None:
    _, world = standin
    world.create_latency = 0.2
    provider = await make(standin, max_starting="1")
    first = asyncio.create_task(provider.create(spec(trial_id="first")))
    queued = asyncio.create_task(provider.create(spec(trial_id="queued")))
    # first is inside Sandbox.create; queued waits for the start slot
    await await_until(lambda: world.called("Sandbox.create"), "the first create call")
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    sb = await first
    await provider.aclose()
    assert [c["tags"]["crucible.trial"] for c in world.called("Sandbox.create")] == ["first"]
    await sb.close()


async def test_setup_failure_after_create_terminates(
    standin: tuple[Any, World], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, world = standin
    provider = await make(standin)

    async def broken(self: ModalSandbox, command: str, what: str) -> Any:
        raise SandboxFailed("setup broke")

    monkeypatch.setattr(ModalSandbox, "_check", broken)
    with pytest.raises(SandboxFailed, match="setup broke"):
        await provider.create(spec())
    assert len(world.sandboxes) == 1 and world.live() == []


# --- retries and scale controls ---------------------------------------------


async def test_rate_limit_errors_are_retried_with_backoff(
    standin: tuple[Any, World], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, world = standin
    world.create_fault = lambda n: (
        exception.ResourceExhaustedError("rate limited") if n < 2 else None
    )
    provider = await make(standin)
    monkeypatch.setattr(provider, "backoff", modal_provider.Backoff(attempts=4, base=0.01))
    sb = await provider.create(spec())
    assert provider.retried == 2 and len(world.called("Sandbox.create")) == 3
    await sb.close()


async def test_retries_give_up_as_sandbox_failed(
    standin: tuple[Any, World], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, world = standin
    world.create_fault = lambda n: exception.ResourceExhaustedError("no capacity")
    provider = await make(standin, create_attempts="3")
    monkeypatch.setattr(provider, "backoff", modal_provider.Backoff(attempts=3, base=0.01))
    with pytest.raises(SandboxFailed, match="gave up after 3 tries"):
        await provider.create(spec())
    assert len(world.called("Sandbox.create")) == 3 and world.live() == []


async def test_invalid_and_auth_errors_are_not_retried(standin: tuple[Any, World]) -> None:
    _, world = standin
    provider = await make(standin)
    with pytest.raises(ResourcesUnavailable, match="Invalid GPU"):
        await provider.create(spec(gpus=1, gpu_types=["H100:x"]))
    world.create_fault = lambda n: exception.AuthError("token revoked")
    with pytest.raises(AuthError, match="revoked"):
        await provider.create(spec())
    assert len(world.called("Sandbox.create")) == 2


def _max_in_window(times: list[float], window: float = 1.0) -> int:
    times = sorted(times)
    return max(bisect.bisect_left(times, t + window) - i for i, t in enumerate(times))


async def test_burst_never_above_the_create_rate(standin: tuple[Any, World]) -> None:
    """A correctness property: 400 concurrent creates at 200/s, never more than
    200 Sandbox.create calls in any 1 s window, and never more than max_starting at once."""
    _, world = standin
    world.exec_real = False
    world.create_latency = 0.02
    provider = await make(standin, create_rate="200", max_starting="16")
    sandboxes = await asyncio.gather(*(provider.create(spec(trial_id=f"t{i}")) for i in range(400)))
    assert len(world.create_times) == 400
    assert _max_in_window(world.create_times) <= 200
    assert provider.gate.peak_in_flight <= 16
    await asyncio.gather(*(sb.close() for sb in sandboxes))


async def test_cleanup_terminates_only_the_jobs_sandboxes(standin: tuple[Any, World]) -> None:
    _, world = standin
    provider = await make(standin)
    mine = [await provider.create(spec(job_id="job-a", trial_id=f"a{i}")) for i in range(3)]
    other = await provider.create(spec(job_id="job-b", trial_id="b0"))
    assert await provider.cleanup("job-a") == 3
    assert [sb.tags["crucible.job"] for sb in world.live()] == ["job-b"]
    assert world.called("Sandbox.list")[0]["app_id"] is not None  # scoped to the app, as 1.6 wants
    assert await provider.cleanup(None) == 1
    assert world.live() == []
    for sb in [*mine, other]:
        await sb.close()


async def test_every_declared_sdk_use_is_exercised(
    standin: tuple[Any, World], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table is not padded: a normal flow touches every SDK_USES entry."""
    seen: set[str] = set()
    original = modal_provider._Sdk._use

    def spy(key: str, kind: Any, nargs: int, kwargs: dict[str, Any]) -> Any:
        seen.add(key)
        return original(key, kind, nargs, kwargs)

    monkeypatch.setattr(modal_provider._Sdk, "_use", staticmethod(spy))
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    (env_dir / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    provider = await make(standin)
    await provider.prepare([spec(), spec(image=None, dockerfile_dir=env_dir)])
    sb = await provider.create(spec())
    await sb.exec(["cat"], input="x")
    await sb.write_file("/app/f", "x")
    await sb.read_file("/app/f")
    (tmp_path / "up").mkdir()
    await sb.upload_dir(tmp_path / "up", "/up")
    await sb.download_dir("/up", tmp_path / "down")
    assert sb.sandbox_id.startswith("sb-")
    assert await sb.ended_by_contents() is None  # running: poll says None
    named = await make(standin, named_image="team/eval-image")  # Image.from_name
    await (await named.create(spec())).close()
    await provider.cleanup("job-1")
    await sb.close()
    await provider.aclose()
    declared = {u.key for u in modal_provider.SDK_USES}
    assert declared - seen == set()
