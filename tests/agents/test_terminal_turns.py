"""The terminal agent's turn handling, limits, RL passthrough and shell state, against the
scripted server in real local (bubblewrap) sandboxes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.fake_openai import FakeOpenAI, Step, bash, submit, text, tool
from tests.helpers.terminal_agent import WRITE_HELLO, agent_for

from crucible.agents.base import AgentContext
from crucible.agents.terminal.agent import TerminalAgent
from crucible.agents.terminal.turns import NO_TOOL_CALL, TRUNCATED
from crucible.engine.spec import TrialPlan
from crucible.engine.trial import run_trial
from crucible.llm.client import ModelClient, ModelConfig
from crucible.llm.reply import ChatReply
from crucible.records.trajectory import TRAJECTORY_LOG, load_trajectory
from crucible.sandboxes.base import Sandbox
from crucible.sandboxes.local.provider import LocalProvider
from crucible.tasks.models import Task


def ctx_for(task: Task, sandbox: Sandbox, logs: Path) -> AgentContext:
    return AgentContext(task=task, sandbox=sandbox, logs_dir=logs, timeout_sec=120.0)


def recorded(outputs: list[str], then: Step) -> Callable[[dict[str, Any]], Step]:
    """A step that first keeps the latest message the model was shown."""

    def step(body: dict[str, Any]) -> Step:
        outputs.append(str(body["messages"][-1]["content"]))
        return then

    return step


def last(body: dict[str, Any]) -> dict[str, Any]:
    return dict(body["messages"][-1])


async def test_prose_truncated_and_broken_calls_are_nudged_then_submit(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    fake_openai.push(
        text("Let me look around first."),  # prose, no action
        bash("pwd"),
        tool("bash", '{"command": "printf aaaa', finish_reason="length"),  # cut at max_tokens
        text("I will now write the fi", finish_reason="length"),
        bash(WRITE_HELLO),
        tool("bash", "{not json"),  # the server's parser failed to extract the call
        submit(),
    )
    result = await agent_for(fake_openai).run(ctx_for(hello_task, sandbox, tmp_path / "agent"))
    assert result.error is None and result.n_turns == 7
    assert (await sandbox.read_file("/app/hello.txt")) == b"Hello, crucible!\n"
    sent = fake_openai.requests
    assert last(sent[1]) == {"role": "user", "content": NO_TOOL_CALL}
    assert last(sent[3])["role"] == "tool" and last(sent[3])["content"].startswith(TRUNCATED)
    assert last(sent[4]) == {"role": "user", "content": TRUNCATED}
    assert last(sent[6])["content"].startswith("error: the arguments are not a JSON object")
    traj = load_trajectory(tmp_path / "agent")
    assert traj.status == "submitted"
    assert [t.format_error for t in traj.turns] == [True, False, True, True, False, True, False]
    assert traj.turns[0].nudge == NO_TOOL_CALL and traj.turns[3].finish_reason == "length"


async def test_format_errors_in_a_row_end_a_graded_rollout(
    fake_openai: FakeOpenAI, hello_task: Task, tmp_path: Path
) -> None:
    fake_openai.push(bash(WRITE_HELLO), text("Done."), text("All done."), text("Finished."))
    result = await run_trial(
        TrialPlan(task=hello_task, attempt=0, job_id="job-fmt"),
        provider=LocalProvider(),
        agent=agent_for(fake_openai),
        job_dir=tmp_path / "job",
    )
    # The agent's failure, kept, and the work it did is still graded.
    assert result.outcome == "graded" and result.reward == 1.0
    ar = result.agent_result
    assert ar is not None and ar.error is not None and ar.error.type == "format_errors"
    assert ar.n_turns == 4 and len(fake_openai.requests) == 4
    traj = load_trajectory(tmp_path / "job" / "hello-file__0" / "agent")
    assert traj.status == "format_errors" and traj.error is not None


async def test_cost_and_token_limits_end_with_their_own_reasons(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 100}
    fake_openai.push(bash("true", usage=usage), bash("true", usage=usage))
    r1 = await agent_for(fake_openai, max_total_tokens=2000).run(
        ctx_for(hello_task, sandbox, tmp_path / "a")
    )
    assert r1.error is not None and r1.error.type == "token_limit" and r1.n_turns == 2
    fake_openai.push(bash("true", usage=usage), bash("true"))
    r2 = await agent_for(fake_openai, max_cost_usd=0.001).run(
        ctx_for(hello_task, sandbox, tmp_path / "b")
    )
    assert r2.error is not None and r2.error.type == "cost_limit" and r2.n_turns == 1
    assert load_trajectory(tmp_path / "b").status == "cost_limit"
    with pytest.raises(ValueError, match="needs a price"):
        agent_for(fake_openai, model="no-such-model", max_cost_usd=1.0)


class TrainerClient:
    """A trainer's own client (llm.reply.ChatClient): here it wraps ModelClient and counts."""

    def __init__(self, url: str) -> None:
        self.inner = ModelClient(
            ModelConfig(model="policy", base_url=url, api_key_env=None, collect_tokens=True)
        )
        self.n_calls = self.n_retries = 0
        self.seen: list[int] = []

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> ChatReply:
        self.seen.append(len(messages))
        self.n_calls += 1
        return await self.inner.chat(messages, tools)

    async def aclose(self) -> None:
        await self.inner.aclose()


def rl_step(i: int, then: Step) -> Step:
    """A reply carrying what vLLM sends for training, with a non-ASCII token in it."""
    then.choice_extra = {
        "token_ids": [151644 + i, 8948, 198],
        "logprobs": {
            "content": [
                {"token": "é", "logprob": -0.0001234, "bytes": [195, 169], "top_logprobs": []},
                {"token": "token_id:198", "logprob": -1.5e-07, "bytes": None, "top_logprobs": []},
            ]
        },
    }
    then.reply_extra = {"prompt_token_ids": list(range(i, i + 40))}
    then.message_extra = {"reasoning_content": f"thinking {i}…"}
    return then


async def test_token_collection_stores_what_the_server_sent(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    fake_openai.push(rl_step(0, bash(WRITE_HELLO)), rl_step(1, submit()))
    agent = agent_for(
        fake_openai,
        collect_tokens="true",  # as --agent-kwarg gives it
        top_p="0.9",
        seed="7",
        stop='["</answer>"]',
        extra_body='{"return_tokens_as_token_ids": true, "skip_special_tokens": false}',
    )
    result = await agent.run(ctx_for(hello_task, sandbox, tmp_path / "agent"))
    assert result.error is None
    body = fake_openai.requests[0]
    assert body["logprobs"] is True and body["return_token_ids"] is True
    assert body["top_p"] == 0.9 and body["seed"] == 7 and body["stop"] == ["</answer>"]
    assert body["return_tokens_as_token_ids"] is True and body["skip_special_tokens"] is False
    traj = load_trajectory(tmp_path / "agent")
    raw_log = (tmp_path / "agent" / TRAJECTORY_LOG).read_text()
    for turn, sent_text in zip(traj.turns, fake_openai.responses, strict=True):
        sent = json.loads(sent_text)
        choice = sent["choices"][0]
        expected = {
            "prompt_token_ids": sent["prompt_token_ids"],
            "token_ids": choice["token_ids"],
            "logprobs": choice["logprobs"],
        }
        assert turn.metrics == expected
        for key, value in expected.items():  # byte for byte: the server's own serialisation
            assert json.dumps(turn.metrics[key]) == json.dumps(value)
            assert f'"{key}": {json.dumps(value)}' in sent_text
            assert json.dumps(value) in raw_log
        assert turn.reasoning_content == choice["message"]["reasoning_content"]
    # reasoning is kept in the record but not sent back to the server
    assert "reasoning_content" not in json.dumps(fake_openai.requests[1]["messages"])
    assert traj.messages[2]["reasoning_content"] == "thinking 0…"

    # Injected: the trainer's client drives the agent; no endpoint of the agent's own.
    fake_openai.push(rl_step(2, submit()))
    trainer = TrainerClient(fake_openai.url)
    injected = TerminalAgent(model="policy", client=trainer)
    assert injected.model_endpoint() is None
    r2 = await injected.run(ctx_for(hello_task, sandbox, tmp_path / "b"))
    assert r2.error is None and trainer.seen == [2] and r2.metadata["model_calls"] == 1
    assert load_trajectory(tmp_path / "b").turns[0].metrics["token_ids"] == [151646, 8948, 198]
    await trainer.aclose()


async def test_cd_and_exports_persist_and_environment_is_stated(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    outputs: list[str] = []
    fake_openai.push(
        bash("mkdir -p /tmp/w/sub && cd /tmp/w/sub && export GREETING='hi there' && exit 4"),
        recorded(outputs, bash('pwd; echo "$GREETING"; echo "$PAGER $DEBIAN_FRONTEND"')),
        recorded(outputs, submit()),
    )
    result = await agent_for(fake_openai).run(ctx_for(hello_task, sandbox, tmp_path / "agent"))
    assert result.error is None
    assert outputs[0] == "[exit code 4]"  # the command's own exit code, through the EXIT trap
    assert outputs[1] == "[exit code 0]\n/tmp/w/sub\nhi there\ncat noninteractive\n"
    system = fake_openai.requests[0]["messages"][0]["content"]
    assert "NO network access" in system and "working directory /app" in system
    assert "in the background" in system and "carry over" in system


async def test_attack_a_hostile_state_file_is_data_never_code(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    # The model rewrites the shell's state files with shell code and stops the EXIT trap
    # from repairing them. Sourcing state (the obvious design) would run it next call.
    hostile = "trap - EXIT; for f in /tmp/.crucible-shell-*; do printf '%s\\n' 'touch /tmp/pwned; exit 9' > $f; done"
    shown: list[str] = []
    fake_openai.push(
        bash("cd /tmp && export A=1"),
        bash(hostile),
        recorded(shown, bash("ls /tmp/pwned 2>&1; echo next")),
        recorded(shown, submit()),
    )
    result = await agent_for(fake_openai).run(ctx_for(hello_task, sandbox, tmp_path / "agent"))
    assert result.error is None
    assert shown[1].startswith("[exit code 0]\n") and "No such file" in shown[1]
    assert shown[1].endswith("next\n")
