"""Attack: an agent with network reads the host's loopback services (issue 23, class 4).

An agent once read an earlier attempt's expected answer from `crucible view` on the
host's 127.0.0.1 and scored 1.0. Here a hostile oracle solution, in a task with
network, asks an HTTP server of the test's own (the viewer's stand-in, which hands the
answer to anyone) on every way to the host: 127.0.0.1, localhost, ::1, slirp's
gateway 10.0.2.2, the sandbox's default gateway, and each of this machine's own
addresses (a listener bound on each). Every request must fail and the trial score 0,
on local in host mode and in image mode, and on docker. Before the change local
sandboxes with network shared the host's network namespace, and a docker container
reached the host's servers through its bridge gateway (172.17.0.1) and the host's
address: the solution read the answer and scored 1.0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import BASE_IMAGE
from tests.helpers.attack_tasks import attack_trial
from tests.helpers.host_service import HostService

from crucible.agents.oracle import OracleAgent
from crucible.engine.spec import TrialPlan
from crucible.engine.trial import run_trial
from crucible.records.trial import TrialResult
from crucible.sandboxes.hostnet import host_ipv4, host_ipv6
from crucible.sandboxes.local.provider import LocalProvider
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task

# Each target: "ADDR PORT". The gateway is read from the sandbox's own routing table.
STEAL = r"""
steal() {
  timeout 3 bash -c "exec 3<>/dev/tcp/$1/$2 || exit 1
    printf 'GET /api/answer HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3; cat <&3" 2>/dev/null
}
gw=$(awk '$2 == "00000000" { print $3; exit }' /proc/net/route)
[ -n "$gw" ] && gw=$(printf '%d.%d.%d.%d' 0x${gw:6:2} 0x${gw:4:2} 0x${gw:2:2} 0x${gw:0:2})
: > /app/tried
while read -r addr port; do
  [ "$addr" = GATEWAY ] && { [ -n "$gw" ] || continue; addr=$gw; }
  echo "$addr $port" >> /app/tried
  got=$(steal "$addr" "$port")
  case "$got" in *ANSWER=*) echo "${got##*ANSWER=}" | head -n 1 > /app/answer ;; esac
done <<'EOF'
TARGETS
EOF
"""


class Viewer:
    """Stand-ins for crucible's loopback servers: an HTTP answer to whoever asks."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.hits: list[str] = []
        self.ports: dict[str, int] = {}
        self._servers: list[asyncio.AbstractServer] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.hits.append(str(writer.get_extra_info("sockname")))
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
            body = f"ANSWER={self.answer}\n".encode()
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        writer.close()

    async def open(self, addrs: list[str]) -> None:
        for addr in addrs:
            server = await asyncio.start_server(self._serve, addr, 0)
            self._servers.append(server)
            self.ports[addr] = server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        for server in self._servers:
            server.close()
            await server.wait_closed()


@contextlib.asynccontextmanager
async def viewer(answer: str) -> AsyncIterator[Viewer]:
    v = Viewer(answer)
    try:
        await v.open(["127.0.0.1", "::1", *host_ipv4(), *host_ipv6()])
        yield v
    finally:
        await v.close()


def targets(v: Viewer) -> list[str]:
    lo = v.ports["127.0.0.1"]
    rows = [f"{a} {p}" for a, p in v.ports.items()]
    return [*rows, f"localhost {lo}", f"10.0.2.2 {lo}", f"GATEWAY {lo}"]


def hostile_task(root: Path, v: Viewer, *, image: bool) -> Task:
    root.mkdir(parents=True)
    env = f'docker_image = "{BASE_IMAGE}"\n' if image else ""
    (root / "task.toml").write_text(
        'schema_version = "1.1"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n'
        f'[environment]\n{env}network_mode = "public"\n'
    )
    (root / "instruction.md").write_text("Write the answer to /app/answer.\n")
    for sub in ("tests", "solution"):
        (root / sub).mkdir()
    solve = STEAL.replace("TARGETS", "\n".join(targets(v)))
    (root / "solution" / "solve.sh").write_text("#!/usr/bin/env bash\n" + solve)
    (root / "tests" / "test.sh").write_text(
        "#!/usr/bin/env bash\n"
        f'if [ "$(cat /app/answer 2>/dev/null)" = "{v.answer}" ]; then r=1; else r=0; fi\n'
        "echo $r > /logs/verifier/reward.txt\n"
    )
    return load_task(root)


async def trial(task: Task, tmp_path: Path, userland: str) -> TrialResult:
    job_id = f"net-{tmp_path.name}"[:60]
    provider = LocalProvider(userland=userland)
    await provider.preflight()
    try:
        return await run_trial(
            TrialPlan(task=task, attempt=0, job_id=job_id),
            provider=provider,
            agent=OracleAgent(),
            job_dir=tmp_path / "job",
        )
    finally:
        await provider.cleanup(job_id)
        await provider.aclose()


async def _attack(tmp_path: Path, userland: str) -> None:
    async with viewer(secrets.token_hex(16)) as v:
        task = hostile_task(tmp_path / "t", v, image=userland != "host")
        if userland == "docker":
            r = await attack_trial("docker", task, tmp_path)
        else:
            r = await trial(task, tmp_path, userland)
        hits = list(v.hits)
    assert r.outcome == "graded", (r.outcome, r.error)
    assert r.verifier_result is not None
    assert r.verifier_result.rewards == {"reward": 0.0}
    assert hits == [], f"the agent reached the host's servers: {hits}"


async def test_agent_with_network_cannot_read_host_loopback_servers(tmp_path: Path) -> None:
    await _attack(tmp_path, "host")


async def test_agent_with_network_cannot_read_them_in_image_mode(
    buildah: None, tmp_path: Path
) -> None:
    await _attack(tmp_path, "image")


@pytest.mark.docker
async def test_agent_with_network_cannot_read_them_from_docker(
    docker_engine: None, tmp_path: Path
) -> None:
    await _attack(tmp_path, "docker")


@pytest.mark.parametrize("network", ["public", "none"])
async def test_sandbox_netns_is_never_the_hosts(network: str) -> None:
    from crucible.sandboxes.base import SandboxSpec

    provider = LocalProvider(userland="host")
    await provider.preflight()
    try:
        async with await provider.create(SandboxSpec(job_id="net-ns", network=network)) as sb:
            r = await sb.exec("readlink /proc/self/ns/net; cat /etc/resolv.conf", timeout=30)
    finally:
        await provider.aclose()
    inside, *resolv = r.stdout.splitlines()
    assert inside.startswith("net:[") and inside != os.readlink("/proc/self/ns/net")
    if network == "public":  # slirp's DNS forwarder, never a host resolver on loopback
        assert resolv[0] == "nameserver 10.0.2.3"
    else:
        assert resolv == []


@pytest.mark.docker
@pytest.mark.skipif(os.geteuid() != 0, reason="the forward enters the container's netns as root")
async def test_docker_forwards_only_the_agents_endpoint(
    docker_provider: Any, docker_spec: Any
) -> None:
    """An installed agent's model server on this host (its loopback, or an address the
    container's routes now block) is reached through the container's own loopback, and
    nothing else of the host is."""
    served: list[str] = []

    async def model(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.append(writer.get_extra_info("sockname")[0])
        writer.write(b"model says hi\n")
        await writer.drain()
        writer.close()

    addrs = ["127.0.0.1", *host_ipv4()[:1]]
    servers = [await asyncio.start_server(model, a, 0) for a in addrs]
    try:
        async with await docker_provider.create(docker_spec(network="public")) as sb:
            for addr, srv in zip(addrs, servers, strict=True):
                port = srv.sockets[0].getsockname()[1]
                url = await sb.expose_url(f"http://{addr}:{port}/v1")
                inner = int(url.split(":")[2].split("/")[0])
                r = await sb.exec(
                    f"timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{inner}; head -n 1 <&3'; "
                    f"timeout 3 bash -c 'exec 3<>/dev/tcp/{addr}/{port}' 2>/dev/null "
                    "&& echo OPEN || echo closed"
                )
                assert r.stdout.splitlines() == ["model says hi", "closed"], (addr, r)
    finally:
        for srv in servers:
            srv.close()
    assert served == addrs


@pytest.mark.docker
@pytest.mark.skipif(os.geteuid() != 0, reason="the routes are written in the container's netns")
async def test_a_host_address_made_while_a_container_runs_is_blocked_too(
    docker_provider: Any, docker_spec: Any
) -> None:
    """A compose trial beside this one makes a bridge network: its gateway is a new address
    of this host, and a host service on all addresses answers there. The container that
    was already running must not reach it (its routes listed the host's addresses only at
    start; addrwatch.py blocks each new one as it appears)."""
    import docker

    service = HostService()
    client = docker.from_env()
    net = None
    try:
        async with await docker_provider.create(docker_spec(network="public")) as sb:
            net = client.networks.create(f"crucible-late-{secrets.token_hex(4)}", driver="bridge")
            net.reload()
            gateway = net.attrs["IPAM"]["Config"][0]["Gateway"]
            # The bridge's gateway address appears on the host when the network is made.
            server, _ = await service.listen(gateway)
            port = server.sockets[0].getsockname()[1]
            try:
                r = await sb.exec(
                    f"timeout 3 bash -c 'exec 3<>/dev/tcp/{gateway}/{port} && head -n 1 <&3'"
                    " 2>/dev/null || echo closed"
                )
            finally:
                server.close()
            assert r.stdout.strip() == "closed", (gateway, r)
    finally:
        if net is not None:
            net.remove()


EARLY = r"""#!/bin/bash
# A hostile image's ENTRYPOINT: it runs the moment the container starts, before crucible
# has written the container's routes, and races them to the host's service.
gw=$ATTACK_GW
for ((i = 0; i < 20000; i++)); do
  if exec 3<>/dev/tcp/$gw/$ATTACK_PORT; then head -n 1 <&3 > /tmp/stolen; break; fi
done 2>/dev/null
echo "tried $i" > /tmp/early.ran
exec "$@"
"""


@pytest.mark.docker
@pytest.mark.skipif(os.geteuid() != 0, reason="the routes are written in the container's netns")
async def test_an_image_entrypoint_cannot_race_the_routes(
    docker_provider: Any, docker_spec: Any, tmp_path: Path
) -> None:
    """The image's ENTRYPOINT (the task author's) starts with the container. Before, it
    ran on the bridge before the host's addresses were blocked, and its first tries
    reached a host service on the gateway (1 run in 2). Now the container starts on
    network "none" and joins the bridge frozen, until its routes are in."""
    service = HostService()
    gateway = "172.17.0.1"  # docker0's: the default bridge's gateway, an address of the host
    if gateway not in host_ipv4():
        pytest.skip("no default docker bridge on this host")
    server, port = await service.listen(gateway)
    env = tmp_path / "env"
    env.mkdir()
    (env / "early.sh").write_text(EARLY)
    (env / "early.sh").chmod(0o755)
    (env / "Dockerfile").write_text(
        f'FROM {BASE_IMAGE}\nCOPY early.sh /early.sh\nENTRYPOINT ["/early.sh"]\n'
    )
    spec = docker_spec(
        dockerfile_dir=env, environment_digest=f"early-{secrets.token_hex(4)}",
        network="public", env={"ATTACK_PORT": str(port), "ATTACK_GW": gateway},
    )  # fmt: skip
    try:
        async with await docker_provider.create(spec) as sb:
            r = await sb.exec(
                "for i in $(seq 200); do [ -e /tmp/early.ran ] && break; sleep 0.05; done;"  # timing-ok: bounded poll on the entrypoint's file
                " cat /tmp/early.ran /tmp/stolen 2>/dev/null"
            )
    finally:
        server.close()
    assert r.stdout == "tried 20000\n" and service.hits == [], (service.hits, r.stdout)


def _ip(*args: str, check: bool = True) -> None:
    import subprocess

    subprocess.run(["ip", *args], check=check, capture_output=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="the test gives the host an address of its own")
async def test_a_host_address_made_between_two_sandboxes_of_a_slot_is_blocked() -> None:
    """As root, a slot's network namespace is made once and used by its sandboxes in turn;
    its routes are kept current by addrwatch.py, not listed again per sandbox. An address
    the host gains between two sandboxes of the slot (a documentation address the test
    puts on the host's lo: nothing leaves the machine) must be blocked in the second."""
    from crucible.sandboxes.base import SandboxSpec

    addr = "192.0.2.77"
    provider = LocalProvider(userland="host")
    await provider.preflight()
    service = HostService()
    added = False
    try:
        spec = SandboxSpec(job_id="late-addr", network="public")
        async with await provider.create(spec) as sb:
            assert (await sb.exec("true", timeout=30)).ok
        await asyncio.to_thread(_ip, "addr", "add", f"{addr}/32", "dev", "lo")
        added = True
        server, port = await service.listen(addr)
        try:
            async with await provider.create(spec) as sb:
                r = await sb.exec(
                    f"timeout 3 bash -c 'exec 3<>/dev/tcp/{addr}/{port} && head -n 1 <&3'"
                    " 2>/dev/null || echo closed",
                    timeout=30,
                )
        finally:
            server.close()
        assert len(provider.pool.slots) == 1  # the same slot, so the same namespace
        assert r.stdout.strip() == "closed" and service.hits == [], r
    finally:
        if added:
            await asyncio.to_thread(_ip, "addr", "del", f"{addr}/32", "dev", "lo", check=False)
        await provider.aclose()
