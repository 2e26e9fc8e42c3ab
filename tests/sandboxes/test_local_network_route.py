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
        ["unshare", "--net", sys.executable, str(ROOT / "tests/sandboxes/netns_world.py")],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["outside"] == "hello from outside"
    for name in ("host_loopback", "host_address", "gateway"):
        assert report[name].endswith("closed"), (name, report[name])


async def test_helper_dies_with_its_sandbox() -> None:
    provider = LocalProvider(userland="host")
    await provider.preflight()
    try:
        sb = await provider.create(
            SandboxSpec(job_id=f"net-{uuid.uuid4().hex[:6]}", network="public")
        )
        assert isinstance(sb, LocalSandbox) and sb._net is not None
        pid = sb._net.slirp_pid
        assert pid and not _gone(pid)
        assert os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "slirp4netns"
        await sb.close()
        assert _gone(pid)
    finally:
        await provider.aclose()


HOLDER = """
import asyncio, sys
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local.provider import LocalProvider
async def main():
    p = LocalProvider(userland="host")
    await p.preflight()
    sb = await p.create(SandboxSpec(job_id=sys.argv[1], network="public"))
    print(sb._net.slirp_pid, flush=True)
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
