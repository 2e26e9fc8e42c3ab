"""The local (bubblewrap) provider against real sandboxes: isolation, limits,
process lifetime, symlink-safe file access, cleanup."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from crucible.errors import ResourcesUnavailable
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local import LocalProvider, LocalSandbox, gpu_count


def _exists(path: str) -> bool:
    return os.path.lexists(path)


def _names(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.fixture
async def provider() -> AsyncIterator[LocalProvider]:
    p = LocalProvider()
    await p.preflight()
    yield p


@pytest.fixture
async def sb(provider: LocalProvider) -> AsyncIterator[LocalSandbox]:
    box = await provider.create(
        SandboxSpec(job_id=f"test-{uuid.uuid4().hex[:8]}", memory_mb=256, pids_limit=128)
    )
    assert isinstance(box, LocalSandbox)
    yield box
    await box.close()


async def test_exec_basics_and_workdir(sb: LocalSandbox) -> None:
    r = await sb.exec("pwd; echo err >&2; exit 7", timeout=10)
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (7, "/app\n", "err\n", False)


async def test_no_host_env_home_or_files(provider: LocalProvider) -> None:
    secret = secrets.token_hex(12)
    marker = Path.home() / f".crucible-test-{secrets.token_hex(4)}"
    marker.write_text(secret)
    os.environ["CRUCIBLE_TEST_SECRET"] = secret
    try:
        box = await provider.create(SandboxSpec(job_id="test-isolation"))
        async with box:
            r = await box.exec(
                f"env; cat /proc/1/environ; cat {marker} 2>&1; "
                "ls /work /run /var 2>&1; cat /etc/shadow 2>&1",
                timeout=10,
            )
            listing = await box.exec("ls -a /root /home 2>&1", timeout=10)
    finally:
        os.environ.pop("CRUCIBLE_TEST_SECRET", None)
        marker.unlink()
    assert secret not in r.stdout
    assert "CRUCIBLE_TEST_SECRET" not in r.stdout
    assert marker.name not in listing.stdout
    assert "No such file" in r.stdout  # /work, /etc/shadow, the marker are simply not there


async def test_no_network(sb: LocalSandbox) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    try:
        r = await sb.exec(
            f"timeout 3 bash -c 'echo > /dev/tcp/127.0.0.1/{port}' && echo OPEN || echo closed",
            timeout=10,
        )
    finally:
        srv.close()
    assert r.stdout.strip() == "closed"
    r = await sb.exec("cat /proc/net/dev | grep -c ':' ", timeout=10)
    assert r.stdout.strip() == "1"  # only loopback


async def test_public_network_shares_host_stack(provider: LocalProvider) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    try:
        async with await provider.create(SandboxSpec(job_id="test-net", network="public")) as box:
            r = await box.exec(
                f"timeout 3 bash -c 'echo > /dev/tcp/127.0.0.1/{port}' && echo OPEN", timeout=10
            )
    finally:
        srv.close()
    assert r.stdout.strip() == "OPEN"


async def test_writes_outside_fail_and_no_capabilities(sb: LocalSandbox) -> None:
    for path in ("/usr/x", "/usr/bin/x", "/etc/x", "/etc/passwd"):
        r = await sb.exec(f"echo hi > {path}", timeout=10)
        assert r.exit_code != 0, path
        assert not _exists("/usr/x")
    r = await sb.exec(
        "grep CapEff /proc/self/status; mount -o remount,rw /usr 2>&1; echo rc=$?", timeout=10
    )
    assert "0000000000000000" in r.stdout
    assert "rc=0" not in r.stdout
    for path in ("/app/a", "/tmp/a", "/root/a", "/logs/agent/a"):
        assert (await sb.exec(f"echo hi > {path}", timeout=10)).ok, path


async def test_background_process_persists_between_execs(sb: LocalSandbox) -> None:
    r = await sb.exec("nohup sleep 300 & echo $!", timeout=10)
    pid = r.stdout.strip()
    assert r.ok and pid.isdigit()
    assert r.duration_sec < 2  # a holder of stdout does not hold the exec
    assert (await sb.exec(f"kill -0 {pid}", timeout=10)).ok
    await sb.kill_all()
    assert not (await sb.exec(f"kill -0 {pid}", timeout=10)).ok


async def test_timeout_kills_children(sb: LocalSandbox) -> None:
    r = await sb.exec("sleep 200 & echo $! > /tmp/c; (sleep 201 &); sleep 202", timeout=0.5)
    assert r.timed_out and r.exit_code == 124
    assert "timed out" in r.stderr
    ps = await sb.exec(
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done", timeout=10
    )
    assert "sleep 200" not in ps.stdout and "sleep 202" not in ps.stdout
    assert (await sb.exec("echo still usable", timeout=10)).stdout == "still usable\n"


async def test_memory_limit_holds(sb: LocalSandbox) -> None:
    r = await sb.exec("python3 -c 'b = bytearray(700 * 1024 * 1024); print(len(b))'", timeout=60)
    assert r.exit_code != 0 and not r.timed_out
    assert "memory limit 256 MiB" in r.stderr
    assert (await sb.exec("echo ok", timeout=10)).ok


async def test_pids_limit_bounds_forks(sb: LocalSandbox) -> None:
    r = await sb.exec(
        "n=0; for i in $(seq 300); do sleep 30 2>/dev/null & done 2>/dev/null; "
        "ls /proc | grep -c '^[0-9]'",
        timeout=20,
    )
    count = int(r.stdout.strip() or 0)
    assert count <= 130  # pids_limit=128 (+init outside the group)
    await sb.kill_all()
    assert (await sb.exec("echo ok", timeout=10)).ok


async def test_output_cap(sb: LocalSandbox) -> None:
    r = await sb.exec("head -c 100000 /dev/zero | tr '\\0' z", timeout=10, output_cap=100)
    assert r.ok and r.truncated and r.stdout == "z" * 100


async def test_symlink_escape_refused(sb: LocalSandbox, tmp_path: Path) -> None:
    host_secret = tmp_path / "secret.txt"
    host_secret.write_text("host only")
    await sb.exec(f"ln -s {host_secret} /app/link; ln -s {tmp_path} /app/dirlink", timeout=10)
    with pytest.raises(FileNotFoundError):
        await sb.read_file("/app/link")  # resolved inside the sandbox: not there
    with pytest.raises(FileNotFoundError):
        await sb.read_file("/app/dirlink/secret.txt")
    # Followed inside the sandbox, where the link's target directory does not exist.
    with pytest.raises(OSError):
        await sb.write_file("/app/link", b"overwritten")
    with pytest.raises(OSError):
        await sb.write_file("/app/dirlink/new.txt", b"planted")
    with pytest.raises(OSError):
        await sb.upload_dir(tmp_path, "/app/dirlink")
    assert host_secret.read_text() == "host only"
    assert not (tmp_path / "new.txt").exists()
    # once the target exists inside, the write lands there and nowhere else
    await sb.exec(f"mkdir -p {tmp_path}", timeout=10)
    await sb.write_file("/app/link", b"overwritten")
    assert (await sb.exec(f"cat {host_secret}", timeout=10)).stdout == "overwritten"
    assert host_secret.read_text() == "host only"
    assert _names(tmp_path) == ["secret.txt"]


async def test_files_roundtrip_and_missing(sb: LocalSandbox, tmp_path: Path) -> None:
    blob = os.urandom(300_000)
    await sb.write_file("/app/deep/dir/blob.bin", blob, mode=0o600)
    assert await sb.read_file("/app/deep/dir/blob.bin") == blob
    assert await sb.read_file("deep/dir/blob.bin") == blob  # relative to the workdir
    assert (await sb.exec("stat -c %a /app/deep/dir/blob.bin", timeout=10)).stdout.strip() == "600"
    assert (await sb.read_file("/etc/passwd")).startswith(b"root:")  # served through the sandbox
    with pytest.raises(FileNotFoundError):
        await sb.read_file("/app/nope")
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "sub" / "run.sh").write_text("echo ran")
    os.chmod(tmp_path / "src" / "sub" / "run.sh", 0o755)
    await sb.upload_dir(tmp_path / "src", "/solution")
    assert (await sb.exec("/solution/sub/run.sh", timeout=10)).stdout == "ran\n"
    await sb.download_dir("/solution", tmp_path / "back")
    assert (tmp_path / "back" / "sub" / "run.sh").read_text() == "echo ran"


async def test_gpu_request_is_resources_unavailable(provider: LocalProvider) -> None:
    if gpu_count() > 0:
        pytest.skip("this machine has GPUs")
    with pytest.raises(ResourcesUnavailable):
        await provider.create(SandboxSpec(gpus=1))


async def test_close_is_idempotent_and_removes_everything(provider: LocalProvider) -> None:
    box = await provider.create(SandboxSpec(job_id="test-close"))
    assert isinstance(box, LocalSandbox)
    init, scratch, cgroups = box.init_pid, box.scratch, box.cgroup.paths if box.cgroup else []
    await box.exec("nohup sleep 300 >/dev/null 2>&1 &", timeout=10)
    await box.close()
    await box.close()
    assert not scratch.exists()
    assert not any(_exists(c) for c in cgroups)
    assert _dead(init)


async def test_cleanup_kills_leftovers_of_a_job(provider: LocalProvider) -> None:
    job = f"test-cleanup-{uuid.uuid4().hex[:8]}"
    boxes = [await provider.create(SandboxSpec(job_id=job, trial_id=f"t{i}")) for i in range(2)]
    inits = [b.init_pid for b in boxes if isinstance(b, LocalSandbox)]
    # a fresh provider (as after a crash) finds them through the registry
    removed = await LocalProvider().cleanup(job)
    assert removed == 2
    await asyncio.sleep(0.2)
    for pid in inits:
        assert _dead(pid)
    for b in boxes:
        await b.close()  # still fine after cleanup


async def test_rlimit_fallback(tmp_path: Path) -> None:
    p = LocalProvider(cgroups="off")
    assert "rlimits" in p.capabilities().isolation
    async with await p.create(SandboxSpec(job_id="test-rlimit", memory_mb=256)) as box:
        r = await box.exec("python3 -c 'b = bytearray(700 * 1024 * 1024)'", timeout=30)
        assert r.exit_code != 0 and "MemoryError" in r.stderr
        assert (await box.exec("echo ok", timeout=10)).ok
