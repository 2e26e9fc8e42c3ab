"""Warm pools (serve/pool.py) on real bubblewrap sandboxes: a pooled sandbox is handed out
once, as fresh as a new one, found by a cleanup of its job, closed at shutdown; a session
through the pool is graded as any other."""

from __future__ import annotations

import secrets
from pathlib import Path

from tests.helpers.session_server import session_server
from tests.helpers.wait import await_until, wait_until
from tests.serve.test_sessions import session_task

from crucible.records.serve import GradeStatus
from crucible.sandboxes.base import Sandbox, SandboxSpec
from crucible.sandboxes.local.provider import LocalProvider
from crucible.serve.pool import PooledProvider, pool_key
from crucible.trainers.client import ServiceClient


def test_the_key_ignores_only_the_trial_id() -> None:
    spec = SandboxSpec(job_id="j", trial_id="a", memory_mb=512)
    assert pool_key(spec) == pool_key(spec.model_copy(update={"trial_id": "b"}))
    for change in ({"job_id": "k"}, {"memory_mb": 1024}, {"network": "public"},
                   {"env": {"A": "1"}}, {"host_env": {"B": "2"}}, {"task_name": "t"}):  # fmt: skip
        assert pool_key(spec) != pool_key(spec.model_copy(update=change)), change


async def test_a_pooled_sandbox_is_handed_out_once_and_fresh() -> None:
    job = f"pool-{secrets.token_hex(4)}"
    pool = PooledProvider(LocalProvider(userland="host"), 2)
    await pool.preflight()
    spec = SandboxSpec(job_id=job, trial_id="t", network="none")
    held: list[Sandbox] = []
    try:
        pool.warm(spec)
        await await_until(lambda: pool.ready(spec) == 2, "the pool to fill")
        waiting = {b.spec.trial_id for q in pool._ready.values() for b in q}
        assert len(waiting) == 2 and all(
            t.startswith("warm-pool-") for t in waiting
        )  # each its own
        for i in range(6):
            box = await pool.create(spec.model_copy(update={"trial_id": f"t{i}"}))
            assert all(box is not other for other in held)  # never one handed out before
            assert box.spec.trial_id == f"t{i}"
            # fresh: nothing an earlier holder wrote, and it answers
            got = await box.exec("ls /tmp /app; echo $$", timeout=30)
            assert got.ok and got.stdout.split()[-1].isdigit() and "mark" not in got.stdout
            await box.exec("touch /tmp/mark /app/mark", timeout=30)
            held.append(box)
            if i % 2:  # a closed one never comes back
                await box.close()
            if i == 2:
                await await_until(lambda: pool.ready(spec) == 2, "the pool to refill")
        assert pool.hits >= 4 and pool.hits + pool.misses == 6
        await await_until(lambda: pool.ready(spec) == 2, "the pool to refill")
        # A cleanup of the job (after a crash: another provider) finds the pooled ones too.
        other = LocalProvider(userland="host")
        found = await other.cleanup(job)
        assert found >= 2 + 3  # the two pooled, the three still held
    finally:
        for box in held:
            await box.close()
        await pool.aclose()
    assert not pool.inner._live  # type: ignore[attr-defined]  # the pooled ones are closed


async def test_aclose_closes_the_pooled_sandboxes() -> None:
    job = f"pool-{secrets.token_hex(4)}"
    inner = LocalProvider(userland="host")
    pool = PooledProvider(inner, 3)
    await pool.preflight()
    spec = SandboxSpec(job_id=job, network="none")
    try:
        pool.warm(spec)
        await await_until(lambda: pool.ready(spec) == 3, "the pool to fill")
        assert len(inner._live) == 3
    finally:
        await pool.aclose()
        await inner.cleanup(job)
    assert not inner._live and pool.ready(spec) == 0


def test_sessions_through_the_pool(tmp_path: Path) -> None:
    task = session_task(tmp_path)
    pool = PooledProvider(LocalProvider(userland="host"), 1)
    with session_server(tmp_path, [task], provider=pool) as srv, \
            ServiceClient(srv.url, srv.token) as c:  # fmt: skip
        (spec,) = srv.manager.specs()
        srv.call(pool.prepare([spec]))
        for answer, reward in (("Hello, crucible!\n", 1.0), ("nope\n", 0.0)):
            wait_until(lambda: pool.ready(spec) == 1, "the pool to fill")
            s = c.open_session("hello")
            assert c.exec(s.id, "ls -A /app").stdout == ""
            c.upload(s.id, "hello.txt", answer)
            r = c.grade_session(s.id)
            assert r.status == GradeStatus.ok and r.reward == reward
        assert pool.hits == 2 and pool.misses == 0


async def test_a_grade_through_the_pool(tmp_path: Path) -> None:
    # What the grade endpoint runs: a submission as the agent's work, a trial in the job.
    from crucible.agents.submission import SubmissionAgent
    from crucible.engine.spec import TrialPlan, build_spec
    from crucible.engine.trial import run_trial
    from crucible.records.submission import FilesSubmission

    task = session_task(tmp_path)
    job = f"pool-grade-{secrets.token_hex(4)}"
    pool = PooledProvider(LocalProvider(userland="host"), 1)
    await pool.preflight()
    try:
        for attempt, text in enumerate(("Hello, crucible!\n", "no\n")):
            agent = SubmissionAgent(FilesSubmission(files={"/app/hello.txt": text}))
            plan = TrialPlan(task=task, attempt=attempt, job_id=job)
            spec = build_spec(plan, agent)
            await pool.prepare([spec])
            await await_until(lambda s=spec: pool.ready(s) == 1, "the pool to fill")
            r = await run_trial(plan, provider=pool, agent=agent, job_dir=tmp_path / "job")
            assert r.graded and r.reward == (1.0 if attempt == 0 else 0.0)
        assert pool.hits == 2
    finally:
        await pool.aclose()
        await pool.cleanup(job)
