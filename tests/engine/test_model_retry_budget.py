"""A model endpoint that answers HTTP 500 costs a trial one series of retries, not one
per trial try: the client's HTTP retries inside a try and the job's retries of a
model_failed trial draw from one budget (records/live.py), and while a retry waits the
trial says so ("retrying (model HTTP 500, 2/3)") for the progress line."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.helpers.fake_openai import FakeOpenAI, fake_openai
from tests.helpers.wait import await_until

from crucible.agents.terminal.agent import TerminalAgent
from crucible.engine.job import JobOptions, JobRunner
from crucible.engine.plan import make_job_config
from crucible.sandboxes.simulated import SimulatedProvider
from crucible.tasks.dataset import discover_tasks
from crucible.tasks.scaffold import scaffold_task

__all__ = ["fake_openai"]  # the fixture


async def test_http_500_retries_share_one_budget_and_show_on_the_trial(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.fail_always = 500
    scaffold_task("t0", tmp_path / "tasks")
    tasks, invalid = discover_tasks([tmp_path / "tasks"])
    assert not invalid
    cfg = make_job_config(job_id="j", tasks=tasks, agent="terminal", env="simulated",
                          attempts=1, concurrency=1, dataset=[str(tmp_path / "tasks")])  # fmt: skip
    agent = TerminalAgent(model="m", model_base_url=fake_openai.url, max_retries=2,
                          model_api_key_env="CRUCIBLE_TEST_ABSENT_KEY")  # fmt: skip
    options = JobOptions(max_retries=2, retry_base_sec=0.001, retry_cap_sec=0.01)
    runner = JobRunner(cfg, tasks, SimulatedProvider(), agent, tmp_path / "jobs", options)
    job = asyncio.ensure_future(runner.run())
    seen: list[str] = []

    def notes() -> bool:
        for t in runner.live.values():
            if t.budget.note and t.budget.note not in seen:
                seen.append(t.budget.note)
        return "retrying (model HTTP 500, 3/3)" in seen or job.done()

    await await_until(notes, "the trial to say it retries its model call")
    summary = await job
    assert seen[:2] == ["retrying (model HTTP 500, 2/3)", "retrying (model HTTP 500, 3/3)"]
    assert summary.outcomes == {"model_failed": 1}
    (result,) = runner.results.values()
    assert result.retries == 0  # the budget was spent: the job did not try again
    assert len(fake_openai.requests) == 3  # one series of 3 attempts, not 3 per try
    assert result.error is not None and "HTTP 500" in result.error.message
