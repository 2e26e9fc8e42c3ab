"""Trials on real bubblewrap sandboxes: Harbor's grading semantics hold against a hostile agent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crucible.agents.base import Agent, AgentContext
from crucible.agents.nop import NopAgent
from crucible.agents.oracle import OracleAgent
from crucible.engine.spec import TrialPlan
from crucible.engine.trial import run_trial
from crucible.records.trial import AgentResult
from crucible.sandboxes.local.provider import LocalProvider
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task

REPO = Path(__file__).resolve().parents[2]


def make_task(root: Path, test_sh: str, *, solve: str = "true", toml: str = "") -> Task:
    root.mkdir(parents=True)
    (root / "task.toml").write_text('schema_version = "1.1"\n[verifier]\ntimeout_sec = 20\n' + toml)
    (root / "instruction.md").write_text("Do the thing.\n")
    for sub, name, body in (("tests", "test.sh", test_sh), ("solution", "solve.sh", solve)):
        (root / sub).mkdir()
        (root / sub / name).write_text("#!/usr/bin/env bash\n" + body + "\n")
    return load_task(root)


class ScriptAgent(Agent):
    """An agent that runs fixed shell commands, one exec each."""

    name = "script"

    def __init__(self, *commands: str) -> None:
        self.commands = commands

    async def run(self, ctx: AgentContext) -> AgentResult:
        for cmd in self.commands:
            res = await ctx.sandbox.exec(cmd, timeout=10, cwd=ctx.task.workdir)
            (ctx.logs_dir / "log.txt").open("a").write(f"$ {cmd}\n{res.stdout}{res.stderr}")
        return AgentResult(exit_code=0)


async def trial(task: Task, agent: Agent, tmp_path: Path, attempt: int = 0):  # type: ignore[no-untyped-def]
    return await run_trial(TrialPlan(task=task, attempt=attempt, job_id="t"),
                           provider=LocalProvider(), agent=agent, job_dir=tmp_path / "job")  # fmt: skip


WRITE_REWARD_IF_FILE = "if [ -f /app/ok ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi"


async def test_agent_cannot_plant_its_own_reward(tmp_path: Path) -> None:
    # The tests write nothing when they fail; a planted reward must not survive.
    task = make_task(
        tmp_path / "task", "[ -f /app/ok ] && echo 1 > /logs/verifier/reward.txt; exit 0"
    )
    agent = ScriptAgent("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt "
                        "&& echo '{\"reward\": 1}' > /logs/verifier/reward.json")  # fmt: skip
    r = await trial(task, agent, tmp_path)
    assert r.outcome == "verifier_failed" and r.reward is None
    assert r.error is not None and "no reward" in r.error.message


async def test_agent_process_does_not_survive_into_grading(tmp_path: Path) -> None:
    # A saboteur started by the agent waits for grading (the tests appear only then), then
    # deletes /app/ok and writes reward 0. The tests also look for it among the processes
    # (the pattern 'sabot[e]ur' does not match grep's own command line): no race either way.
    test_sh = ("if grep -qs 'sabot[e]ur' /proc/[0-9]*/cmdline; then echo 0 > /logs/verifier/reward.txt; "
               "else " + WRITE_REWARD_IF_FILE + "; fi")  # fmt: skip
    task = make_task(tmp_path / "task", test_sh)
    saboteur = ("while [ ! -e /tests/test.sh ]; do sleep 0.01; done; "  # timing-ok: polls a condition
                "rm -f /app/ok; echo 0 > /logs/verifier/reward.txt; while :; do sleep 100; done")  # fmt: skip
    agent = ScriptAgent(f"setsid nohup sh -c '{saboteur}' saboteur >/dev/null 2>&1 &",
                        "touch /app/ok")  # fmt: skip
    r = await trial(task, agent, tmp_path)
    assert r.graded and r.reward == 1.0  # the saboteur was killed before grading


async def test_tests_absent_during_agent_phase(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", WRITE_REWARD_IF_FILE)
    agent = ScriptAgent("if [ -e /tests ] && [ -n \"$(ls -A /tests 2>/dev/null)\" ]; then touch /app/saw; fi; "
                        "ls /tests/test.sh && touch /app/ok; true")  # fmt: skip
    r = await trial(task, agent, tmp_path)
    assert r.graded and r.reward == 0.0


@pytest.mark.parametrize(
    "test_sh, outcome, reward",
    [
        ("true", "verifier_failed", None),  # missing
        ("mkdir -p /logs/verifier; : > /logs/verifier/reward.txt", "verifier_failed", None),  # empty
        ("echo nan > /logs/verifier/reward.txt", "verifier_failed", None),
        ("echo inf > /logs/verifier/reward.txt", "verifier_failed", None),
        ("echo passed > /logs/verifier/reward.txt", "verifier_failed", None),
        ("echo '{\"reward\": NaN}' > /logs/verifier/reward.json", "verifier_failed", None),
        # both present: reward.json wins
        ("echo 0 > /logs/verifier/reward.txt; echo '{\"reward\": 0.75, \"x\": 0.25}' > /logs/verifier/reward.json",
         "graded", 0.75),
        # every key is a reward: one outside the task's range [0, 1] fails the grading
        ("echo '{\"reward\": 0.75, \"x\": 2}' > /logs/verifier/reward.json", "verifier_failed", None),
        ("echo 0.5 > /logs/verifier/reward.txt; exit 3", "graded", 0.5),  # exit code does not matter
    ],
)  # fmt: skip
async def test_reward_edge_cases(
    tmp_path: Path, test_sh: str, outcome: str, reward: float | None
) -> None:
    task = make_task(tmp_path / "task", "mkdir -p /logs/verifier; " + test_sh)
    r = await trial(task, NopAgent(), tmp_path)
    assert (r.outcome, r.reward) == (outcome, reward)
    saved = json.loads((tmp_path / "job" / r.trial_name / "result.json").read_text())
    assert saved["outcome"] == outcome


async def test_verifier_timeout_is_verifier_failed(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", "sleep 30", toml="")
    task = task.model_copy(update={"config": task.config.model_copy(
        update={"verifier": task.config.verifier.model_copy(update={"timeout_sec": 1})})})  # fmt: skip
    r = await trial(task, NopAgent(), tmp_path)
    assert r.outcome == "verifier_failed" and r.error is not None and "timed out" in r.error.message


async def test_gpu_task_is_resources_unavailable(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", WRITE_REWARD_IF_FILE, toml="[environment]\ngpus = 1\n")
    r = await trial(task, OracleAgent(), tmp_path)
    assert r.outcome == "resources_unavailable" and r.reward is None


async def test_oracle_and_nop_on_hello_file(tmp_path: Path) -> None:
    task = load_task(REPO / "examples" / "tasks" / "hello-file")
    ok = await trial(task, OracleAgent(), tmp_path)
    assert ok.graded and ok.reward == 1.0
    assert (tmp_path / "job" / ok.trial_name / "agent" / "oracle.txt").exists()
    collected = tmp_path / "job" / ok.trial_name / "sandbox" / "logs" / "verifier"
    assert (collected / "reward.txt").read_text().strip() == "1"
    nop = await trial(task, NopAgent(), tmp_path, attempt=1)
    assert nop.graded and nop.reward == 0.0


async def test_planted_symlinks_and_test_files_do_not_reach_grading(tmp_path: Path) -> None:
    # The tests write nothing; everything the agent planted must be gone when they run.
    task = make_task(tmp_path / "task", "ls -A /tests; ls -A /logs/verifier; exit 0")
    agent = ScriptAgent(
        "mkdir -p /app/fake && echo 1 > /app/fake/reward.txt && rm -rf /logs/verifier "
        "&& ln -s /app/fake /logs/verifier && mkdir -p /tests && echo evil > /tests/conftest.py"
    )
    r = await trial(task, agent, tmp_path)
    assert r.outcome == "verifier_failed" and r.reward is None
    out = (tmp_path / "job" / r.trial_name / "verifier" / "test-stdout.txt").read_text()
    assert out.split() == ["test.sh"]  # only the shipped tests; an empty reward folder
