"""Sandboxes closed behind a job's trials (engine/teardown.py): a trial's record and its
place in the job's concurrency do not wait for its sandbox's close, the closes pending
at once are bounded, and the job reports only once every sandbox is closed, cancelled
or not."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from tests.helpers.wait import await_until

from crucible.agents.oracle import OracleAgent
from crucible.engine.job import JobOptions, JobRunner
from crucible.engine.plan import make_job_config
from crucible.engine.teardown import Teardown
from crucible.sandboxes.base import Sandbox, SandboxSpec
from crucible.sandboxes.simulated import SimulatedProvider, SimulatedSandbox
from crucible.tasks.dataset import discover_tasks
from crucible.tasks.scaffold import scaffold_task


class SlowClose(SimulatedProvider):
    """Closes wait until the test lets them go; the provider counts what is pending."""

    def __init__(self) -> None:
        super().__init__()
        self.let_go = asyncio.Event()
        self.closing = 0
        self.most_closing = 0
        self.opened: list[SimulatedSandbox] = []

    async def create(self, spec: SandboxSpec) -> Sandbox:
        sb = await super().create(spec)
        assert isinstance(sb, SimulatedSandbox)
        self.opened.append(sb)
        provider, close = self, sb.close

        async def slow_close() -> None:
            provider.closing += 1
            provider.most_closing = max(provider.most_closing, provider.closing)
            try:
                await provider.let_go.wait()
                await close()
            finally:
                provider.closing -= 1

        sb.close = slow_close  # type: ignore[method-assign]
        return sb


def _runner(tmp_path: Path, provider: SlowClose, attempts: int, concurrency: int) -> JobRunner:
    scaffold_task("t", tmp_path / "tasks")
    tasks, invalid = discover_tasks([tmp_path / "tasks"])
    assert not invalid
    cfg = make_job_config(job_id="j", tasks=tasks, agent="oracle", env="simulated",
                          attempts=attempts, concurrency=concurrency, dataset=[])  # fmt: skip
    return JobRunner(cfg, tasks, provider, OracleAgent(), tmp_path / "jobs", JobOptions())


def _recorded(tmp_path: Path) -> int:
    return len(list((tmp_path / "jobs" / "j").glob("*/result.json")))


async def test_records_come_before_the_closes_and_the_job_waits_for_every_close(
    tmp_path: Path,
) -> None:
    provider = SlowClose()
    runner = _runner(tmp_path, provider, attempts=2, concurrency=2)
    job = asyncio.create_task(runner.run())
    # Both trials are recorded while neither sandbox has closed yet ...
    await await_until(lambda: _recorded(tmp_path) == 2, "both trials recorded")
    await await_until(lambda: provider.closing == 2, "both closes pending")
    assert not job.done() and not any(sb.closed for sb in provider.opened)
    # ... and the job reports only once they have.
    provider.let_go.set()
    summary = await job
    assert summary.outcomes == {"graded": 2} and summary.mean_reward == 1.0
    assert all(sb.closed for sb in provider.opened) and provider.live == 0
    status = json.loads((tmp_path / "jobs" / "j" / "result.json").read_text())["status"]
    assert status == "completed"


async def test_pending_closes_are_bounded_by_the_concurrency(tmp_path: Path) -> None:
    provider = SlowClose()
    runner = _runner(tmp_path, provider, attempts=6, concurrency=2)
    job = asyncio.create_task(runner.run())
    # Two closes pending hold the next trials back: no third sandbox is closing.
    await await_until(lambda: provider.closing == 2, "two closes pending")
    await await_until(lambda: _recorded(tmp_path) >= 2, "two trials recorded")
    assert provider.most_closing == 2 and _recorded(tmp_path) < 6
    provider.let_go.set()
    summary = await job
    assert summary.outcomes == {"graded": 6}
    assert provider.most_closing <= 2 and all(sb.closed for sb in provider.opened)


async def test_a_cancelled_wait_still_closes_and_drain_outlasts_a_cancel() -> None:
    provider = SlowClose()
    sandboxes = [await provider.create(SandboxSpec(job_id="j")) for _ in range(2)]
    teardown = Teardown(limit=1)
    await teardown.close(sandboxes[0])
    waiting = asyncio.create_task(teardown.close(sandboxes[1]))  # waits for the first
    await await_until(lambda: provider.closing == 1, "the first close pending")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert teardown.pending == 2  # cancelled while waiting: its close started anyway
    await await_until(lambda: provider.closing == 2, "both closes pending")
    started = asyncio.Event()

    async def drain_it() -> None:
        started.set()
        await teardown.drain()

    drain = asyncio.create_task(drain_it())
    await started.wait()  # the drain is waiting on the closes now
    drain.cancel()  # the job itself cancelled: the drain still sees the closes through
    provider.let_go.set()
    with pytest.raises(asyncio.CancelledError):
        await drain
    assert teardown.pending == 0 and provider.live == 0
