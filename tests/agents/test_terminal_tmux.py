"""The terminal agent's opt-in tmux tool, against the scripted server in a real local sandbox:
an interactive Python REPL session solves the hello-file example; the bundle crucible
uploads is its own; the options."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from atif import Trajectory as AtifModel
from tests.helpers.fake_openai import FakeOpenAI, Step, submit, tool

from crucible.agents.terminal.agent import TerminalAgent
from crucible.agents.terminal.tmux import host_bundle
from crucible.engine.spec import TrialPlan
from crucible.engine.trial import run_trial
from crucible.sandboxes.local.provider import LocalProvider
from crucible.tasks.loader import load_task

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "examples" / "tasks" / "hello-file"
HARBOR_VENV = Path(os.environ.get("CRUCIBLE_HARBOR_VENV", "/tmp/crucible-harbor312"))
WRITE = "open('/app/hello.txt', 'w').write('Hello, ' + 'crucible'.lower() + '!' + chr(10))"

needs_tmux = pytest.mark.skipif(
    subprocess.run(["sh", "-c", "command -v tmux"], capture_output=True).returncode != 0,
    reason="no tmux on the host (scripts/setup-*.sh installs it)",
)


def expect_last(
    check: Callable[[dict[str, Any]], None], then: Step
) -> Callable[[dict[str, Any]], Step]:
    """A step that first hands the request (what the model was shown) to `check`."""

    def step(body: dict[str, Any]) -> Step:
        check(body)
        return then

    return step


def agent_for(server: FakeOpenAI, **kw: object) -> TerminalAgent:
    return TerminalAgent(
        model="gpt-4o",
        model_base_url=server.url,
        model_api_key_env="CRUCIBLE_TEST_ABSENT_KEY",
        **kw,
    )


@needs_tmux
async def test_python_repl_through_tmux_solves_hello_file(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    seen: list[str] = []

    def shown(body: dict[str, Any]) -> None:
        seen.append(str(body["messages"][-1]["content"]))

    def until(mark: str, then: Step) -> Callable[[dict[str, Any]], Step]:
        """Like a model at a REPL: read the screen again until `mark` shows, then go on."""
        polls = 0

        def step(body: dict[str, Any]) -> Step:
            nonlocal polls
            screen = str(body["messages"][-1]["content"])
            if mark in screen:
                seen.append(screen)
                return then
            polls += 1
            assert polls < 200, f"{mark!r} never showed: {screen[-300:]!r}"
            fake_openai.script.insert(0, step)
            return tool("tmux", {"action": "read"})

        return step

    fake_openai.push(
        tool("tmux", {"action": "send", "text": "python3", "keys": ["Enter"]}),
        until(">>>", tool("tmux", {"action": "send", "text": WRITE, "keys": ["Enter"]})),
        until("\n17\n>>>", tool("tmux", {"action": "send", "text": "exit()", "keys": ["Enter"]})),
        tool("tmux", {"action": "run", "command": "cd /tmp && X=7; cat /app/hello.txt"}),
        expect_last(shown, tool("tmux", {"action": "run", "command": "pwd; echo X=$X; (exit 3)"})),
        expect_last(shown, submit()),
    )
    result = await run_trial(
        TrialPlan(task=load_task(HELLO), attempt=0, job_id="job-tmux"),
        provider=LocalProvider(userland="host"),  # python3 is the host's; tmux is crucible's
        agent=agent_for(fake_openai, tools="bash,tmux"),
        job_dir=tmp_path / "job",
    )
    assert result.outcome == "graded" and result.reward == 1.0, result.error
    assert "Python 3" in seen[0]  # the REPL's banner and prompt, on a TTY
    # write() returned the length, echoed by the REPL; then the shell is back
    assert seen[2].startswith("[exit code 0]\n") and "Hello, crucible!" in seen[2]
    # the shell persisted: the working directory and the variable of the call before
    assert seen[3].startswith("[exit code 3]\n") and "\n/tmp\nX=7\n" in seen[3]
    first = fake_openai.requests[0]
    assert {t["function"]["name"] for t in first["tools"]} == {"bash", "tmux", "submit"}
    assert "`tmux` is a persistent interactive terminal" in first["messages"][0]["content"]

    # the ATIF written beside the record: tmux calls, exit codes, valid
    path = tmp_path / "job" / "hello-file__0" / "agent" / "trajectory.atif.json"
    doc = AtifModel.model_validate_json(path.read_text())
    calls = [tc.function_name for s in doc.steps for tc in s.tool_calls or []]
    assert calls[:3] == ["tmux"] * 3 and calls[-1] == "submit"
    codes = [
        r.extra.get("exit_code")
        for s in doc.steps
        for r in (s.observation.results if s.observation else [])
        if r.extra
    ]
    assert [c for c in codes if c is not None] == [0, 3]
    python = HARBOR_VENV / "bin" / "python"
    if python.is_file():  # Harbor's own validator, where scripts/setup-harbor-validator.sh made it
        proc = await asyncio.create_subprocess_exec(
            str(python), "-m", "harbor.utils.trajectory_validator", str(path),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await proc.communicate()
        assert proc.returncode == 0, out.decode()


@needs_tmux
def test_bundle_is_the_hosts_tmux_with_its_own_loader() -> None:
    bundle = host_bundle()
    assert (bundle / "tmux.bin").is_file() and any((bundle / "lib").glob("ld-*"))
    assert host_bundle() == bundle  # made once, reused


@needs_tmux
def test_a_bundle_folder_others_can_write_is_never_used(tmp_path: Path) -> None:
    """Attack: another local user (or a sandbox escape) plants its own tmux under the bundle's
    name in the shared temp dir, writable by others. Before the ownership check it was uploaded
    into every sandbox and run there; now a fresh private bundle is made instead."""
    real = host_bundle()
    planted = real.with_name(real.name + "-x")
    os.rename(real, planted)
    try:
        real.mkdir()
        (real / "tmux").write_text("#!/bin/sh\necho planted\n")
        real.chmod(0o777)
        got = host_bundle()
        assert got != real and (got / "tmux.bin").is_file()
        assert "planted" not in (got / "tmux").read_text()
    finally:
        for p in sorted(real.rglob("*"), reverse=True):
            p.unlink()
        real.rmdir()
        os.rename(planted, real)


def test_tools_option(fake_openai: FakeOpenAI) -> None:
    assert agent_for(fake_openai).config.tools == ["bash"]
    assert agent_for(fake_openai, tools="bash, tmux").config.tools == ["bash", "tmux"]
    assert agent_for(fake_openai, tools="tmux").config.tools == ["tmux"]
    with pytest.raises(ValueError, match="tools"):
        agent_for(fake_openai, tools="bash,zsh")


@needs_tmux
async def test_tmux_runs_on_the_tasks_image_userland(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """hello-file's own image (debian:bookworm-slim: no tmux, no python3) gets crucible's
    tmux bundle, which runs there through its own loader."""
    seen: list[str] = []
    write = "command -v tmux || echo 'no tmux of its own'; printf 'Hello, crucible!\\n' > hello.txt"
    fake_openai.push(
        tool("tmux", {"action": "run", "command": write}),
        expect_last(lambda b: seen.append(str(b["messages"][-1]["content"])), submit()),
    )
    result = await run_trial(
        TrialPlan(task=load_task(HELLO), attempt=0, job_id="job-tmux-image"),
        provider=LocalProvider(userland="image"),
        agent=agent_for(fake_openai, tools="tmux"),
        job_dir=tmp_path / "job",
    )
    if result.outcome == "resources_unavailable":
        pytest.skip(f"no image for hello-file here: {result.error}")
    assert result.outcome == "graded" and result.reward == 1.0, result.error
    assert seen[0].startswith("[exit code 0]\n") and "no tmux of its own" in seen[0]
    assert {t["function"]["name"] for t in fake_openai.requests[0]["tools"]} == {"tmux", "submit"}
