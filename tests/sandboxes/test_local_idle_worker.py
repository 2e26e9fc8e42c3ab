"""kill_all spares pid 1's worker when nothing else is left (sandboxes/local/idle.py),
and only then: an agent process left behind, one that passes for the worker, or a
worker the agent changed, is swept as ever, and nothing of the agent's survives."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
from tests.helpers.wait import await_until

from crucible.sandboxes import proc
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.local import idle
from crucible.sandboxes.local.provider import LocalProvider, LocalSandbox


@pytest.fixture
async def box() -> AsyncIterator[LocalSandbox]:
    p = LocalProvider()
    await p.preflight()
    sb = await p.create(
        SandboxSpec(job_id=f"test-idle-{uuid.uuid4().hex[:8]}", memory_mb=256, pids_limit=128)
    )
    assert isinstance(sb, LocalSandbox)
    try:
        yield sb
    finally:
        await sb.close()
        await p.aclose()


def _pipe(sb: LocalSandbox) -> os.stat_result:
    return os.fstat(sb._in_fd)


def _spares(sb: LocalSandbox, candidates: list[int]) -> bool:
    return idle.spare_worker(candidates, sb.init_pid, _pipe(sb), sb._inherited)


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


async def test_an_idle_worker_is_spared(box: LocalSandbox) -> None:
    before = await _worker(box)
    assert (await box.exec("echo hi > /tmp/x; sh -c true", timeout=10)).ok
    await _wrapper_gone(box)
    await box.kill_all()
    assert await _worker(box) == before  # no new worker: the same one, untouched


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
    assert not _spares(box, box._candidates())
    await box.kill_all()
    assert _only_workers_left(box)
    assert (await box.exec("echo alive", timeout=10)).stdout == "alive\n"


async def test_a_process_that_passes_for_the_worker_is_not_spared(box: LocalSandbox) -> None:
    # pid 1's child, running the worker's own unreadable shell, not dumpable: only
    # the request pipe tells it apart, so it alone (the worker aside) is never spared
    w = await _worker(box)
    r = await box.exec("(/.crucible/sh -c 'sleep 300; :' </dev/null >/dev/null 2>&1 &)", timeout=10)
    assert r.ok

    def fake() -> int | None:
        found = [
            p
            for p in box._candidates()
            if p not in (box.init_pid, w) and proc.ppid_of(p) == box.init_pid
        ]
        return found[0] if found else None

    impostor = await await_until(fake, "the impostor to be pid 1's")
    assert not _is_worker(box, impostor)
    assert not _spares(box, [box.init_pid, impostor])
    await box.kill_all()
    assert proc.state_of(impostor) in (None, "Z")


TAMPER = {
    "rlimit": "prlimit --pid $W --nofile=64:64",
    "nice": "renice -n 5 -p $W",
    "policy": 'python3 -c "import os; os.sched_setscheduler($W, os.SCHED_IDLE, os.sched_param(0))"',
    "affinity": "taskset -p 1 $W",
    "ioprio": "ionice -c 3 -p $W",
    "stop": "kill -STOP $W",
}


@pytest.mark.parametrize("how", sorted(TAMPER))
async def test_a_worker_the_agent_changed_is_replaced(box: LocalSandbox, how: str) -> None:
    if how == "affinity" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no affinity to change")
    before = await _worker(box)
    r = await box.exec(f"W={_nspid(before)}; {TAMPER[how]}", timeout=10)
    assert r.ok, r
    await _wrapper_gone(box)
    assert not _spares(box, box._candidates())
    await box.kill_all()
    after = await _worker(box)
    assert after != before and proc.state_of(before) in (None, "Z")
    # the new worker is pid 1's, as a new one is: what runs next has none of it
    assert (await box.exec("ulimit -n", timeout=10)).stdout != "64\n"
    await _wrapper_gone(box)
    assert _spares(box, box._candidates())


async def test_pid1_changed_by_the_agent_leaves_the_spared_worker_as_it_started(
    box: LocalSandbox,
) -> None:
    # pid 1's rlimits are the agent's to change (same uid): a worker pid 1 starts next
    # has them, the one spared is compared with pid 1 as it was before any exec
    before = await _worker(box)
    assert (await box.exec("prlimit --pid 1 --nofile=64:64", timeout=10)).ok
    await _wrapper_gone(box)
    await box.kill_all()
    assert await _worker(box) == before
    assert (await box.exec("ulimit -n", timeout=10)).stdout != "64\n"
