"""Shared parts of the terminal agent's tests: the hello-file task, a real local (bubblewrap)
sandbox for it, and the agent pointed at the scripted server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from crucible.agents.terminal.agent import TerminalAgent
from crucible.sandboxes.base import Sandbox, SandboxSpec
from crucible.sandboxes.local.provider import LocalProvider
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task
from tests.helpers.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "examples" / "tasks" / "hello-file"
WRITE_HELLO = "printf 'Hello, crucible!\\n' > /app/hello.txt"


@pytest.fixture(scope="module")
def hello_task() -> Task:
    return load_task(HELLO)


@pytest.fixture
async def sandbox(hello_task: Task) -> AsyncIterator[Sandbox]:
    provider = LocalProvider()
    sb = await provider.create(
        SandboxSpec(task_name=hello_task.name, workdir=hello_task.workdir, network="none")
    )
    try:
        yield sb
    finally:
        await sb.close()
        await provider.aclose()


def agent_for(server: FakeOpenAI, **kw: Any) -> TerminalAgent:
    kw.setdefault("model", "gpt-4o")
    kw.setdefault("model_api_key_env", "CRUCIBLE_TEST_ABSENT_KEY")
    return TerminalAgent(model_base_url=server.url, **kw)
