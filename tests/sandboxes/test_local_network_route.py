"""The route out of a local sandbox with network, shown without a packet leaving the machine.

tests/sandboxes/netns_world.py runs in a network namespace of its own (unshare --net)
with a second one as "the outside" behind a veth pair (link-local addresses): the
sandbox's slirp4netns, started there, reaches the outside's listener, while that
namespace's own loopback and address (the "host's") stay out of reach. Also: the
helper never outlives its sandbox, nor crucible, and a missing one is a clear failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from tests.helpers.wait import await_until

from crucible.errors import SandboxFailed
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local.provider import LocalProvider, LocalSandbox

ROOT = Path(__file__).resolve().parents[2]
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (unshare --net, veth)")


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@root_only
def test_route_out_reaches_the_outside_but_not_the_host() -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    out = subprocess.run(
        ["unshare", "--net", "--mount", "--propagation", "private",
         sys.executable, str(ROOT / "tests/sandboxes/netns_world.py")],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["outside"] == "hello from outside"
    assert report["resolver"] == "a host service"  # its port 53 only
    # late_address: one the host gained while the sandbox ran (a compose trial's bridge)
    for name in ("host_loopback", "host_address", "gateway", "late_address", "resolver_other_port"):
        assert report[name].endswith("closed"), (name, report[name])


def _slirp(sb: LocalSandbox) -> int:
    """The sandbox's slirp4netns: its own, or as root its slot's (shared in turn)."""
    net = sb._net or sb.slot.net
    assert net is not None
    return net.slirp_pid


async def test_helper_dies_with_its_sandbox_or_slot() -> None:
    provider = LocalProvider(userland="host")
    await provider.preflight()
    job = f"net-{uuid.uuid4().hex[:6]}"
    try:
        sb = await provider.create(SandboxSpec(job_id=job, network="public"))
        assert isinstance(sb, LocalSandbox)
        pid = _slirp(sb)
        assert pid and not _gone(pid)
        assert os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "slirp4netns"
        await sb.close()
        if os.geteuid() == 0:  # the slot's: the next sandbox of the slot gets it again
            again = await provider.create(SandboxSpec(job_id=job, network="public"))
            assert isinstance(again, LocalSandbox) and _slirp(again) == pid
            r = await again.exec("ip route 2>/dev/null || cat /proc/net/route", timeout=30)
            await again.close()
            assert "tap0" in r.stdout
        else:
            assert _gone(pid)
    finally:
        await provider.aclose()
    assert _gone(pid)


HOLDER = """
import asyncio, sys
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local.provider import LocalProvider
async def main():
    p = LocalProvider(userland="host")
    await p.preflight()
    sb = await p.create(SandboxSpec(job_id=sys.argv[1], network="public"))
    print((sb._net or sb.slot.net).slirp_pid, flush=True)
    sys.stdin.readline()
asyncio.run(main())
"""


async def test_helper_dies_with_crucible() -> None:
    job = f"net-crash-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}"}
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLDER, job, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    assert holder.stdout is not None
    try:
        pid = int(await holder.stdout.readline())
        assert not _gone(pid)
        holder.send_signal(signal.SIGKILL)  # no close(), no finalizer: the kernel closes its fds
        await holder.wait()
        await await_until(lambda: _gone(pid), "slirp4netns to exit with crucible")
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
        provider = LocalProvider()
        await provider.cleanup(job)


async def test_missing_helper_is_a_clear_sandbox_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = LocalProvider(userland="host")
    await provider.preflight()
    bin_dir = tmp_path / "bin"  # PATH with everything but slirp4netns
    bin_dir.mkdir()
    for name in ("nsenter", "ip"):
        if found := shutil.which(name):
            (bin_dir / name).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    try:
        with pytest.raises(SandboxFailed) as err:
            await provider.create(SandboxSpec(job_id="net-missing", network="public"))
        assert "slirp4netns" in err.value.message and "apt-get install" in (err.value.hint or "")
        async with await provider.create(SandboxSpec(job_id="net-missing")) as sb:
            assert (await sb.exec("echo ok", timeout=30)).stdout == "ok\n"  # no network: fine
    finally:
        await provider.aclose()


@root_only
async def test_only_the_agents_endpoint_is_forwarded_from_host_loopback() -> None:
    """An installed agent's model server on the host's 127.0.0.1 is reachable through the
    sandbox's own loopback (forward.py); the host's other loopback ports are not."""
    served: list[bytes] = []

    async def model(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.append(await reader.readline())
        writer.write(b"model says hi\n")
        await writer.drain()
        writer.close()

    endpoint = await asyncio.start_server(model, "127.0.0.1", 0)
    other = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port, other_port = (s.sockets[0].getsockname()[1] for s in (endpoint, other))
    provider = LocalProvider(userland="host")
    await provider.preflight()
    try:
        async with await provider.create(SandboxSpec(job_id="net-fwd", network="public")) as sb:
            url = await sb.expose_url(f"http://localhost:{port}/v1")
            assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
            inner = int(url.split(":")[2].split("/")[0])
            assert await sb.expose_url("http://10.9.8.7:80/v1") == "http://10.9.8.7:80/v1"
            r = await sb.exec(
                f"timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{inner}; echo ask >&3; head -n 1 <&3'; "
                f"timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{other_port}' 2>/dev/null "
                "&& echo OPEN || echo closed",
                timeout=30,
            )
            assert r.stdout.splitlines() == ["model says hi", "closed"], r
        assert served == [b"ask\n"]
    finally:
        for s in (endpoint, other):
            s.close()
        await provider.aclose()
