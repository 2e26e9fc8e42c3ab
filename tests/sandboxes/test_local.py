"""The local (bubblewrap) provider against real sandboxes: isolation, limits,
process lifetime, symlink-safe file access, cleanup."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.helpers.wait import await_until

from crucible.errors import ResourcesUnavailable, SandboxFailed
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local.provider import LocalProvider, LocalSandbox, gpu_count


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
    await p.aclose()


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


async def test_public_network_has_its_own_stack(provider: LocalProvider) -> None:
    """With network, the host's loopback stays out of reach (tests/sandboxes/
    test_host_services_attack.py has the attacks; test_local_network_route.py the route out)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    try:
        async with await provider.create(SandboxSpec(job_id="test-net", network="public")) as box:
            r = await box.exec(
                f"timeout 3 bash -c 'echo > /dev/tcp/127.0.0.1/{port}' && echo OPEN || echo closed; "
                "grep -c : /proc/net/dev",
                timeout=10,
            )
    finally:
        srv.close()
    assert r.stdout.split() == ["closed", "2"]  # lo and slirp4netns's tap0


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
    assert not r.timed_out  # a holder of stdout does not hold the exec (it would time out)
    assert (await sb.exec(f"kill -0 {pid}", timeout=10)).ok
    await sb.kill_all()
    assert not (await sb.exec(f"kill -0 {pid}", timeout=10)).ok


async def test_kill_all_sweeps_again_after_any_exec(sb: LocalSandbox) -> None:
    await sb.kill_all()
    await sb.kill_all()  # nothing ran since the sweep: nothing to kill, no sweep
    r = await sb.exec("nohup sleep 300 >/dev/null 2>&1 & echo $!", timeout=10)
    pid = r.stdout.strip()
    assert (await sb.exec(f"kill -0 {pid}", timeout=10)).ok
    await sb.kill_all()  # an exec ran: this one sweeps
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
    # sh exits at the first fork that fails; its EXIT trap (builtins only) says how many ran
    r = await sb.exec(
        "trap 'echo started $i' EXIT; i=0; while [ $i -lt 300 ]; do sleep 30 & i=$((i+1)); done",
        timeout=20,
    )
    assert r.stdout.startswith("started "), r  # no count is a failure, never a 0
    started = int(r.stdout.split()[1])
    assert 64 <= started < 128, r  # pids_limit=128: those under it ran, the limit stopped the rest
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


async def test_close_is_idempotent_and_pool_is_removed_at_aclose(provider: LocalProvider) -> None:
    box = await provider.create(SandboxSpec(job_id=f"test-close-{uuid.uuid4().hex[:6]}"))
    assert isinstance(box, LocalSandbox)
    init, ctl, cg = box.init_pid, box.ctl, box.cgroup
    await box.exec("nohup sleep 300 >/dev/null 2>&1 &", timeout=10)
    await box.close()
    await box.close()
    assert _dead(init)
    if cg is not None:  # back in the pool: kept, but empty
        assert cg.procs() == []
        assert all(_exists(c) for c in cg.paths)
    # the next sandbox of the job reuses the slot, limits rewritten only as needed
    again = await provider.create(SandboxSpec(job_id=box.spec.job_id, memory_mb=300))
    assert isinstance(again, LocalSandbox) and again.ctl == ctl
    assert (await again.exec("echo reused", timeout=10)).stdout == "reused\n"
    if cg is not None and cg.mem_inner is not None:  # the execs' group has the limit
        limit = cg.mem_inner / "memory.limit_in_bytes"
        assert limit.read_text().strip() == str(300 << 20)
    await again.close()
    await provider.aclose()
    assert not _exists(ctl)
    assert not any(_exists(c) for c in (cg.paths if cg else []))


async def test_root_is_private_tmpfs_with_storage_limit(provider: LocalProvider) -> None:
    spec = SandboxSpec(job_id=f"test-tmpfs-{uuid.uuid4().hex[:6]}", storage_mb=8)
    async with await provider.create(spec) as box:
        r = await box.exec("stat -f -c %T /; head -c 20000000 /dev/zero > /app/big", timeout=20)
        assert r.stdout.split()[0] == "tmpfs"
        assert r.exit_code != 0 and "No space left" in r.stderr
        # the next sandbox starts from a clean root
    async with await provider.create(spec) as box:
        assert (await box.exec("ls /app | wc -l", timeout=10)).stdout.strip() == "0"


@pytest.mark.parametrize(
    "attack",
    [
        "kill -9 1",
        "kill -9 -1",
        "pkill -9 sh; pkill -9 bash",
        # every process found through /proc, pid 1 included
        "for p in /proc/[0-9]*; do kill -9 ${p#/proc/}; done",
        "for s in $(seq 1 31) $(seq 34 64); do kill -$s 1; done",
        "kill -STOP 1",
        # dash (pid 1) catches SIGINT while it waits on its worker, and would exit for it
        # once the worker is gone: the sweep below ends the worker
        "kill -INT 1",
    ],
)
async def test_agent_cannot_kill_the_exec_server(sb: LocalSandbox, attack: str) -> None:
    r = await sb.exec(attack, timeout=10)
    assert not r.timed_out, r
    after = await sb.exec("echo alive", timeout=10)
    assert after.stdout == "alive\n", after
    bg = await sb.exec("nohup sleep 300 >/dev/null 2>&1 & echo $!", timeout=10)
    await sb.kill_all()  # still kills every other process
    assert not (await sb.exec(f"kill -0 {bg.stdout.strip()}", timeout=10)).ok


async def test_files_cannot_starve_the_sandbox_of_memory(provider: LocalProvider) -> None:
    # the root tmpfs counts against memory_mb: it stops short of it (ENOSPC), and
    # a memory hog on top is what the OOM killer takes, never pid 1
    spec = SandboxSpec(job_id=f"test-fill-{uuid.uuid4().hex[:6]}", memory_mb=160)
    async with await provider.create(spec) as sb:
        fill = await sb.exec("head -c 400000000 /dev/zero > /tmp/fill", timeout=30)
        assert fill.exit_code != 0 and "No space left" in fill.stderr, fill
        hog = await sb.exec("python3 -c 'b = bytearray(300 << 20)'", timeout=30)
        assert hog.exit_code != 0 and not hog.timed_out, hog
        assert (await sb.exec("echo alive", timeout=10)).stdout == "alive\n"


async def test_pid1_is_not_dumpable(sb: LocalSandbox) -> None:
    # no ptrace of pid 1, no reopening of its fds (request pipe, cgroup file)
    r = await sb.exec(
        "ls -l /proc/1/fd/; cat /proc/1/environ; head -c1 /.crucible/init", timeout=10
    )
    if not sb.slot.has_init:
        pytest.skip("no shell to make an unreadable pid 1 from")
    assert r.stderr.count("Permission denied") >= 3, r


async def test_persistent_fork_bomb_cannot_take_the_sandbox(provider: LocalProvider) -> None:
    spec = SandboxSpec(job_id=f"test-bomb-{uuid.uuid4().hex[:6]}", pids_limit=48)
    async with await provider.create(spec) as sb:
        bomb = (
            "import os, time\nwhile True:\n  try:\n    if os.fork() == 0: time.sleep(1000)\n"
            "  except OSError: time.sleep(0.0005)\n"  # timing-ok: the bomb retrying, in the sandbox
        )
        await sb.write_file("/tmp/bomb.py", bomb)
        r = await sb.exec("nohup python3 /tmp/bomb.py >/dev/null 2>&1 &", timeout=10)
        assert r.ok
        await await_until(lambda: _pids_full(sb), "the bomb to fill the sandbox's pids")
        # a bomb that takes every pid freed leaves the next exec without one (it may
        # time out): the agent's failure; kill_all gives the sandbox back
        await sb.kill_all()
        assert (await sb.exec("echo after", timeout=10)).stdout == "after\n"


async def test_pid1_headroom_leaves_the_agent_its_whole_pids_limit(sb: LocalSandbox) -> None:
    """pid 1 and its worker sit above the exec group, with PID1_HEADROOM spare pids:
    the agent's processes get all of pids_limit (128 here), pid 1 can still fork."""
    if sb.slot.cgroup is None or sb.slot.cgroup.inner is None:
        pytest.skip("headroom is kept on cgroup v1 only (an inner pids group); none here")
    # forks until the limit refuses one, then holds every pid it got (no retries)
    hog = (
        "import os, time\nn = 0\nwhile True:\n  try:\n    pid = os.fork()\n"
        "  except OSError:\n    break\n  if pid == 0:\n    time.sleep(1000)\n    os._exit(0)\n"
        "  n += 1\nopen('/tmp/hog.out', 'w').write(str(n))\ntime.sleep(1000)\n"
    )
    await sb.write_file("/tmp/hog.py", hog)
    await sb.exec("nohup python3 /tmp/hog.py >/dev/null 2>&1 &", timeout=10)

    async def forked() -> bytes | None:
        with contextlib.suppress(FileNotFoundError):
            return await sb.read_file("/tmp/hog.out")  # read from the host: no fork inside
        return None

    n = int(await await_until(forked, "the hog to fork all it can"))
    assert _pids_full(sb)
    # 128 = the hog, its children, and at most the exec's shell that started it
    assert n >= 126, n
    await sb.kill_all()
    assert (await sb.exec("echo after", timeout=30)).stdout == "after\n"


def _pids_full(sb: LocalSandbox) -> bool:
    """The sandbox's exec group (its inner pids group on v1) is at its pids.max."""
    cg = sb.slot.cgroup
    assert cg is not None, "needs cgroups"
    group = cg.inner or cg.dirs.get("pids") or cg.dirs["unified"]
    return (group / "pids.current").read_text() == (group / "pids.max").read_text()


async def test_orphans_are_reaped(sb: LocalSandbox) -> None:
    r = await sb.exec("for i in $(seq 300); do (true &); done; echo done", timeout=30)
    assert r.stdout == "done\n"  # 300 > pids_limit=128: orphans did not pile up as zombies
    zombies = "grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l"
    z = await sb.exec(  # waits for the reaping, up to the exec's time limit
        f"while [ $({zombies}) -gt 1 ]; do sleep 0.01; done; {zombies}",  # timing-ok: polls
        timeout=30,
    )
    assert not z.timed_out and int(z.stdout) <= 1, z


async def test_a_server_that_dies_is_a_lost_sandbox(sb: LocalSandbox) -> None:
    os.kill(sb.init_pid, 9)  # only the host can do this
    with pytest.raises(SandboxFailed):
        await sb.exec("echo hi", timeout=10)


async def test_control_dir_is_read_only_inside(sb: LocalSandbox) -> None:
    r = await sb.exec("touch /.crucible/x || ln -s /etc /.crucible/y", timeout=10)
    assert r.exit_code != 0 and "Read-only" in r.stderr
    assert (await sb.exec("echo ok", timeout=10)).ok


async def test_cleanup_kills_leftovers_of_a_job(provider: LocalProvider) -> None:
    job = f"test-cleanup-{uuid.uuid4().hex[:8]}"
    boxes = [await provider.create(SandboxSpec(job_id=job, trial_id=f"t{i}")) for i in range(2)]
    inits = [b.init_pid for b in boxes if isinstance(b, LocalSandbox)]
    # a fresh provider (as after a crash) finds them by their bwrap's name and cgroups
    removed = await LocalProvider().cleanup(job)
    assert removed == 2
    await await_until(lambda: all(_dead(pid) for pid in inits), "the sandboxes' pid 1 to die")
    for b in boxes:
        with pytest.raises(SandboxFailed):
            await b.exec("true", timeout=5)
        await b.close()  # still fine after cleanup
    box = await provider.create(SandboxSpec(job_id=job))  # its pool recovers
    async with box:
        assert (await box.exec("echo ok", timeout=10)).ok
    await provider.aclose()
    assert await LocalProvider().cleanup(job) == 0


async def test_rlimit_fallback(tmp_path: Path) -> None:
    p = LocalProvider(cgroups="off")
    assert "rlimits" in p.capabilities().isolation
    async with await p.create(SandboxSpec(job_id="test-rlimit", memory_mb=256)) as box:
        r = await box.exec("python3 -c 'b = bytearray(700 * 1024 * 1024)'", timeout=30)
        assert r.exit_code != 0 and "MemoryError" in r.stderr
        assert (await box.exec("echo ok", timeout=10)).ok


async def test_an_exec_starts_with_sigpipe_and_sigxfsz_at_their_defaults(sb: LocalSandbox) -> None:
    # Python ignores both; an ignored signal survives exec, so bwrap is spawned with them
    # reset (hostuid.spawn): else `producer | head` would never end a producer by SIGPIPE
    r = await sb.exec("awk '/^SigIgn/ {print $2}' /proc/self/status", timeout=10)
    ignored = int(r.stdout.strip(), 16)
    assert not ignored & (1 << (13 - 1)), r.stdout  # SIGPIPE
    assert not ignored & (1 << (25 - 1)), r.stdout  # SIGXFSZ
