"""The `command` agent: installs and runs a CLI agent in a real local sandbox with network."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.helpers.fake_openai import FakeOpenAI, text

from crucible.agents.base import AgentContext
from crucible.agents.installed import (
    INSTRUCTION_FILE,
    TEMPLATES,
    CommandAgent,
    parse_claude_code,
    parse_codex,
)
from crucible.errors import ResourcesUnavailable, SandboxFailed
from crucible.llm.pricing import cost_usd
from crucible.records.usage import Usage
from crucible.sandboxes.base import Sandbox, SandboxSpec
from crucible.sandboxes.local.provider import LocalProvider
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-test-do-not-leak-4242"
# Shell metacharacters and quotes: the instruction must arrive verbatim and run nothing.
NASTY = "Write the file. $(touch /tmp/pwned) `touch /tmp/pwned2` ' \" ; rm -rf / #\n"

TOY_AGENT = r"""
import json, os, subprocess, sys, urllib.request
instruction = open(sys.argv[1]).read()
body = {"model": os.environ["CRUCIBLE_MODEL"], "messages": [{"role": "user", "content": instruction}]}
req = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps(body).encode(),
    headers={"Content-Type": "application/json", "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")},
)
command = json.load(urllib.request.urlopen(req))["choices"][0]["message"]["content"]
sys.exit(subprocess.call(["bash", "-c", command]))
"""

FAKE_CODEX = r"""#!/usr/bin/env python3
import json, sys
json.dump(sys.argv[1:], open("/tmp/codex-argv.json", "w"))
open("/app/hello.txt", "w").write("Hello, crucible!\n")
print(json.dumps({"type": "thread.started"}))
print(json.dumps({"type": "item.completed", "item": {"id": "item_1", "type": "command_execution", "command": "ls", "aggregated_output": "hello.txt", "exit_code": 0, "status": "completed"}}))
print(json.dumps({"type": "turn.completed", "usage": {"input_tokens": 1000, "cached_input_tokens": 200, "output_tokens": 50}}))
print("not json")
print(json.dumps({"type": "turn.completed", "usage": {"input_tokens": 500, "cached_input_tokens": 0, "output_tokens": 25}}))
"""


def install_file(path: str, content: str, mode: str = "644") -> str:
    return f"mkdir -p $(dirname {path}) && cat > {path} <<'CRUCIBLE_EOF'\n{content}\nCRUCIBLE_EOF\nchmod {mode} {path}"


@pytest.fixture(scope="module")
def task() -> Task:
    base = load_task(ROOT / "examples" / "tasks" / "hello-file")
    return base.model_copy(update={"instruction": NASTY})


@pytest.fixture
async def net_sandbox(task: Task) -> AsyncIterator[Sandbox]:
    provider = LocalProvider()
    sb = await provider.create(
        SandboxSpec(task_name=task.name, workdir=task.workdir, network="public")
    )
    try:
        yield sb
    finally:
        await sb.close()


def ctx(task: Task, sandbox: Sandbox, tmp_path: Path, timeout: float = 60.0) -> AgentContext:
    return AgentContext(
        task=task, sandbox=sandbox, logs_dir=tmp_path / "agent", timeout_sec=timeout
    )


async def test_custom_command_gets_endpoint_and_key_only_in_its_exec(
    fake_openai: FakeOpenAI,
    task: Task,
    net_sandbox: Sandbox,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TOY_KEY", SECRET)
    fake_openai.push(text("printf 'Hello, crucible!\\n' > /app/hello.txt"))
    agent = CommandAgent(
        install_command=install_file("/tmp/toy/agent.py", TOY_AGENT),
        command_template="python3 /tmp/toy/agent.py {instruction_file}",
        model="toy-model",
        model_base_url=fake_openai.url,
        model_api_key_env="TOY_KEY",
    )
    assert agent.requires_network
    result = await agent.run(ctx(task, net_sandbox, tmp_path))
    assert result.error is None and result.exit_code == 0
    assert (await net_sandbox.read_file("/app/hello.txt")) == b"Hello, crucible!\n"
    # The instruction arrived verbatim, and none of its shell syntax ran.
    assert fake_openai.requests[0]["messages"][0]["content"] == NASTY
    assert fake_openai.requests[0]["model"] == "toy-model"
    assert (await net_sandbox.exec("ls /tmp/pwned /tmp/pwned2")).exit_code != 0
    # The key reached the server from inside the sandbox ...
    assert fake_openai.request_headers[0]["Authorization"] == f"Bearer {SECRET}"
    # ... but is in no spec, no file of the sandbox, and no log crucible wrote.
    assert SECRET not in net_sandbox.spec.model_dump_json()
    assert (await net_sandbox.exec(f"grep -rs {SECRET} /tmp /app /logs /root")).exit_code == 1
    assert (await net_sandbox.exec("printenv OPENAI_API_KEY")).exit_code == 1
    for f in (tmp_path / "agent").rglob("*"):
        assert SECRET not in f.read_text(errors="replace"), f
    assert (tmp_path / "agent" / "install.log").is_file()


async def test_codex_template_runs_and_reports_usage(
    task: Task, net_sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    agent = CommandAgent(
        template="codex",
        model="gpt-4o",
        model_base_url="http://127.0.0.1:9/v1",
        install_command=install_file("/tmp/bin/codex", FAKE_CODEX, "755"),
        env={"PATH": "/tmp/bin:/usr/local/bin:/usr/bin:/bin"},
    )
    result = await agent.run(ctx(task, net_sandbox, tmp_path))
    assert result.error is None, (tmp_path / "agent" / "stderr.txt").read_text()
    argv = json.loads(await net_sandbox.read_file("/tmp/codex-argv.json"))
    assert (
        argv[0] == "exec" and "--json" in argv and argv[-1] == NASTY.rstrip("\n")
    )  # $(cat) drops trailing newlines
    assert argv[argv.index("--model") + 1] == "gpt-4o"
    assert (result.n_input_tokens, result.n_cache_tokens, result.n_output_tokens) == (1500, 200, 75)
    assert result.cost_usd == pytest.approx(
        cost_usd("gpt-4o", Usage(input_tokens=1500, cache_read_tokens=200, output_tokens=75))
    )
    assert result.metadata["template"] == "codex"
    # its event stream, as ATIF beside the raw logs (export/atif/codex.py)
    atif = json.loads((tmp_path / "agent" / "trajectory.atif.json").read_text())
    (step,) = atif["steps"]
    assert step["tool_calls"][0]["arguments"] == {"command": "ls"}
    assert step["observation"]["results"][0]["extra"]["exit_code"] == 0


async def test_no_network_is_refused_clearly(task: Task, tmp_path: Path) -> None:
    provider = LocalProvider()
    sb = await provider.create(
        SandboxSpec(task_name=task.name, workdir=task.workdir, network="none")
    )
    async with sb:
        with pytest.raises(ResourcesUnavailable, match="network"):
            await CommandAgent(template="claude-code").run(ctx(task, sb, tmp_path))


async def test_failed_install_is_infrastructure(
    task: Task, net_sandbox: Sandbox, tmp_path: Path
) -> None:
    agent = CommandAgent(command_template="true", install_command="echo no registry >&2; exit 7")
    with pytest.raises(SandboxFailed, match="exited 7: no registry"):
        await agent.run(ctx(task, net_sandbox, tmp_path))
    assert "no registry" in (tmp_path / "agent" / "install.log").read_text()


async def test_agent_exit_and_timeout_are_agent_errors(
    task: Task, net_sandbox: Sandbox, tmp_path: Path
) -> None:
    failing = await CommandAgent(command_template="echo working; exit 2").run(
        ctx(task, net_sandbox, tmp_path)
    )
    assert (
        failing.error is not None
        and failing.error.type == "nonzero_exit"
        and failing.exit_code == 2
    )
    assert (tmp_path / "agent" / "stdout.txt").read_text() == "working\n"
    slow = await CommandAgent(command_template="sleep 30").run(
        ctx(task, net_sandbox, tmp_path, timeout=2)
    )
    assert slow.error is not None and slow.error.type == "timeout"


def test_templates_render_with_quoted_values() -> None:
    agent = CommandAgent(template="claude-code", model="claude-sonnet-4-5; rm -rf /", max_turns=30)
    cmd = agent.run_command.format(**agent._placeholders("/app"))
    assert f'"$(cat {INSTRUCTION_FILE})"' in cmd
    assert "--model 'claude-sonnet-4-5; rm -rf /'" in cmd and "--max-turns 30" in cmd
    assert "npm install -g @anthropic-ai/claude-code@1.0.0;" in (
        CommandAgent(template="claude-code", version="1.0.0")._install_command() or ""
    )
    assert "mini-swe-agent'==2.0; rm -rf /'" in (
        CommandAgent(template="mini-swe-agent", version="2.0; rm -rf /")._install_command() or ""
    )
    assert set(TEMPLATES) == {"claude-code", "codex", "mini-swe-agent"}


def test_options_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="template"):
        CommandAgent()
    with pytest.raises(ValueError, match="unknown template"):
        CommandAgent(template="aider")
    with pytest.raises(ValueError, match="unknown placeholder"):
        CommandAgent(command_template="run {instructions}")
    with pytest.raises(ValueError, match="docs_index"):
        CommandAgent(template="codex", docs_index="/x")
    with pytest.raises(ValueError, match="extra_thing"):
        CommandAgent(template="codex", extra_thing=1)
    monkeypatch.delenv("NOPE_KEY", raising=False)
    with pytest.raises(ValueError, match="NOPE_KEY"):
        CommandAgent(template="codex", model_api_key_env="NOPE_KEY")
    # codex exec and mini have no turn limit: max_turns is refused, never silently dropped.
    for name in ("codex", "mini-swe-agent"):
        with pytest.raises(ValueError, match="cannot honour max_turns=5"):
            CommandAgent(template=name, max_turns=5)
    with pytest.raises(ValueError, match="custom command has no turn limit"):
        CommandAgent(command_template="run-it", max_turns=5)
    assert "--max-turns 5" in CommandAgent(template="claude-code", max_turns=5).run_command.replace(
        "{max_turns_flag}", "--max-turns 5"
    )


def test_usage_parsers() -> None:
    claude = "\n".join(
        [
            json.dumps({"type": "system"}),
            json.dumps(
                {
                    "type": "result",
                    "total_cost_usd": 0.0123,
                    "usage": {
                        "input_tokens": 10,
                        "cache_read_input_tokens": 300,
                        "cache_creation_input_tokens": 40,
                        "output_tokens": 7,
                    },
                }
            ),
        ]
    )
    usage, cost = parse_claude_code(claude)
    assert usage == Usage(
        input_tokens=350, cache_read_tokens=300, cache_write_tokens=40, output_tokens=7
    )
    assert cost == 0.0123
    assert parse_claude_code("garbage") == (None, None)
    assert parse_codex("") == (None, None)
