"""The terminal agent's context: trims in large steps keep the prompt prefix stable, and each
trim (or summary) records what the model saw after it. Scripted server, real local sandbox."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.fake_openai import FakeOpenAI, Step, bash, submit, text
from tests.helpers.terminal_agent import agent_for

from crucible.agents.base import AgentContext
from crucible.agents.terminal.agent import TerminalAgent
from crucible.agents.terminal.rollout import SUMMARY_PROMPT
from crucible.records.trajectory import load_trajectory
from crucible.sandboxes.base import Sandbox
from crucible.tasks.models import Task


def windowed(server: FakeOpenAI, **kw: Any) -> TerminalAgent:
    return agent_for(server, context_window=6000, max_output_tokens=500, **kw)


def output_cmd(i: int) -> str:
    return f"head -c 1000 /dev/zero | tr '\\0' '{i % 10}'"


def is_prefix(a: list[Any], b: list[Any]) -> bool:
    return len(a) <= len(b) and b[: len(a)] == a


@pytest.mark.slow
async def test_sixty_turns_with_trimming_keep_a_stable_prefix_between_trims(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    fake_openai.push(*[bash(output_cmd(i)) for i in range(59)], submit())
    ctx = AgentContext(
        task=hello_task, sandbox=sandbox, logs_dir=tmp_path / "agent", timeout_sec=300.0
    )
    result = await windowed(fake_openai, max_turns=60).run(ctx)
    assert result.error is None and result.n_turns == 60
    sent = [r["messages"] for r in fake_openai.requests]
    breaks = [k for k in range(1, len(sent)) if not is_prefix(sent[k - 1], sent[k])]
    traj = load_trajectory(tmp_path / "agent")
    trims = [e for e in traj.events if e.kind == "context_trim"]
    # Between two trims every request extends the one before; each trim is one event.
    assert len(trims) == len(breaks) >= 2
    assert len(breaks) <= 10  # large steps: not one trim per turn (the old behaviour)
    for event, k in zip(trims, breaks, strict=True):
        assert event.messages == sent[k]  # the record says what the model saw after the trim
    assert all(sent[k][0] == sent[0][0] for k in range(len(sent)))  # the system prompt holds


async def test_summary_replaces_old_turns_in_one_recorded_call(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    turns = iter([*[bash(output_cmd(i)) for i in range(24)], submit()])
    summaries: list[dict[str, Any]] = []

    def answer(body: dict[str, Any]) -> Step:
        if body["messages"][0]["content"] == SUMMARY_PROMPT:
            summaries.append(body)
            return text("SUMMARY: printed blocks of digits; nothing else done.")
        return next(turns)

    steps: list[Callable[[dict[str, Any]], Step]] = [answer] * 40
    fake_openai.push(*steps)
    ctx = AgentContext(
        task=hello_task, sandbox=sandbox, logs_dir=tmp_path / "agent", timeout_sec=300.0
    )
    result = await windowed(fake_openai, context_strategy="summarize").run(ctx)
    assert result.error is None and result.n_turns == 25
    assert summaries and "tools" not in summaries[0]
    traj = load_trajectory(tmp_path / "agent")
    events = [e for e in traj.events if e.kind == "context_summary"]
    assert len(events) == len(summaries)
    after = events[0].messages
    assert after is not None and "SUMMARY: printed blocks" in after[1]["content"]
    # The next request is what the event says the model saw.
    k = next(i for i, r in enumerate(fake_openai.requests) if r["messages"] == after)
    assert fake_openai.requests[k - 1]["messages"][0]["content"] == SUMMARY_PROMPT
    assert json.dumps(traj.messages).count("0" * 1000) >= 1  # the record keeps it all
