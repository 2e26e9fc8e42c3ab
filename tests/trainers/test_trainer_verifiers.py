"""A verifiers 0.4 environment over crucible tasks, scored by a real `crucible serve`.

The environment is loaded by verifiers' own loader (`vf.resolve_env_config`,
`vf.load_environment`, a taskset id naming a module that exports the taskset), and
each rollout's trace is scored by verifiers' own `Task.score`, which awaits the task's
`@vf.reward` methods: the service is the rubric.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import verifiers.v1 as vf
from tests.trainers.conftest import HELLO, RIGHT_FILES, WRONG_FILES, Service

from crucible.trainers.verifiers import CrucibleTask, CrucibleTaskset, CrucibleTasksetConfig


@pytest.fixture
def env_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The two-line module a run names as its taskset id (docs/trainers.md)."""
    name = f"crucible_tasks_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        'from crucible.trainers.verifiers import CrucibleTaskset\n__all__ = ["CrucibleTaskset"]\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _env(module: str, service: Service, **task: Any) -> vf.Env:
    tasks = [str(p) for p in service.tasks.values()]
    cfg = vf.resolve_env_config(
        {"taskset": {"id": module, "tasks": tasks, "task": {"submission": "files", **task}}}
    )
    return vf.load_environment(cfg)


def _trace(task: CrucibleTask, reply: str) -> vf.Trace:
    """A finished rollout's trace: the prompt, then the policy's sampled reply."""
    seed = vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash)
    trace = vf.Trace(
        task=seed,
        agent=vf.AgentInfo(config=vf.AgentConfig(), name="test", trainable=True),
    )
    trace.nodes.append(vf.MessageNode(message=vf.UserMessage(content=task.data.prompt_text)))
    trace.nodes.append(
        vf.MessageNode(parent=0, message=vf.AssistantMessage(content=reply), sampled=True)
    )
    return trace


def _tasks(env: vf.Env) -> dict[str, CrucibleTask]:
    assert isinstance(env.taskset, CrucibleTaskset)
    return {t.data.task_id: t for t in env.taskset}


def test_the_reward_is_what_verifiers_discovers(env_module: str, service: Service) -> None:
    tasks = _tasks(_env(env_module, service))
    assert set(tasks) == {"hello-file", "broken-build"}
    hello = tasks["hello-file"]
    assert [fn.__name__ for fn in hello.hooks("reward")] == ["crucible"]
    assert hello.data.prompt == (service.tasks["hello-file"] / "instruction.md").read_text()
    assert hello.data.task_hash and len(hello.data.task_hash) == 64


async def test_rubric_scores_through_the_service(env_module: str, served: Service) -> None:
    tasks = _tasks(_env(env_module, served))
    right, wrong, junk = (_trace(tasks["hello-file"], r)
                          for r in (RIGHT_FILES, WRONG_FILES, "no files"))  # fmt: skip
    for trace in (right, wrong, junk):
        await tasks["hello-file"].score(trace)
    assert right.rewards["crucible"] is not None and right.reward == 1.0
    assert wrong.rewards["crucible"] is not None and wrong.reward == 0.0
    assert junk.reward == 0.0 and junk.metrics["crucible_invalid"] == 1.0
    assert right.info["crucible"]["status"] == "ok" and right.info["crucible"]["trial"]


async def test_unscorable_is_an_infra_error_not_a_zero(env_module: str, served: Service) -> None:
    tasks = _tasks(_env(env_module, served))
    trace = _trace(tasks["broken-build"], RIGHT_FILES)
    with pytest.raises(vf.SandboxError, match="unscorable"):
        await tasks["broken-build"].score(trace)
    assert trace.rewards["crucible"] is None  # verifiers' "scoring didn't run"
    assert trace.info["crucible"]["status"] == "unscorable"


async def test_a_changed_task_is_refused(env_module: str, served: Service) -> None:
    """The task hash rides along: a task edited since the taskset loaded is a 409."""
    hello = _tasks(_env(env_module, served))["hello-file"]
    stale = hello.with_data(task_hash="0" * 64)
    with pytest.raises(vf.TaskError, match="409"):
        await stale.score(_trace(stale, RIGHT_FILES))


def test_an_invalid_task_is_never_skipped(tmp_path: Path) -> None:
    bad = tmp_path / "bad-task"
    bad.mkdir()
    (bad / "task.toml").write_text("not = [toml")
    taskset = CrucibleTaskset(CrucibleTasksetConfig(tasks=[HELLO, bad]))
    with pytest.raises(ValueError, match="invalid crucible tasks"):
        list(taskset)
