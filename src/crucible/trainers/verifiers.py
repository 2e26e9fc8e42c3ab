"""A verifiers 0.4 (prime-rl) taskset whose reward is a running `crucible serve`.

In verifiers 0.4 (`verifiers.v1`) an environment is a `Taskset` of `Task`s played by a
harness; a task is scored by its `@vf.reward` methods, which `Task.score(trace,
runtime)` awaits (verifiers/v1/task.py), each called with the parameters it names
(`task`, `trace`). So the rubric here is one async reward, `crucible`, that sends the
trace's final reply to the service as the task's submission.

An `unscorable` grade (or one still pending at `wait_s`) raises `vf.SandboxError`: the
reward stays None ("scoring didn't run") and the rollout records an infrastructure
error, which verifiers and prime-rl leave out of training; it is never a 0. `invalid`
and `ok` are rewards. `crucible_ok`/`crucible_invalid` and the trial go in the trace.

verifiers finds a taskset by id, importing a module of that name that exports one
`Taskset` subclass in `__all__` (verifiers/v1/utils/loaders.py `_import_plugin`;
a dotted id does not resolve there). So a run names a module of its own, two lines:

    # crucible_tasks.py
    from crucible.trainers.verifiers import CrucibleTaskset
    __all__ = ["CrucibleTaskset"]

and `--env.taskset.id crucible_tasks --env.taskset.tasks '["examples/tasks"]'`.
The tasks are crucible task folders (or folders of them), loaded and checked by crucible;
each becomes one verifiers task with the instruction as its prompt and the task's name
and digest as the grade's task reference.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import verifiers.v1 as vf
from pydantic import Field

from crucible.records.serve import GradeStatus, TaskRef
from crucible.tasks.dataset import check_tasks
from crucible.trainers.client import DEFAULT_WAIT_S
from crucible.trainers.common import async_client, grade_async, prepare

__all__ = [
    "CrucibleTask",
    "CrucibleTaskConfig",
    "CrucibleTaskData",
    "CrucibleTaskset",
    "CrucibleTasksetConfig",
]


class CrucibleTaskData(vf.TaskData):
    task_id: str
    """The crucible task's name (what the service grades)."""
    task_hash: str | None = None
    """Its digest: the service refuses a grade against a changed task (409)."""


class CrucibleTaskConfig(vf.TaskConfig):
    url: str | None = None
    """The service's URL; else CRUCIBLE_SERVE_URL. The token: CRUCIBLE_SERVE_TOKEN(_FILE)."""
    submission: Literal["text", "files", "patch"] = "text"
    """How the final reply becomes a submission (crucible.trainers.common)."""
    wait_s: float = Field(DEFAULT_WAIT_S, gt=0)
    salt: str = ""
    """Mixed into grade ids: a new salt grades the same reply afresh."""


class CrucibleTask(vf.Task[CrucibleTaskData, vf.State, CrucibleTaskConfig]):
    @vf.reward
    async def crucible(self, task: CrucibleTaskData, trace: vf.Trace) -> float:
        """The service's reward for the trace's final reply."""
        ref = TaskRef(id=task.task_id, hash=task.task_hash)
        cfg = self.config
        item = prepare(ref, trace.last_reply, cfg.submission, cfg.salt, {"trainer": "verifiers"})
        result = (await grade_async(async_client(cfg.url), [item], cfg.wait_s))[0]
        trace.info["crucible"] = {"id": result.id, "status": result.status.value,
                                  "trial": result.trial, "error": result.error}  # fmt: skip
        if result.status in (GradeStatus.unscorable, GradeStatus.pending) or result.reward is None:
            raise vf.SandboxError(f"crucible: {result.status.value}: {result.error or ''}"[:500])
        trace.record_metric("crucible_invalid", float(result.status == GradeStatus.invalid))
        return float(result.reward)


class CrucibleTasksetConfig(vf.TasksetConfig):
    tasks: list[Path] = Field(default_factory=list)
    """crucible task folders, or folders holding them."""
    include: list[str] = Field(default_factory=list)
    """Task-name globs to keep (as `crucible run --include`)."""
    exclude: list[str] = Field(default_factory=list)
    task: CrucibleTaskConfig = CrucibleTaskConfig()


class CrucibleTaskset(vf.Taskset[CrucibleTask, CrucibleTasksetConfig]):
    def load(self) -> Iterator[CrucibleTask]:
        cfg = self.config
        if not cfg.tasks:
            raise ValueError("no crucible tasks: set --env.taskset.tasks")
        checks = check_tasks(cfg.tasks, include=cfg.include, exclude=cfg.exclude)
        bad = [c for c in checks if not (c.valid and c.task is not None)]
        if bad:  # never skipped silently
            why = "; ".join(f"{c.path}: {c.problems[0] if c.problems else 'invalid'}" for c in bad)
            raise ValueError(f"invalid crucible tasks: {why}"[:2000])
        for check in checks:
            t = check.task
            assert t is not None
            if not t.instruction:
                raise ValueError(f"{t.name}: a multi-step task has no single prompt")
            data = CrucibleTaskData(id=t.name, name=t.name, prompt=t.instruction,
                                    task_id=t.name, task_hash=t.digest)  # fmt: skip
            yield CrucibleTask(data, cfg.task)
