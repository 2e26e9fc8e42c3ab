"""crucible's graders as a training reward: rows of a task set (as `dataset export` makes
them) carry their task, and GraderReward grades each response in that task's sandbox
through a real `crucible serve` (uvicorn on loopback, local bubblewrap sandboxes): the
right answer scores 1, a wrong one 0; a row without a task is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.answer_tasks import answer_task

from crucible.engine.request import RunRequest
from crucible.serve.server import ServeOptions, running_service
from crucible.train.dataset import TaskSetDataset
from crucible.train.reward import GraderReward, RewardError, Sample, as_args, score


@pytest.mark.slow
async def test_grader_reward_grades_responses_with_their_own_task(
    tmp_path: Path, buildah: None
) -> None:
    tasks = tmp_path / "tasks"
    answer_task(tasks, "add", "What is 2 + 3?", "5")
    [row] = TaskSetDataset(paths=[tasks]).rows()
    req = RunRequest(paths=[tasks], env="local", jobs_dir=tmp_path / "jobs", job_name="train",
                     concurrency=2, max_retries=0)  # fmt: skip
    async with running_service(req, ServeOptions(port=0)) as r:
        rm = GraderReward(r.url, r.token, wait_s=300)

        def sample(response: str, index: int) -> Sample:
            return Sample(prompt=row.text, response=response, label=row.label,
                          metadata=row.metadata, index=index)  # fmt: skip

        right = await score(rm, as_args(None), sample("5\n", 0))
        wrong = await score(rm, as_args(None), sample("7\n", 1))
    assert right == (1.0, {"unscorable": 0.0})
    assert wrong == (0.0, {"unscorable": 0.0})


async def test_grader_reward_refuses_a_row_without_a_task() -> None:
    rm = GraderReward("http://127.0.0.1:9", "t")
    with pytest.raises(RewardError, match="task_id and task_hash"):
        await rm(as_args(None), Sample(prompt="p", response="r"))
