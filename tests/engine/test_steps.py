"""Multi-step tasks ([[steps]]) on real local and docker sandboxes: every step runs in one
sandbox, is graded with its own tests as a one-step trial is, and the trial's reward comes
from the steps' by Harbor's rules (min_reward stops the later steps; 'final' and 'mean')."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.helpers.attack_tasks import attack_trial

from crucible.agents.nop import NopAgent
from crucible.engine.steps import combine, meets
from crucible.records.trial import StepResult, TrialResult
from crucible.records.verifier import VerifierResult
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task
from crucible.tasks.sections import RewardStrategy

TWO_STEP = Path(__file__).resolve().parents[1] / "tasks" / "harbor" / "tasks" / "two-step"
ENVS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture
def env(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_engine")
    return str(request.param)


def two_step(tmp_path: Path, **solves: str) -> Task:
    """A copy of the two-step example, each named step's solve.sh replaced."""
    root = tmp_path / "two-step"
    shutil.copytree(TWO_STEP, root)
    toml = root / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            "[environment]", '[environment]\ndocker_image = "debian:bookworm-slim"'
        )
        + "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n"
    )
    for step, body in solves.items():
        (root / "steps" / step / "solution" / "solve.sh").write_text(
            "#!/usr/bin/env bash\n" + body + "\n"
        )
    return load_task(root)


def stepped(r: TrialResult) -> list[tuple[str, float | None]]:
    out = []
    for s in r.steps or []:
        rewards = s.verifier_result.rewards if s.verifier_result else None
        out.append((s.name, None if rewards is None else rewards.get("reward")))
    return out


@pytest.mark.parametrize("env", ENVS, indirect=True)
async def test_the_oracle_passes_every_step(env: str, tmp_path: Path) -> None:
    r = await attack_trial(
        env, two_step(tmp_path, write="mkdir -p /app; echo one > /app/log.txt"), tmp_path
    )
    assert r.outcome == "graded", r.error
    assert stepped(r) == [("write", 1.0), ("append", 1.0)] and r.reward == 1.0
    trial = tmp_path / "job" / r.trial_name
    on_disk = json.loads((trial / "result.json").read_text())
    assert [s["name"] for s in on_disk["steps"]] == ["write", "append"]
    assert on_disk["steps"][0]["passed_min_reward"] is True
    # Each step graded with its own tests, its files in its own folder.
    for step in ("write", "append"):
        assert (
            trial / "steps" / step / "sandbox/logs/verifier/reward.txt"
        ).read_text().strip() == "1"
        assert (trial / "steps" / step / "agent" / "oracle.txt").is_file()


@pytest.mark.parametrize("env", ENVS, indirect=True)
async def test_nop_gets_zero_and_stops_at_the_gate(env: str, tmp_path: Path) -> None:
    r = await attack_trial(env, two_step(tmp_path), tmp_path, agent=NopAgent())
    assert r.outcome == "graded", r.error
    assert stepped(r) == [("write", 0.0)] and r.reward == 0.0
    assert r.steps is not None and r.steps[0].passed_min_reward is False


@pytest.mark.parametrize("env", ENVS, indirect=True)
async def test_a_step_below_its_min_reward_stops_the_rest(env: str, tmp_path: Path) -> None:
    # Step 1's solution writes the wrong line: step 2 (whose solution would be right) never runs.
    task = two_step(tmp_path, write="mkdir -p /app; echo uno > /app/log.txt")
    r = await attack_trial(env, task, tmp_path)
    assert r.outcome == "graded", r.error
    assert stepped(r) == [("write", 0.0)] and r.reward == 0.0
    assert not (tmp_path / "job" / r.trial_name / "steps" / "append").exists()


# A step-1 agent that answers step 1 and plants step 2's reward and tests, and leaves a
# process behind rewriting the reward; step 2's agent then does nothing.
PLANT = """mkdir -p /app; echo one > /app/log.txt
mkdir -p /logs/verifier /tests
echo 1 > /logs/verifier/reward.txt
printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh
printf 'echo 1 > /logs/verifier/reward.txt\\n' > /app/test.sh
(while true; do echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.05; done) &  # timing-ok: the attack loop
disown -a
"""


@pytest.mark.parametrize("env", ENVS, indirect=True)
async def test_a_reward_planted_in_step_1_does_not_count_for_step_2(
    env: str, tmp_path: Path
) -> None:
    task = two_step(tmp_path, write=PLANT, append="true")
    # Step 2's tests write a reward only on success: a planted one would be all there is.
    (task.tests_dir / "test.sh").write_text(
        '#!/usr/bin/env bash\n[ "$(cat /app/log.txt)" = "$(printf "one\\ntwo")" ]'
        " && echo 1 > /logs/verifier/reward.txt; exit 0\n"
    )
    r = await attack_trial(env, task, tmp_path)
    # Step 2 wrote no reward of its own: nothing planted stood in for it.
    assert r.outcome == "verifier_failed" and r.reward is None and r.counted_reward == 0.0
    assert stepped(r) == [("write", 1.0), ("append", None)]
    assert r.steps is not None and "no reward" in (r.steps[1].error or "")
    # The honest step 2 still passes in the same sandbox after the same plant.
    task2 = two_step(tmp_path / "honest", write=PLANT, append="echo two >> /app/log.txt")
    (task2.tests_dir / "test.sh").write_text((task.tests_dir / "test.sh").read_text())
    r2 = await attack_trial(env, task2, tmp_path / "honest")
    assert r2.outcome == "graded" and stepped(r2) == [("write", 1.0), ("append", 1.0)]


async def test_a_healthcheck_broken_by_step_1_is_verifier_failed(tmp_path: Path) -> None:
    task = two_step(tmp_path, write="mkdir -p /app; echo one > /app/log.txt; rm -f /app/up")
    toml = task.path / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            'name = "append"',
            'name = "append"\n[steps.healthcheck]\ncommand = "test -f /app/up"\n'
            "interval_sec = 0\nretries = 1",
        )
    )
    # /app/up is staged by step 1's workdir/ and removed by step 1's agent.
    (task.step_dir("write") / "workdir").mkdir()
    (task.step_dir("write") / "workdir" / "up").write_text("")
    r = await attack_trial("local", load_task(task.path), tmp_path)
    assert r.outcome == "verifier_failed" and r.retries == 0
    assert r.steps is not None and "healthcheck" in (r.steps[1].error or "")


async def test_a_failing_setup_after_a_step_is_verifier_failed(tmp_path: Path) -> None:
    # Step 2's setup.sh needs /app/log.txt; a step-1 agent that removes it breaks setup in a
    # live sandbox: the attempt's doing, a counted verifier_failed, never a retried gap.
    task = two_step(tmp_path, write="mkdir -p /app; echo one > /app/log.txt")
    toml = task.path / "task.toml"
    toml.write_text(toml.read_text().replace("min_reward = 1.0", ""))
    task = load_task(task.path)
    (task.tests_dir / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (task.step_dir("write") / "solution" / "solve.sh").write_text(
        "#!/bin/bash\nrm -f /app/log.txt\n"
    )
    r = await attack_trial("local", load_task(task.path), tmp_path)
    assert r.outcome == "verifier_failed" and r.reward is None
    assert r.steps is not None and [s.name for s in r.steps] == ["write", "append"]
    assert r.steps[1].error is not None and "setup.sh" in r.steps[1].error


def test_reward_strategies_and_gates() -> None:
    def step(rewards: dict[str, float] | None) -> StepResult:
        return StepResult(
            name="s", verifier_result=None if rewards is None else VerifierResult(rewards=rewards)
        )

    steps = [step({"reward": 1.0, "a": 0.5}), step(None), step({"reward": 0.0})]
    assert combine(RewardStrategy.final, steps) == {"reward": 0.0}
    # mean: per key over the graded steps, a key a step lacks counting 0.
    assert combine(RewardStrategy.mean, steps) == {"reward": 0.5, "a": 0.25}
    assert combine(None, steps) == combine(RewardStrategy.mean, steps)
    assert combine(RewardStrategy.mean, [step(None)]) is None
    # final: the last step that ran, even when it has no rewards (its grading failed).
    assert combine(RewardStrategy.final, [*steps, step(None)]) is None
    assert meets(None, None) and meets(1.0, {"reward": 1.0}) and not meets(1.0, {"x": 1.0})
    assert meets({"a": 0.5}, {"a": 0.5, "reward": 0.0}) and not meets({"a": 0.5}, None)


def test_the_steps_agents_add_up() -> None:
    from crucible.engine.steps import summed
    from crucible.records.trial import AgentError, AgentResult

    one = AgentResult(n_input_tokens=10, cost_usd=0.5, n_turns=2)
    two = AgentResult(n_input_tokens=5, error=AgentError(type="timeout", message="t"))
    total = summed([one, two])
    assert (total.n_input_tokens, total.cost_usd, total.n_turns) == (15, 0.5, 2)
    assert total.n_output_tokens is None and total.error is not None


def test_the_report_has_a_column_per_step(tmp_path: Path) -> None:
    """Real jobs on local sandboxes (oracle: every step 1; nop: stopped at step 1's gate),
    then `crucible report`: a column per step, its mean over the trials that graded it."""
    from typer.testing import CliRunner

    from crucible.cli.main import app

    runner = CliRunner()
    jobs = str(tmp_path / "jobs")
    for agent in ("oracle", "nop"):
        args = ["run", str(TWO_STEP), "-a", agent, "-k", "2", "-c", "1", "--jobs-dir", jobs]
        out = runner.invoke(app, [*args, "--job-name", agent])
        assert out.exit_code == 0, out.output
    out = runner.invoke(app, ["report", "oracle", "nop", "--jobs-dir", jobs, "-f", "markdown"])
    assert out.exit_code == 0, out.output
    table = out.output.split("## By step")[1].split("##")[0]
    assert "| job | task | step write | step append |" in table
    assert "| oracle | two-step | 1.000 (2/2) | 1.000 (2/2) |" in table
    assert "| nop | two-step | 0.000 (2/2) | - |" in table


def test_a_step_sees_its_own_instruction_tests_solution_and_fields(tmp_path: Path) -> None:
    from crucible.engine.steps import step_task

    task = two_step(tmp_path)
    toml = task.path / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            'name = "append"', 'name = "append"\n[steps.agent]\ntimeout_sec = 7\n'
        )
    )
    task = load_task(task.path)
    write, append = (step_task(task, s) for s in task.steps)
    assert write.instruction.startswith('Write "one"') and append.instruction.startswith("Append")
    assert write.tests_dir == task.step_dir("write") / "tests"
    assert append.tests_dir == task.path / "tests"  # no tests of its own: the task's
    assert append.solution_dir == task.step_dir("append") / "solution"
    # [steps.agent] over [agent]; what the step leaves unset is the task's.
    assert (write.agent_timeout_sec, append.agent_timeout_sec) == (60, 7)
    assert append.verifier_timeout_sec == task.verifier_timeout_sec == 60


def test_a_multi_step_task_is_refused_nothing_of_its_own(tmp_path: Path) -> None:
    from crucible.tasks.support import unsupported_features

    task = two_step(tmp_path)
    toml = task.path / "task.toml"
    base = toml.read_text()
    variants = [
        base,
        base.replace(
            'name = "append"', 'name = "append"\n[steps.verifier]\nenvironment_mode = "separate"\n'
        ),
        base + '[metadata.crucible]\nstages = [{ kind = "judge" }]\n',
        base.replace('name = "append"', 'name = "append"\nartifacts = ["/app/x"]'),
    ]
    for text in variants:
        toml.write_text(text)
        for provider in ("local", "docker", "modal"):
            assert unsupported_features(load_task(task.path), provider) == []
