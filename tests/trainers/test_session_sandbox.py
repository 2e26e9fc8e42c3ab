"""The terminal agent rolled out in a grading-service session (trainers/session_sandbox.py),
against a real `crucible serve` on loopback and the scripted model server."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.fake_openai import FakeOpenAI, bash, fake_openai, submit
from tests.helpers.session_server import session_server

from crucible.agents.base import AgentContext
from crucible.agents.terminal.agent import TerminalAgent
from crucible.records.trajectory import load_trajectory
from crucible.tasks.loader import load_task
from crucible.trainers.client import AsyncServiceClient, ServiceError
from crucible.trainers.session_sandbox import SessionSandbox

__all__ = ["fake_openai"]

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "examples" / "tasks" / "hello-file"


async def test_terminal_agent_solves_a_task_in_a_session(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    task = load_task(HELLO)
    fake_openai.push(
        bash("cd /app && export NAME=crucible"),
        bash("printf 'Hello, %s!\\n' \"$NAME\" > hello.txt; cat hello.txt"),
        submit(),
    )
    with session_server(tmp_path / "srv", [task]) as srv:
        client = AsyncServiceClient(srv.url, srv.token)
        sandbox = await SessionSandbox.open(client, task.name)
        try:
            agent = TerminalAgent(
                model="gpt-4o", model_base_url=fake_openai.url, model_api_key_env="NO_KEY_SET"
            )
            ctx = AgentContext(
                task=task, sandbox=sandbox, logs_dir=tmp_path / "agent", timeout_sec=120
            )
            result = await agent.run(ctx)
            assert result.error is None and result.n_turns == 3
            shown = fake_openai.requests[2]["messages"][-1]["content"]
            assert shown == "[exit code 0]\nHello, crucible!\n"  # state carried across execs
            assert await sandbox.read_file("/app/hello.txt") == b"Hello, crucible!\n"
            with pytest.raises(FileNotFoundError):
                await sandbox.read_file("/app/none.txt")
            with pytest.raises(PermissionError):  # never sent: the service picks the user
                await sandbox.exec("id", user="root")
            with pytest.raises(NotImplementedError, match="no route"):
                await sandbox.kill_all()
            graded = await sandbox.grade()
            assert graded.reward == 1.0
            assert load_trajectory(tmp_path / "agent").status == "submitted"
            opened = sandbox.info.id
        finally:
            await sandbox.close()
        await sandbox.close()  # idempotent
        with pytest.raises(ServiceError) as gone:
            await client.exec(opened, "true")
        assert gone.value.status == 404
        await client.aclose()
