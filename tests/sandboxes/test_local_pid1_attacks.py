"""Attacks from inside a `local` sandbox on its pid 1 (dash, init.py), on its worker (a
fork of pid 1), and on the park that kill_all leaves pid 1 in (sweep.py).

Each test asserts the secure behaviour: it fails when the attack works. Written against
8fb71c5 (pid 1 parked after kill_all) and e7b95b0 (pid 1 dash, worker a fork of it); four
worked there: RLIMIT_NPROC on pid 1 (its next fork fails, dash exits: the sandbox lost,
an excluded error), RLIMIT_CPU on pid 1 with a SIGCHLD flood (the kernel's SIGKILL at the
hard limit: likewise), and SIGCONT to pid 1 during the sweep (the park broken: the
grading's worker forked with the agent's nofile and nice). Fixed by pid 1 retrying a
failed fork (init.py), LocalSandbox.ended_by_contents (a pid 1 that ended while crucible
had not closed the sandbox is the attempt's doing), and a sweep that stops pid 1 again
until it stayed stopped (sweep.py)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
from tests.helpers.local_box import local_box
from tests.helpers.wait import WaitTimeout, await_until

from crucible.engine.grading.blame import ended_by_attempt
from crucible.errors import SandboxFailed
from crucible.sandboxes import proc
from crucible.sandboxes.local.provider import LocalSandbox

# the worker's pid inside: pid 1's only child while no orphan of the agent's is left
WORKER = "W=$(awk '$4==1{print $1}' /proc/[0-9]*/stat)"


@pytest.fixture
async def box() -> AsyncIterator[LocalSandbox]:
    async with local_box("test-pid1") as sb:
        yield sb


def _alive(sb: LocalSandbox) -> list[int]:
    return [p for p in sb._candidates() if proc.state_of(p) not in (None, "Z")]


async def _ok(sb: LocalSandbox, cmd: str) -> str:
    r = await sb.exec(cmd, timeout=20)
    assert r.ok, r
    return r.stdout


def _parked(sb: LocalSandbox) -> bool:
    return proc.state_of(sb.init_pid) == "T" and _alive(sb) == [sb.init_pid]


# --- pid 1 limited from inside: never an excluded error ---------------------------------


async def _graded(sb: LocalSandbox, timeout: float = 20) -> str:
    """What the grading's exec comes to after an attack: "graded" (it ran), "counted" (it
    failed in a way blame.py charges to the attempt: a live sandbox, or one its contents
    ended); an excluded error (a lost sandbox nobody inside could end) fails the test."""
    try:
        r = await sb.exec("echo graded", timeout=timeout)
    except SandboxFailed as exc:
        ended = await ended_by_attempt(sb, exc)
        assert ended is not None, f"an excluded error: {exc}"
        return "counted"
    if r.stdout == "graded\n":
        return "graded"
    assert await sb.alive(), r
    return "counted"


@pytest.mark.parametrize(
    ("attack", "outcome"),
    [
        # a hard limit pid1.restore (acting as pid 1's own uid) cannot raise: the worker
        # pid 1 forks for the grading exec fails; dash would exit for it ("Cannot fork")
        ("prlimit --pid 1 --nproc=0:0", {"counted"}),
        # a soft one, and the worker killed: pid 1 forks its next worker at once, and
        # retries until the sweep puts the limit back
        (f"prlimit --pid 1 --nproc=0: && {WORKER} && kill -9 $W", {"graded"}),
    ],
    ids=["hard-then-sweep", "soft-then-kill-worker"],
)
async def test_a_process_limit_on_pid1_is_never_an_excluded_error(
    box: LocalSandbox, attack: str, outcome: set[str]
) -> None:
    await box.exec(attack, timeout=20)
    await box.kill_all()
    assert await _graded(box, timeout=3) in outcome


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def test_a_cpu_limit_and_a_sigchld_flood_are_never_an_excluded_error(
    box: LocalSandbox,
) -> None:
    # RLIMIT_CPU's hard limit is a SIGKILL from the kernel, which even a namespace's init
    # takes; every SIGCHLD from inside wakes pid 1 (its one handler), burning its CPU time.
    # pid 1 may die: then the sandbox's contents ended it, the attempt's counted failure.
    flood = "(while :; do kill -CHLD 1 || exit; done) >/dev/null 2>&1 &"
    await _ok(box, f"prlimit --pid 1 --cpu=1:1 && {flood} {flood} echo flooding")
    pid = box.init_pid
    try:
        await await_until(
            lambda: not os.path.exists(f"/proc/{pid}") or _cpu_seconds(pid) >= 1.5,
            "pid 1 to die or to outlast its CPU limit",
            timeout=60,
        )
    except WaitTimeout:
        pass  # the flood could not even drive pid 1 to its limit
    if await box.alive():
        await box.kill_all()
    assert await _graded(box) in {"graded", "counted"}


# --- the park broken: pid 1 runs (and forks a worker) before its settings are put back --


async def test_sigcont_during_the_sweep_does_not_hand_the_agents_settings_on(
    box: LocalSandbox,
) -> None:
    # SIGCONT wakes a stopped task even where the signal itself is then dropped (the
    # kernel's prepare_signal), pid 1 of a namespace included: a loop of the agent's that
    # runs while the sweep stops pid 1 lets it go on, it forks a new worker with what the
    # agent set on it, and that worker (restore touches only pid 1) takes the grading
    clean = await _ok(box, "ulimit -n; nice")
    cont = "(while :; do kill -CONT 1; done) >/dev/null 2>&1 &"
    await _ok(box, f"prlimit --pid 1 --nofile=77: && renice -n 7 -p 1 >/dev/null; {cont * 6}")
    await box.kill_all()
    parked, alive = proc.state_of(box.init_pid), _alive(box)
    graded = await _ok(box, "ulimit -n; nice")
    assert (parked, alive, graded) == ("T", [box.init_pid], clean)


async def test_a_fork_bomb_is_swept_and_pid1_stays_parked(box: LocalSandbox) -> None:
    await _ok(box, "f() { f & f & }; (f &) >/dev/null 2>&1; echo bombed")
    await box.kill_all()
    assert _parked(box), _alive(box)
    assert (await box.exec("echo graded", timeout=20)).stdout == "graded\n"


# --- signals to pid 1 and the worker ----------------------------------------------------


@pytest.mark.parametrize(
    "attack",
    [
        f"{WORKER}; for s in $(seq 1 64); do kill -$s 1 2>/dev/null; done; kill -9 $W",
        f"{WORKER}; for s in $(seq 1 64); do kill -$s $W 2>/dev/null; done",
        f"{WORKER}; kill -INT 1 $W; kill -TERM 1; kill -HUP 1",
        # a SIGCHLD flood left running into the sweep
        "for i in 1 2 3 4; do (while :; do kill -CHLD 1; done) >/dev/null 2>&1 & done",
    ],
    ids=["all-to-pid1", "all-to-worker", "int-term-hup", "sigchld-flood"],
)
async def test_signals_neither_end_pid1_nor_wedge_later_execs(
    box: LocalSandbox, attack: str
) -> None:
    await box.exec(attack, timeout=20)
    assert (await box.exec("echo next", timeout=20)).stdout == "next\n"
    await box.kill_all()
    assert _parked(box), _alive(box)
    assert (await box.exec("echo graded", timeout=20)).stdout == "graded\n"


async def test_orphans_do_not_pile_up_as_zombies(box: LocalSandbox) -> None:
    # more orphans than pids.max: each one pid 1 failed to reap would hold a pid
    await _ok(box, "for i in $(seq 300); do (true &); done; echo orphaned")
    zombies = await _ok(box, "grep -l '^State:.Z' /proc/[0-9]*/status | wc -l")
    assert int(zombies) < 5
    await box.kill_all()
    assert (await box.exec("echo graded", timeout=20)).stdout == "graded\n"


# --- shell state, fds, reports ------------------------------------------------------------


async def test_what_an_exec_sets_in_its_shell_reaches_no_later_exec(box: LocalSandbox) -> None:
    probe = "umask; pwd; echo ${FOO-unset}; type w read 2>&1 | head -2; trap; grep SigIgn /proc/self/status"
    clean = await _ok(box, probe)
    tamper = (
        "umask 0; cd /; export FOO=1; read() { echo 0; }; w() { :; }; trap '' TERM HUP; "
        "set -e; alias ls=true 2>/dev/null; . /dev/null; exec 7>/tmp/x; exec sh -c 'exit 7'"
    )
    assert (await box.exec(tamper, timeout=20)).exit_code == 7  # `exec` in the sourced script
    assert await _ok(box, probe) == clean
    await box.kill_all()
    assert await _ok(box, probe) == clean


FORGE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
me = os.getpid()
for p in filter(str.isdigit, os.listdir("/proc")):
    if int(p) == me:
        continue
    try:
        pfd = os.pidfd_open(int(p))
    except OSError:
        continue
    for fd in range(0, 16):
        try:
            os.close(os.open(f"/proc/{p}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK))
            print("opened", p, fd)
        except OSError:
            pass
        got = libc.syscall(438, pfd, fd, 0)
        if got >= 0:
            print("pidfd_getfd", p, fd)
"""


async def test_no_process_of_the_agent_reaches_the_servers_fds(box: LocalSandbox) -> None:
    r = await box.exec("python3 -", input=FORGE, timeout=20)
    assert r.ok and r.stdout == "", r
    # report lines printed by the agent land in its own stream, not in the report pipe
    fake = "echo 'start ffff 1'; echo 'ffff 0'; echo 'ffff 0' >&2; exit 3"
    assert (await box.exec(fake, timeout=20)).exit_code == 3
    assert (await box.exec("exit 5", timeout=20)).exit_code == 5


async def test_no_host_fd_reaches_the_sandbox(box: LocalSandbox) -> None:
    # the agent's shell (a fork of pid 1) and a program it runs: 0, 1, 2 and nothing else
    shell = await _ok(box, "for fd in 3 4 5 6 7 8 9; do (: >&$fd) 2>/dev/null && echo $fd; done; :")
    assert shell == ""
    listed = await _ok(
        box, "python3 -c 'import os; print(sorted(map(int, os.listdir(\"/proc/self/fd\"))))'"
    )
    assert listed.strip() == "[0, 1, 2, 3]"  # 3: the listing's own
