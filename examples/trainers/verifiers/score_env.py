"""verifiers 0.4 (prime-rl): an environment over crucible tasks whose reward is the service.

    crucible serve examples/tasks/hello-file --env local     # prints URL and token
    export CRUCIBLE_SERVE_URL=... CRUCIBLE_SERVE_TOKEN=...
    PYTHONPATH=examples/trainers/verifiers python examples/trainers/verifiers/score_env.py

With prime-rl or `vf-eval`, name the module beside this file as the taskset:

    --env.taskset.id crucible_tasks --env.taskset.tasks '["examples/tasks/hello-file"]' \
    --env.taskset.task.submission files

This script loads that environment with verifiers' own loader and scores two replies per
task with verifiers' own `Task.score`. An unscorable grade raises vf.SandboxError: the
reward stays None and the rollout is an infrastructure error, never a 0.
"""

from __future__ import annotations

import asyncio
import json

import verifiers.v1 as vf


def trace_of(task: vf.Task, reply: str) -> vf.Trace:
    seed = vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash)
    trace = vf.Trace(task=seed, agent=vf.AgentInfo(config=vf.AgentConfig(), name="example"))
    trace.nodes.append(vf.MessageNode(message=vf.UserMessage(content=task.data.prompt_text)))
    trace.nodes.append(
        vf.MessageNode(parent=0, message=vf.AssistantMessage(content=reply), sampled=True)
    )
    return trace


async def main() -> None:
    cfg = vf.resolve_env_config({"taskset": {"id": "crucible_tasks",
                                             "tasks": ["examples/tasks/hello-file"],
                                             "task": {"submission": "files"}}})  # fmt: skip
    env = vf.load_environment(cfg)
    for task in env.taskset:
        for reply in (json.dumps({"/app/hello.txt": "Hello, crucible!\n"}), "{}"):
            trace = trace_of(task, reply)
            await task.score(trace)
            print(task.data.name, repr(reply[:30]), "reward:", trace.reward, trace.metrics)


if __name__ == "__main__":
    asyncio.run(main())
