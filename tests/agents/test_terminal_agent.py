"""The terminal agent against the scripted server, in real local (bubblewrap) sandboxes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.fake_openai import FakeOpenAI, Step, bash, submit, text, tool
from tests.helpers.terminal_agent import WRITE_HELLO, agent_for

from crucible.agents.base import AgentContext
from crucible.agents.registry import get_agent
from crucible.agents.terminal.agent import TerminalAgent
from crucible.agents.terminal.tools import ELIDED
from crucible.docs.index import build_index
from crucible.engine.spec import TrialPlan
from crucible.engine.trial import run_trial
from crucible.errors import ModelFailed
from crucible.llm.pricing import cost_usd
from crucible.records.trajectory import load_trajectory
from crucible.sandboxes.base import Sandbox
from crucible.sandboxes.local.provider import LocalProvider
from crucible.tasks.models import Task


def traj_of(agent_dir: Path) -> dict[str, Any]:
    """The trajectory record of an agent/ folder, as JSON (read from its append-only log)."""
    return load_trajectory(agent_dir).model_dump(mode="json")


def ctx_for(task: Task, sandbox: Sandbox, tmp_path: Path, timeout: float = 60.0) -> AgentContext:
    return AgentContext(
        task=task, sandbox=sandbox, logs_dir=tmp_path / "agent", timeout_sec=timeout
    )


def last_tool_output(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


def expect(check: Callable[[dict[str, Any]], None], then: Step) -> Callable[[dict[str, Any]], Step]:
    """A step that first asserts on the request (what the model was shown)."""

    def step(body: dict[str, Any]) -> Step:
        check(body)
        return then

    return step


async def test_solves_hello_file_in_a_real_trial(
    fake_openai: FakeOpenAI, hello_task: Task, tmp_path: Path
) -> None:
    seen: list[str] = []
    fake_openai.push(
        Step(
            content="Let me look.",
            tool_calls=[{"name": "bash", "arguments": {"command": "pwd; ls -la"}}],
            cached_tokens=0,
        ),
        expect(lambda b: seen.append(last_tool_output(b)), bash(WRITE_HELLO, cached_tokens=64)),
        expect(
            lambda b: seen.append(last_tool_output(b)),
            bash("cat /app/hello.txt; echo oops >&2; exit 3"),
        ),
        expect(lambda b: seen.append(last_tool_output(b)), submit(cached_tokens=128)),
    )
    agent = agent_for(fake_openai)
    result = await run_trial(
        TrialPlan(task=hello_task, attempt=0, job_id="job-t"),
        provider=LocalProvider(),
        agent=agent,
        job_dir=tmp_path / "job",
    )
    assert result.outcome == "graded", result.error
    assert result.reward == 1.0
    assert seen[0].startswith("[exit code 0]\n/app")
    assert seen[2] == "[exit code 3]\nHello, crucible!\noops\n"  # stderr joins stdout, in order

    ar = result.agent_result
    assert ar is not None and ar.error is None and ar.n_turns == 4
    reported = fake_openai.reported_usage
    assert ar.n_input_tokens == reported["prompt_tokens"] > 0
    assert ar.n_output_tokens == reported["completion_tokens"] > 0
    assert ar.n_cache_tokens == reported["cached_tokens"] == 192
    expected = cost_usd(
        "gpt-4o",
        {
            "prompt_tokens": reported["prompt_tokens"],
            "completion_tokens": reported["completion_tokens"],
            "prompt_tokens_details": {"cached_tokens": reported["cached_tokens"]},
        },
    )
    assert ar.cost_usd == pytest.approx(expected)
    assert (
        result.agent_info.model_info is not None and result.agent_info.model_info.name == "gpt-4o"
    )

    traj = traj_of(tmp_path / "job" / "hello-file__0" / "agent")
    assert traj["status"] == "submitted" and traj["n_turns"] == 4
    assert [a["tool"] for t in traj["turns"] for a in t["actions"]] == [
        "bash",
        "bash",
        "bash",
        "submit",
    ]
    assert traj["turns"][1]["actions"][0]["arguments"]["command"] == WRITE_HELLO
    assert traj["turns"][2]["actions"][0]["exit_code"] == 3
    assert sum(t["usage"]["input_tokens"] for t in traj["turns"]) == reported["prompt_tokens"]
    assert traj["usage"]["output_tokens"] == reported["completion_tokens"]
    assert [m["role"] for m in traj["messages"]][:3] == ["system", "user", "assistant"]
    # The request carried both tools and the instruction.
    first = fake_openai.requests[0]
    assert {t["function"]["name"] for t in first["tools"]} == {"bash", "submit"}
    assert first["messages"][1]["content"] == hello_task.instruction


async def test_plain_text_fallback_when_tools_are_refused(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    fake_openai.reject_tools = True
    fake_openai.push(
        text(f"I will write the file.\n```bash\n{WRITE_HELLO}\n```"),
        text("No block here, thinking."),
        expect(
            lambda b: (
                (_ for _ in ()).throw(AssertionError(b))
                if "No command found" not in last_tool_output(b)
                else None
            ),
            text("```sh\ncat /app/hello.txt\n```"),
        ),
        expect(
            lambda b: None if "Hello, crucible!" in last_tool_output(b) else pytest.fail(str(b)),
            text("Done.\nSUBMIT"),
        ),
    )
    result = await agent_for(fake_openai).run(ctx_for(hello_task, sandbox, tmp_path))
    assert result.error is None
    assert result.n_turns == 4
    assert result.metadata["mode"] == "text"
    assert (await sandbox.read_file("/app/hello.txt")) == b"Hello, crucible!\n"
    # The refused request is not a turn; every request after it goes without tools.
    assert "tools" in fake_openai.requests[0]
    assert all("tools" not in r for r in fake_openai.requests[1:])
    assert "SUBMIT" in fake_openai.requests[1]["messages"][0]["content"]
    traj = traj_of(tmp_path / "agent")
    assert traj["mode"] == "text" and traj["events"][0]["kind"] == "mode_switch"


async def test_command_blocks_without_tool_calls_switch_to_text(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    # A server that accepts `tools` but whose model writes commands as text.
    fake_openai.push(text(f"```bash\n{WRITE_HELLO}\n```"), text("SUBMIT"))
    result = await agent_for(fake_openai).run(ctx_for(hello_task, sandbox, tmp_path))
    assert result.error is None and result.metadata["mode"] == "text"
    assert (await sandbox.read_file("/app/hello.txt")) == b"Hello, crucible!\n"


async def test_turn_limit(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    fake_openai.push(bash("true"), bash("true"), bash("true"))
    result = await agent_for(fake_openai, max_turns=2).run(ctx_for(hello_task, sandbox, tmp_path))
    assert result.error is not None and result.error.type == "turn_limit"
    assert result.n_turns == 2 and len(fake_openai.requests) == 2


async def test_wall_time_limit(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    fake_openai.push(bash("sleep 30"), bash("true"))
    result = await agent_for(fake_openai).run(ctx_for(hello_task, sandbox, tmp_path, timeout=4.0))
    assert result.error is not None and result.error.type == "timeout"
    traj = traj_of(tmp_path / "agent")
    action = traj["turns"][0]["actions"][0]
    assert action["timed_out"] is True  # cut by the limit, not run to its end


async def test_model_failure_propagates_and_keeps_the_trajectory(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    fake_openai.push(bash("echo one"))
    agent = agent_for(fake_openai, max_retries=1)

    def fail_after_first(body: dict[str, Any]) -> Step:
        fake_openai.fail_always = 503
        return bash("echo never")

    fake_openai.push(fail_after_first)
    with pytest.raises(ModelFailed):
        await agent.run(ctx_for(hello_task, sandbox, tmp_path))
    traj = traj_of(tmp_path / "agent")
    assert traj["status"] == "model_failed" and traj["n_turns"] == 2
    assert traj["turns"][0]["actions"][0]["output"] == "[exit code 0]\none\n"


async def test_bad_tool_calls_are_answered_not_fatal(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    outputs: list[str] = []
    fake_openai.push(
        tool("bash", "{not json"),
        expect(lambda b: outputs.append(last_tool_output(b)), tool("python", {"code": "1"})),
        expect(lambda b: outputs.append(last_tool_output(b)), tool("bash", {"cmd": "ls"})),
        expect(lambda b: outputs.append(last_tool_output(b)), submit()),
    )
    # Three format errors in a row: within a limit of 4 (tests/agents/test_terminal_turns.py
    # has the default of 3 ending a rollout).
    agent = agent_for(fake_openai, max_format_errors=4)
    result = await agent.run(ctx_for(hello_task, sandbox, tmp_path))
    assert result.error is None and result.n_turns == 4
    assert outputs[0].startswith("error: the arguments are not a JSON object")
    assert "unknown tool 'python'" in outputs[1]
    assert "missing arguments" in outputs[2]


async def test_long_output_is_cut_to_the_budget(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    shown: list[str] = []
    fake_openai.push(
        bash("seq 1 20000"),
        expect(lambda b: shown.append(last_tool_output(b)), submit()),
    )
    result = await agent_for(fake_openai, output_budget_chars=1000).run(
        ctx_for(hello_task, sandbox, tmp_path)
    )
    assert result.error is None
    out = shown[0]
    assert len(out) < 1100
    assert out.startswith("[exit code 0]\n1\n2\n3\n") and out.endswith("19999\n20000\n")
    assert "characters omitted" in out
    traj = traj_of(tmp_path / "agent")
    action = traj["turns"][0]["actions"][0]
    assert action["truncated"] is True and action["raw_output"].startswith("1\n2\n")


async def test_context_window_trims_old_outputs_and_turns(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    # Each output is ~6000 chars (~1700 tokens); a 4000-token window holds about one.
    for i in range(4):
        fake_openai.push(bash(f"head -c 6000 /dev/zero | tr '\\0' '{i}'"))
    fake_openai.push(submit())
    agent = agent_for(
        fake_openai, context_window=4000, max_output_tokens=500, output_budget_chars=8000
    )
    result = await agent.run(ctx_for(hello_task, sandbox, tmp_path))
    assert result.error is None and result.n_turns == 5
    last = fake_openai.requests[-1]["messages"]
    assert last[0]["role"] == "system" and last[1]["content"].startswith(hello_task.instruction)
    assert len(json.dumps(last)) < 4000 * 3.5
    assert (
        any(m.get("content") == ELIDED for m in last)
        or "earlier turn(s) were removed" in last[1]["content"]
    )
    assert "3" * 100 in last[-1]["content"]  # the latest output is always shown
    traj = traj_of(tmp_path / "agent")
    assert any(e["kind"] == "context_trim" for e in traj["events"])
    # The trajectory keeps every output in full, whatever the model was shown.
    assert sum("0" * 6000 in str(m.get("content")) for m in traj["messages"]) == 1


async def test_server_context_overflow_trims_and_continues(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    fake_openai.context_limit_chars = 9000  # the server's real window; the agent was told none
    fake_openai.push(
        bash("head -c 5000 /dev/zero | tr '\\0' a"),
        bash("head -c 5000 /dev/zero | tr '\\0' b"),
        submit(),
    )
    result = await agent_for(fake_openai).run(ctx_for(hello_task, sandbox, tmp_path))
    assert result.error is None and result.n_turns == 3
    traj = traj_of(tmp_path / "agent")
    assert any(e["kind"] == "context_overflow" for e in traj["events"])
    assert len(json.dumps(fake_openai.requests[-1]["messages"])) <= 9000


async def test_context_overflow_that_cannot_fit_is_an_agent_error(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    fake_openai.context_limit_chars = 500  # not even the system prompt fits
    result = await agent_for(fake_openai).run(ctx_for(hello_task, sandbox, tmp_path))
    assert result.error is not None and result.error.type == "context_overflow"
    assert result.n_turns == 0 and fake_openai.n_ok == 0


async def test_docs_tool(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "io.md").write_text(
        "# Reading files\n\n`quiver.read_csv(path)` loads a CSV file.\n" + "filler line\n" * 300
    )
    (site / "plot.md").write_text("# Plotting\n\nhistograms and scatter plots\n")
    build_index(site, tmp_path / "idx")
    shown: list[str] = []
    fake_openai.push(
        tool("docs", {"action": "query", "keys": "read_csv"}),
        expect(
            lambda b: shown.append(last_tool_output(b)),
            tool("docs", {"action": "show", "page": "io.md", "limit": 5}),
        ),
        expect(lambda b: shown.append(last_tool_output(b)), submit()),
    )
    agent = agent_for(fake_openai, docs_index=str(tmp_path / "idx"))
    result = await agent.run(ctx_for(hello_task, sandbox, tmp_path))
    assert result.error is None
    assert {t["function"]["name"] for t in fake_openai.requests[0]["tools"]} == {
        "bash",
        "submit",
        "docs",
    }
    hits = json.loads(shown[0])
    assert hits[0]["path"] == "io.md"
    assert "quiver.read_csv(path)" in shown[1] and "[next_offset: 5]" in shown[1]


def test_options_are_strict_and_coerced(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a model"):
        TerminalAgent()
    url = "http://127.0.0.1:9/v1"
    with pytest.raises(ValueError, match="no model endpoint"):  # never a hosted default
        TerminalAgent(model="m")
    with pytest.raises(ValueError, match="bogus"):
        TerminalAgent(model="m", model_base_url=url, bogus=1)
    with pytest.raises(ValueError, match="no docs index"):
        TerminalAgent(model="m", model_base_url=url, docs_index=str(tmp_path / "none"))
    agent = get_agent(
        "terminal",
        model="m",
        model_base_url=url,
        context_window="8000",
        temperature="0.5",
        max_turns=None,
    )
    assert isinstance(agent, TerminalAgent)
    assert agent.config.context_window == 8000 and agent.config.temperature == 0.5
    assert agent.config.max_turns == 100  # None means "the default"


async def test_docs_blocks_in_plain_text_mode(
    fake_openai: FakeOpenAI, hello_task: Task, sandbox: Sandbox, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "io.md").write_text("# Reading files\n\n`quiver.read_csv(path)` loads a CSV file.\n")
    (site / "plot.md").write_text("# Plotting\n\nhistograms\n")
    build_index(site, tmp_path / "idx")
    shown: list[str] = []
    fake_openai.push(
        text("```docs\nquery read_csv\n```"),
        expect(lambda b: shown.append(last_tool_output(b)), text("```docs\nshow io.md 0 2\n```")),
        expect(lambda b: shown.append(last_tool_output(b)), text("SUBMIT")),
    )
    agent = agent_for(fake_openai, docs_index=str(tmp_path / "idx"), tool_mode="text")
    result = await agent.run(ctx_for(hello_task, sandbox, tmp_path))
    assert result.error is None and result.n_turns == 3
    assert "tools" not in fake_openai.requests[0]
    assert "```docs" in fake_openai.requests[0]["messages"][0]["content"]
    assert json.loads(shown[0])[0]["path"] == "io.md"
    assert shown[1].startswith("Reading files (io.md) lines 0-2 of 3")

    # Without an index a docs block is answered with an error, never run as a command.
    fake_openai.push(
        text("```docs\nquery x\n```"),
        expect(lambda b: shown.append(last_tool_output(b)), text("SUBMIT")),
    )
    await agent_for(fake_openai, tool_mode="text").run(ctx_for(hello_task, sandbox, tmp_path / "2"))
    assert shown[2] == "error: no documentation is available"
