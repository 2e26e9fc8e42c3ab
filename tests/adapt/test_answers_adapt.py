"""`crucible adapt answers` and the adapter registry: prompts and answers become
single-turn tasks scored on the host by a reward function; a real local trial each for
the oracle, nop and a wrong answer."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from tests.helpers.attack_tasks import attack_trial
from typer.testing import CliRunner

from crucible.adapt.base import AdaptError
from crucible.adapt.registry import adapter_class, adapter_names
from crucible.agents.nop import NopAgent
from crucible.agents.oracle import OracleAgent
from crucible.agents.submission import SubmissionAgent
from crucible.cli.main import app
from crucible.errors import TaskInvalid
from crucible.records.submission import TextSubmission
from crucible.tasks.loader import load_task
from crucible.verifiers.stages.answer import check_reward_name, exact, numeric, reward_fn

ROWS = [{"id": "q1", "question": "What is 6 * 7?", "solution": "42"}]


def half(answer: str, expected: str) -> float:  # a reward function named by import path
    return 0.5


def test_builtin_rewards() -> None:
    assert exact(" 42\n", "42") == 1.0 and exact("41", "42") == 0.0
    assert numeric("42.0000001", "42") == 1.0 and numeric("1,000", "1000") == 1.0
    assert numeric("nan", "42") == 0.0 and numeric("x", "42") == 0.0
    assert reward_fn("tests.adapt.test_answers_adapt:half")("a", "b") == 0.5
    with pytest.raises(TaskInvalid):
        check_reward_name("no-such")


def test_registry_names_and_errors() -> None:
    assert {"swebench", "answers"} <= set(adapter_names())
    assert adapter_class("answers").name == "answers"
    with pytest.raises(AdaptError) as e:
        adapter_class("nope")
    assert "swebench" in (e.value.hint or "")
    out = CliRunner().invoke(app, ["adapt", "list", "--json"])
    assert {"answers", "swebench"} <= set(json.loads(out.stdout)["adapters"])


def test_answers_tasks_graded_on_the_host(tmp_path: Path) -> None:
    src = tmp_path / "qa.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    args = ["adapt", "answers", str(src), "-o", str(tmp_path / "out"), "--json"]
    args += ["--prompt-field", "question", "--answer-field", "solution", "--id-field", "id"]
    res = CliRunner().invoke(app, [*args, "--reward", "numeric"])
    assert res.exit_code == 0, res.output
    assert [t["name"] for t in json.loads(res.stdout)["tasks"]] == ["answer-q1"]
    task = load_task(tmp_path / "out" / "answer-q1")
    assert task.instruction.startswith("What is 6 * 7?")

    def reward(agent: object, name: str) -> float:
        (tmp_path / name).mkdir()
        r = asyncio.run(attack_trial("local", task, tmp_path / name, agent=agent))  # type: ignore[arg-type]
        assert r.error is None, r.error
        return r.verifier_result.rewards["reward"]

    assert reward(OracleAgent(), "oracle") == 1.0
    assert reward(NopAgent(), "nop") == 0.0
    assert reward(SubmissionAgent(TextSubmission(text="41")), "wrong") == 0.0


def test_bad_options_are_usage_errors(tmp_path: Path) -> None:
    src = tmp_path / "qa.jsonl"
    src.write_text(json.dumps(ROWS[0]) + "\n")
    res = CliRunner().invoke(
        app, ["adapt", "with", "answers", str(src), "-o", str(tmp_path / "o"), "--set", "nope=1"]
    )
    assert res.exit_code == 2 and "nope" in res.stderr
