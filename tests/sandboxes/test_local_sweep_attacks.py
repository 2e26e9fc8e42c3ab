"""Attacks on kill_all (sandboxes/local/sweep.py) and on what pid 1 hands on to the next
worker (pid1.py): nothing the agent started, left, or set survives into grading.

Each test asserts the secure behaviour: it fails when the attack works. Written as
attacks on a change that spared the worker through kill_all; four worked (a thread
group whose leader exited alone, a process hopping pids, what the agent set on pid 1,
a descriptor crucible inherited), and that change was taken back."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
from tests.helpers.local_box import local_box
from tests.helpers.wait import await_until

from crucible.sandboxes import proc
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local.provider import LocalProvider, LocalSandbox


@pytest.fixture
async def box() -> AsyncIterator[LocalSandbox]:
    async with local_box("test-sweep") as sb:
        yield sb


def _pipe(sb: LocalSandbox) -> os.stat_result:
    return os.fstat(sb._in_fd)


def _is_worker(sb: LocalSandbox, pid: int) -> bool:
    """pid 1's child with the request pipe on its stdin (or pid 1's fork before it
    becomes one): nothing the agent starts."""
    try:
        st = os.stat(f"/proc/{pid}/fd/0")
    except OSError:
        return False
    pipe = _pipe(sb)
    return proc.ppid_of(pid) == sb.init_pid and (st.st_dev, st.st_ino) == (
        pipe.st_dev,
        pipe.st_ino,
    )


async def _worker(sb: LocalSandbox) -> int:
    """The worker's host pid (there is one once an exec went through)."""
    assert (await sb.exec("true", timeout=10)).ok
    found = [p for p in sb._candidates() if p != sb.init_pid and _is_worker(sb, p)]
    assert len(found) == 1, found
    return found[0]


def _nspid(pid: int) -> int:
    return proc.nspid_of(pid)[-1]


def _alive(sb: LocalSandbox) -> list[int]:
    return [p for p in sb._candidates() if proc.state_of(p) not in (None, "Z")]


def _only_workers_left(sb: LocalSandbox) -> bool:
    return all(p == sb.init_pid or _is_worker(sb, p) for p in _alive(sb))


async def _wrapper_gone(sb: LocalSandbox) -> None:
    """The last exec's wrapper exits just after its report."""
    await await_until(lambda: len(_alive(sb)) == 2, "the exec's wrapper to exit")


@pytest.mark.parametrize(
    "agent",
    [
        # keeps writing, and forks a new writer for each line
        "nohup sh -c 'while :; do (echo x >> /tmp/w); done' >/dev/null 2>&1 &",
        # an orphan of pid 1's own (unreadable) shell, as the worker is
        "(/.crucible/sh -c 'sleep 300; :' </dev/null >/dev/null 2>&1 &)",
        # stopped, as a process the sweep must still kill
        "nohup sleep 300 >/dev/null 2>&1 & kill -STOP $!",
    ],
)
async def test_what_the_agent_left_running_is_swept(box: LocalSandbox, agent: str) -> None:
    assert (await box.exec(agent, timeout=10)).ok
    await box.kill_all()
    assert _only_workers_left(box)
    assert (await box.exec("echo alive", timeout=10)).stdout == "alive\n"


async def test_after_a_sweep_nothing_runs_until_the_next_exec(box: LocalSandbox) -> None:
    # kill_all leaves pid 1 stopped (parked, sweep.py): no worker waits for a request,
    # nothing the agent left can be restarted, and the trial's last sweep (before
    # /logs/verifier is collected) is followed by nothing at all. The next exec lets it go.
    marker = "/tmp/ran-after-the-sweep"
    agent = f"echo start > {marker}; (while :; do echo more >> {marker}; done) >/dev/null 2>&1 &"
    assert (await box.exec(agent, timeout=10)).ok
    await box.kill_all()
    assert proc.state_of(box.init_pid) == "T"
    assert _alive(box) == [box.init_pid], _alive(box)
    await box.write_file(f"{marker}.seen", b"")  # host-side file work needs no worker
    assert await box.alive()
    await box.kill_all()  # nothing ran since: a no-op, still parked
    assert proc.state_of(box.init_pid) == "T"
    before = await box.read_file(marker)
    r = await box.exec(f"cat {marker}", timeout=10)
    assert r.ok and r.stdout.encode() == before  # the writer never ran again
    assert proc.state_of(box.init_pid) != "T"


TAMPER = {
    "rlimit": "prlimit --pid $W --nofile=64:64",
    "nice": "renice -n 5 -p $W",
    "policy": 'python3 -c "import os; os.sched_setscheduler($W, os.SCHED_IDLE, os.sched_param(0))"',
    "affinity": "taskset -p 1 $W",
    "ioprio": "ionice -c 3 -p $W",
    "stop": "kill -STOP $W",
}


@pytest.mark.parametrize("how", sorted(TAMPER))
async def test_a_worker_the_agent_changed_is_killed(box: LocalSandbox, how: str) -> None:
    if how == "affinity" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no affinity to change")
    before = await _worker(box)
    r = await box.exec(f"W={_nspid(before)}; {TAMPER[how]}", timeout=10)
    assert r.ok, r
    await _wrapper_gone(box)
    await box.kill_all()
    after = await _worker(box)
    assert after != before and proc.state_of(before) in (None, "Z")
    # the new worker is pid 1's, as a new one is: what runs next has none of it
    assert (await box.exec("ulimit -n", timeout=10)).stdout != "64\n"


def _live_tasks(sb: LocalSandbox, keep: set[int]) -> dict[int, list[str]]:
    """Threads still running (not zombies) in processes other than `keep`."""
    found: dict[int, list[str]] = {}
    for pid in sb._candidates():
        if pid in keep:
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        live = []
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if stat[stat.rfind(")") + 2 :].split()[0] not in ("Z", "X"):
                live.append(tid)
        if live:
            found[pid] = live
    return found


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


# A thread group whose leader has exited (SYS_exit, not exit_group) while another
# thread runs on: /proc/TGID/stat shows the leader's state, "Z", and it is listed in
# cgroup.procs under the leader's pid. The thread keeps writing a counter.
SURVIVOR = r"""
cat > /tmp/s.py <<'P'
import ctypes, os, platform, threading, time
def loop():
    n = 0
    while True:
        n += 1
        with open("/tmp/alive", "w") as f:
            f.write(str(n))
        time.sleep(0.02)  # timing-ok: the agent's own pace, inside the sandbox
threading.Thread(target=loop).start()
while not os.path.exists("/tmp/alive"):
    pass
ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)
P
nohup python3 /tmp/s.py </dev/null >/dev/null 2>&1 &
until grep -q '^State:.*Z' /proc/$!/status 2>/dev/null; do :; done
"""


@pytest.mark.parametrize("also", ["", "nohup sleep 300 >/dev/null 2>&1 &"])
async def test_a_thread_group_whose_leader_exited_is_killed(box: LocalSandbox, also: str) -> None:
    # The sweep took the exited leader for a zombie ("Z" in its stat) and left it: the
    # live thread outlived kill_all and ran during grading (sweep._running now looks
    # at its threads). also: with another process left beside it.
    await _worker(box)
    assert (await box.exec(SURVIVOR + also, timeout=20)).ok

    def survivors() -> dict[int, list[str]]:
        return {p: t for p, t in _live_tasks(box, {box.init_pid}).items() if _comm(p) == "python3"}

    assert survivors(), "the attack did not set up: no thread runs under an exited leader"
    await box.kill_all()
    assert not survivors(), f"an agent thread outlived kill_all: {survivors()}"


PEEK = r"""
import ctypes, os, sys
W = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
got = []
for path in (f"/proc/{W}/fd", f"/proc/{W}/environ", f"/proc/{W}/mem", f"/proc/{W}/maps"):
    try:
        os.listdir(path) if path.endswith("fd") else open(path, "rb").read(16)
        got.append(path)
    except OSError:
        pass
try:
    os.readlink(f"/proc/{W}/fd/0")
    got.append("fd/0")
except OSError:
    pass
if libc.ptrace(16, W, 0, 0) == 0:  # PTRACE_ATTACH
    got.append("ptrace")
if libc.ptrace(0x4206, W, 0, 0) == 0:  # PTRACE_SEIZE
    got.append("seize")
try:
    fd = os.pidfd_open(W)
    if libc.syscall(438, fd, 0, 0) >= 0:  # pidfd_getfd(fd 0: the request pipe)
        got.append("pidfd_getfd")
except OSError:
    pass
buf = ctypes.create_string_buffer(8)
class IOV(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
loc = IOV(ctypes.cast(buf, ctypes.c_void_p), 8)
rem = IOV(0x400000, 8)
if libc.syscall(310, W, ctypes.byref(loc), 1, ctypes.byref(rem), 1, 0) >= 0:
    got.append("process_vm_readv")
for name, val in (("timerslack_ns", "1000000000"), ("oom_score_adj", "1000"),
                  ("comm", "x"), ("coredump_filter", "0x7f"), ("autogroup", "19")):
    try:
        with open(f"/proc/{W}/{name}", "w") as f:
            f.write(val)
        got.append(name)
    except OSError:
        pass
print(" ".join(got))
"""


async def test_the_worker_cannot_be_read_traced_or_written_through_proc(
    box: LocalSandbox,
) -> None:
    # the worker runs an unreadable binary: not dumpable, and the agent has no
    # capabilities in its user namespace, so ptrace, /proc/W/{fd,mem,environ},
    # pidfd_getfd and process_vm_readv are all refused, and so are the /proc writes
    # that would carry over to grading (timerslack_ns, oom_score_adj, ...)
    w = await _worker(box)
    r = await box.exec(["python3", "-c", PEEK, str(_nspid(w))], timeout=20)
    assert r.ok, r
    assert r.stdout.split() in ([], ["autogroup"]), r.stdout
    caps = await box.exec("grep CapEff /proc/self/status", timeout=10)
    assert caps.stdout.split()[1] == "0000000000000000"


UCLAMP = r"""
import ctypes, os, platform, sys
W = int(sys.argv[1])
class Attr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32),
                ("flags", ctypes.c_uint64), ("nice", ctypes.c_int32),
                ("prio", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64),
                ("umin", ctypes.c_uint32), ("umax", ctypes.c_uint32)]
nr = {"x86_64": 314, "aarch64": 274}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
out = []
# util clamp max 0 (KEEP_POLICY|KEEP_PARAMS|UTIL_CLAMP_MAX), then reset-on-fork
for flags, umax in ((0x08 | 0x10 | 0x40, 0), (0x01 | 0x08 | 0x10, 0)):
    a = Attr(size=ctypes.sizeof(Attr), flags=flags, umax=umax)
    out.append(str(libc.syscall(nr, W, ctypes.byref(a), 0)))
print(" ".join(out))
"""


async def test_a_util_clamp_or_reset_on_fork_on_the_worker_does_not_reach_grading(
    box: LocalSandbox,
) -> None:
    # sched_setattr's util clamp and reset-on-fork are not in /proc/W/stat's policy
    # field. The kernel refuses the agent a util clamp; reset-on-fork it allows (and
    # the worker is then killed anyway), it only resets RT policies and negative nice
    # in children, which the checked policy and nice already rule out: grading's
    # processes get the same priority, nice and policy as from a fresh worker.
    stat = "cut -d' ' -f18,19,40,41 /proc/self/stat"
    before = (await box.exec(stat, timeout=10)).stdout
    w = await _worker(box)
    r = await box.exec(["python3", "-c", UCLAMP, str(_nspid(w))], timeout=20)
    assert r.ok, r
    assert r.stdout.split()[0] == "-1", "util clamp set on the worker"
    await _wrapper_gone(box)
    await box.kill_all()
    assert (await box.exec(stat, timeout=10)).stdout == before


PID1 = {
    "nofile": ("prlimit --pid 1 --nofile=64:", "ulimit -n", "64"),
    "nice": ("renice -n 7 -p 1 >/dev/null", "cut -d' ' -f19 /proc/self/stat", "7"),
    "nice-user": ("renice -n 7 -u 0 >/dev/null", "cut -d' ' -f19 /proc/self/stat", "7"),
    "ionice-user": ("ionice -c 3 -u 0", "ionice", "idle"),
    "nice-pgrp": ("renice -n 7 -g 1 >/dev/null", "cut -d' ' -f19 /proc/self/stat", "7"),
    "fsize": ("prlimit --pid 1 --fsize=4096:", "ulimit -f", "8"),
    "fsize-hard": ("prlimit --pid 1 --fsize=4096:4096", "ulimit -f", "8"),
}


# A hard limit the agent lowered on pid 1 is raised again only with CAP_SYS_RESOURCE,
# which root lacks on some hosts (this project's VMs): there it stays lowered, and what
# it breaks in grading is a counted verifier_failed of the attempt (blame.py).
def _has_cap_sys_resource() -> bool:
    with open("/proc/self/status") as f:
        eff = next(ln for ln in f if ln.startswith("CapEff:")).split()[1]
    return bool(int(eff, 16) >> 24 & 1)  # CAP_SYS_RESOURCE is capability 24


NO_RAISE = pytest.mark.xfail(
    not _has_cap_sys_resource(),
    reason="no CAP_SYS_RESOURCE: a lowered hard limit of pid 1 cannot be raised",
    strict=True,
)


@pytest.mark.parametrize(
    "what", [pytest.param(w, marks=NO_RAISE) if w.endswith("-hard") else w for w in sorted(PID1)]
)
async def test_grading_has_none_of_what_the_agent_set_on_pid1(box: LocalSandbox, what: str) -> None:
    # pid 1's rlimits, nice, I/O priority are the agent's
    # to change (same uid, prlimit/setpriority/ioprio_set check no dumpability); the
    # agent then kills the worker (or leaves anything behind so kill_all sweeps), and
    # every worker pid 1 starts from then on, the one grading runs in included,
    # inherits them, unless the sweep puts them back (pid1.py).
    tamper, probe, bad = PID1[what]
    await _worker(box)
    r = await box.exec(f"{tamper} && kill -9 $$", timeout=10)  # $$: the worker
    assert r.ok, r
    await box.kill_all()
    got = (await box.exec(probe, timeout=10)).stdout.strip()
    assert bad not in got.split(), f"grading inherited the agent's {what}: {got}"


async def test_a_queued_realtime_signal_only_replaces_the_worker(box: LocalSandbox) -> None:
    # dash leaves SIGRTMIN at its default (terminate): the worker dies, pid 1 starts
    # a new one, and nothing is left queued for grading
    w = await _worker(box)
    r = await box.exec(f"kill -s RTMIN+3 {_nspid(w)}; kill -s USR1 {_nspid(w)}; true", timeout=10)
    del r
    await box.kill_all()
    assert (await box.exec("echo ok", timeout=10)).stdout == "ok\n"


async def test_no_nested_namespace_to_hide_from_the_sweep(box: LocalSandbox) -> None:
    # without cgroups the sweep lists only pid 1's own pid namespace (a process in
    # a nested one would be invisible to it); creating one
    # needs a nested user namespace, which the sandbox refuses
    r = await box.exec("unshare -Urpf true", timeout=10)
    assert r.exit_code != 0, r


async def test_an_fd_crucible_inherited_does_not_reach_the_sandbox() -> None:
    # LocalSandbox._spawn uses posix_spawn with no
    # close-range, and nothing on the way (hostuid.spawn, bwrap) closes inherited
    # fds: every inheritable fd crucible's own parent left it (a CI log pipe, a
    # `3>file` redirect, a lock) is open in pid 1, the worker and every agent
    # process, writable where it was opened so.
    r_fd, w_fd = os.pipe()
    os.set_inheritable(w_fd, True)
    p = LocalProvider()
    await p.preflight()
    sb = await p.create(
        SandboxSpec(job_id=f"test-sweep-fd-{uuid.uuid4().hex[:8]}", memory_mb=256, pids_limit=128)
    )
    try:
        assert isinstance(sb, LocalSandbox)
        r = await sb.exec(f"readlink /proc/self/fd/{w_fd}", timeout=10)
        assert not r.stdout.startswith("pipe:"), f"fd {w_fd} of crucible's is open inside: {r}"
    finally:
        await sb.close()
        await p.aclose()
        os.close(r_fd)
        os.close(w_fd)


# A process that forks and exits at once, its child likewise, for ever: at any moment
# one live process, under a new pid each time.
HOPPER = (
    "nohup perl -e 'while (1) { my $p = fork; exit 0 if $p;"
    " select(undef, undef, undef, 0.001) unless defined $p }'"
    " </dev/null >/dev/null 2>&1 &"
)


async def test_a_process_that_hops_to_a_new_pid_does_not_outlive_kill_all(
    box: LocalSandbox,
) -> None:
    # A process that forks and exits over and over is always gone when read, its child
    # never listed: a check that skipped what it found gone once let it live on (about
    # 1 in 200 sweeps). The sweep stops what it lists before killing, round after round.
    for _ in range(5):
        assert (await box.exec(HOPPER, timeout=10)).ok
        await box.kill_all()
        left = {p: t for p, t in _live_tasks(box, {box.init_pid}).items() if _comm(p) == "perl"}
        assert not left, f"the hopper outlived kill_all: {left}"


@pytest.mark.parametrize(
    "limit",
    ["--nofile=3:", "--nproc=1:", "--cpu=0:", "--as=10000000:"]
    + [pytest.param(x, marks=NO_RAISE) for x in ("--nofile=3:3", "--cpu=0:0")],
)
async def test_the_agent_cannot_break_every_later_exec_through_pid1(
    box: LocalSandbox, limit: str
) -> None:
    # The worst of pid 1's rlimits: the agent sets one on
    # pid 1 and kills the worker; every worker pid 1 starts from then on is broken, and
    # grading's every exec hangs to its timeout (nofile, nproc: exit 124), is killed at
    # once (cpu: 137, which reads as a kill by the OOM killer) or cannot load libc (as:
    # 127) -- what an agent wants when a broken grading counts as an excluded error.
    assert (await box.exec(f"prlimit --pid 1 {limit} && kill -9 $$", timeout=10)).ok
    await box.kill_all()
    r = await box.exec("echo ok; python3 -c 'print(1)'", timeout=5)
    assert r.ok and r.stdout == "ok\n1\n", r
