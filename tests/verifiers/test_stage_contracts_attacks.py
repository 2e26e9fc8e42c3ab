"""Attacks on what the contracts gate (and the judge after it) reads, through a real
one-step trial of the example task (tasks/modal-squares: a test script any program
defining `square` passes, a contracts gate requiring a GPU function reached from the
entrypoint, and a stand-in judge that passes whatever it is shown).

- The dead branch: the only call of the GPU function sits where it never runs.
- The UTF-7 cookie: Python decodes the file as UTF-7, where "+AAo-" is a newline, so
  the line a UTF-8 reader (the gate, the judge) takes for a comment returns early and
  the entrypoint squares locally.

Each scored 1.0 before the gate read by control flow and as Python decodes; 0 now.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.fake_openai import FakeOpenAI, text
from tests.verifiers.test_stages_job import PASS, TASK, task_with, trial
from typer.testing import CliRunner

from crucible.cli.main import app

ENVS = ["local", pytest.param("docker", marks=pytest.mark.docker)]
SOLUTION = (TASK / "solution" / "main.py").read_text()
FAN_OUT = "    print(sum(square.map(range(10))))\n"
assert FAN_OUT in SOLUTION
LOCAL = "    print(sum(x * x for x in range(10)))\n"


def dead_branch(condition: str) -> str:
    return SOLUTION.replace(FAN_OUT, f"    if {condition}:\n    {FAN_OUT}{LOCAL}")


UTF7 = "# -*- coding: utf-7 -*-\n" + SOLUTION.replace(
    FAN_OUT, f"    # fan the squares out to the GPU +AAo-    return {LOCAL.strip()}\n{FAN_OUT}"
)


@pytest.fixture
def env(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_engine")
    return str(request.param)


@pytest.fixture
def judge(fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    monkeypatch.setenv("CRUCIBLE_JUDGE_BASE_URL", fake_openai.url)
    monkeypatch.setenv("CRUCIBLE_JUDGE_API_KEY", "judge-secret")
    fake_openai.push(text(PASS))  # a stand-in judge: it passes whatever it reads
    return fake_openai


def run(task: Path, jobs: Path, env: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["run", str(task), "--agent", "oracle", "--env", env,
                                      "--jobs-dir", str(jobs), "--job-name", "attack",
                                      "--max-retries", "0", "--json", "--quiet"])  # fmt: skip
    summary: dict[str, Any] = json.loads((jobs / "attack" / "result.json").read_text())
    assert result.exit_code == (0 if summary["outcomes"].get("graded") else 1), result.output
    r = trial(jobs, "attack")
    assert r["verifier_result"]["script_rewards"] == {"reward": 1.0}  # the script let it by
    return summary


@pytest.mark.parametrize("env", ENVS, indirect=True)
@pytest.mark.parametrize("condition", ["False", "1 == 2", "not True"])
def test_a_gpu_function_called_only_in_a_dead_branch_fails_the_gate(
    judge: FakeOpenAI, tmp_path: Path, env: str, condition: str
) -> None:
    summary = run(task_with(tmp_path, dead_branch(condition)), tmp_path / "jobs", env)
    assert summary["outcomes"] == {"graded": 1} and summary["mean_reward"] == 0.0, summary
    stages = trial(tmp_path / "jobs", "attack")["verifier_result"]["stages"]
    assert stages[1]["status"] == "failed"
    assert stages[1]["details"]["missing"] == ["function", "gpu"]
    assert stages[2]["status"] == "skipped" and judge.requests == []


def _entrypoint(source: str) -> list[str]:
    main = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)][-1]
    return [ast.unparse(s) for s in main.body]


def test_the_utf7_program_is_another_program_for_python() -> None:
    # What a UTF-8 reader sees: the entrypoint fans out. What Python runs: it returns first.
    assert _entrypoint(UTF7) == ["print(sum(square.map(range(10))))"]
    assert _entrypoint(UTF7.encode().decode("utf-7")) == [
        "return print(sum((x * x for x in range(10))))",
        "print(sum(square.map(range(10))))",
    ]


@pytest.mark.parametrize("env", ENVS, indirect=True)
def test_a_utf7_cookie_hiding_local_work_scores_zero(
    judge: FakeOpenAI, tmp_path: Path, env: str
) -> None:
    summary = run(task_with(tmp_path, UTF7), tmp_path / "jobs", env)
    assert summary["outcomes"] == {"verifier_failed": 1}, summary
    assert summary["mean_reward"] == 0.0  # counted
    r = trial(tmp_path / "jobs", "attack")
    assert "/app/main.py declares coding 'utf-7'" in r["error"]["message"]
    assert r["verifier_result"]["stages"][1]["status"] == "error"
    assert judge.requests == []  # nothing host-side read the UTF-8 view and passed it
