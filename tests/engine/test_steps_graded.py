"""Multi-step tasks graded per step in a separate verifier sandbox, and with the task's
host-side stages after every step, on real local and docker sandboxes
(engine/grading/grader.py). The attacks: a step-1 agent that tampers with its own sandbox
cannot change what step 2's separate verifier sees; a step-2 submission that fails a
contracts gate makes step 2's reward 0 with the stage's result in steps[1]."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.engine.test_separate_verifier import ATTACKS
from tests.engine.test_steps import stepped
from tests.helpers.attack_tasks import attack_trial

from crucible.agents.nop import NopAgent
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task

HARBOR = Path(__file__).resolve().parents[1] / "tasks" / "harbor" / "tasks"
SQUARES = Path(__file__).resolve().parents[1] / "verifiers" / "tasks" / "modal-squares"
ENVS = ["local", pytest.param("docker", marks=pytest.mark.docker)]

SEPARATE = """artifacts = ["/app/log.txt"]
[agent]
timeout_sec = 60
[verifier]
timeout_sec = 60
environment_mode = "separate"
"""

# Step 2's honest verifier: perl (with a module), cat, grep and bash all have their say.
HONEST_APPEND = (
    'perl -Mstrict -e 1 && [ "$(cat /app/log.txt)" = "$(printf "one\\ntwo")" ]'
    " && grep -qx two /app/log.txt"
    " && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt"
)


@pytest.fixture
def env(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_engine")
    return str(request.param)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def two_step(root: Path, toml: str, **solves: str) -> Task:
    """A copy of the two-step example with `toml` appended and, per named step, its
    solve.sh replaced (a bash body)."""
    shutil.copytree(HARBOR / "two-step", root)
    task_toml = root / "task.toml"
    head, steps = task_toml.read_text().split("[environment]")
    task_toml.write_text(f'{head}{toml}[environment]\ndocker_image = "debian:bookworm-slim"{steps}')
    for step, body in solves.items():
        _write(root / "steps" / step / "solution" / "solve.sh", f"#!/usr/bin/env bash\n{body}\n")
    return load_task(root)


# -- a separate verifier per step ---------------------------------------------------------


@pytest.mark.parametrize("env", ENVS, indirect=True)
async def test_each_step_is_graded_in_a_fresh_verifier_sandbox(env: str, tmp_path: Path) -> None:
    task = two_step(tmp_path / "t", SEPARATE)
    r = await attack_trial(env, task, tmp_path / "oracle")
    assert r.outcome == "graded", r.error
    assert stepped(r) == [("write", 1.0), ("append", 1.0)] and r.reward == 1.0
    assert r.steps is not None
    assert [s.verifier_environment_mode for s in r.steps] == ["separate", "separate"]
    trial = tmp_path / "oracle" / "job" / r.trial_name
    # Step 2's setup.sh needs step 1's file: the agent's sandbox lived on between steps,
    # while each verifier got only that step's artifact.
    artifact = "sandbox/artifacts/app/log.txt"
    assert (trial / "steps/write" / artifact).read_text() == "one\n"
    assert (trial / "steps/append" / artifact).read_text() == "one\ntwo\n"
    for step in ("write", "append"):
        reward = trial / "steps" / step / "sandbox/logs/verifier/reward.txt"
        assert reward.read_text().strip() == "1"
    on_disk = json.loads((trial / "result.json").read_text())
    assert [s["verifier_environment_mode"] for s in on_disk["steps"]] == ["separate"] * 2

    nop = await attack_trial(env, task, tmp_path / "nop", agent=NopAgent())
    assert nop.outcome == "graded" and stepped(nop) == [("write", 0.0)] and nop.reward == 0.0


@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize("env", ENVS, indirect=True)
async def test_a_step_1_agent_cannot_reach_step_2s_separate_verifier(
    env: str, attack: str, tmp_path: Path
) -> None:
    # Step 1 answers correctly (its gate passes), then plants a reward and tests, shadows a
    # perl module, replaces binaries, moves the loader or leaves a process; step 2 then
    # does nothing (must stay 0) or its honest part (must stay 1).
    plant = f"echo one > /app/log.txt\n{ATTACKS[attack]}"
    for append, want in (("true", 0.0), ("echo two >> /app/log.txt", 1.0)):
        root = tmp_path / f"{want:g}"
        task = two_step(root / "t", SEPARATE, write=plant, append=append)
        _write(
            task.step_dir("append") / "tests" / "test.sh", "#!/usr/bin/env bash\n" + HONEST_APPEND
        )
        r = await attack_trial(env, load_task(task.path), root)
        if env == "docker" and attack == "loader_moved":
            # Nothing dynamically linked runs in the agent's sandbox any more: step 2's
            # setup fails there, the attempt's doing (a counted 0), never a reward.
            assert r.outcome == "verifier_failed" and r.counted_reward == 0.0
            assert stepped(r) == [("write", 1.0), ("append", None)]
            continue
        assert r.outcome == "graded", r.error
        assert stepped(r) == [("write", 1.0), ("append", want)]


@pytest.mark.docker
async def test_the_same_plant_fools_a_step_graded_in_place(
    tmp_path: Path, docker_engine: None
) -> None:
    # The control: graded in the agent's own container, step 2's verifier runs the grep
    # step 1 replaced, which is why a step that must not trust its sandbox is separate.
    toml = SEPARATE.replace('environment_mode = "separate"', 'environment_mode = "shared"')
    plant = f"echo one > /app/log.txt\n{ATTACKS['bin_replaced']}"
    task = two_step(tmp_path / "t", toml, write=plant, append="true")
    _write(
        task.step_dir("append") / "tests" / "test.sh",
        "#!/usr/bin/env bash\ngrep -qx two /app/log.txt && echo 1 > /logs/verifier/reward.txt"
        " || echo 0 > /logs/verifier/reward.txt\n",
    )
    r = await attack_trial("docker", load_task(task.path), tmp_path)
    assert r.outcome == "graded" and stepped(r) == [("write", 1.0), ("append", 1.0)]
    assert r.steps is not None and r.steps[1].verifier_environment_mode == "shared"


async def test_a_step_may_ask_for_its_own_separate_verifier(tmp_path: Path) -> None:
    # Step 1 graded in place, step 2 in a sandbox of its own; in between, the agent of step 2
    # sees neither step 1's tests nor its reward files.
    task = two_step(
        tmp_path / "t",
        'artifacts = ["/app/log.txt"]\n',
        append="echo two >> /app/log.txt; ls -A /tests /logs/verifier > /logs/agent/seen.txt",
    )
    toml = task.path / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            'name = "append"', 'name = "append"\n[steps.verifier]\nenvironment_mode = "separate"'
        )
    )
    r = await attack_trial("local", load_task(task.path), tmp_path)
    assert r.outcome == "graded", r.error
    assert r.steps is not None
    assert [s.verifier_environment_mode for s in r.steps] == ["shared", "separate"]
    assert stepped(r) == [("write", 1.0), ("append", 1.0)]
    seen = tmp_path / "job" / r.trial_name / "steps/append/sandbox/logs/agent/seen.txt"
    assert seen.read_text() == "/logs/verifier:\n\n/tests:\n"


# -- host-side stages after every step ----------------------------------------------------

STAGES = """multi_step_reward_strategy = "mean"
[metadata.crucible]
submission = ["/app/main.py"]
[[metadata.crucible.stages]]
kind = "contracts"
require = ["function", "gpu"]
"""


def staged(root: Path, second: str, toml: str = STAGES) -> Task:
    """Two steps on the modal-squares example: step 1 writes its good program, step 2
    rewrites it as `second`; one test script (the program is there and defines square)."""
    root.mkdir(parents=True)
    (root / "task.toml").write_text(
        toml + "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n[environment]\n"
        'docker_image = "debian:bookworm-slim"\nworkdir = "/app"\nnetwork_mode = "no-network"\n'
        '[[steps]]\nname = "port"\nmin_reward = 1.0\n[[steps]]\nname = "refactor"\n'
    )
    shutil.copytree(SQUARES / "tests", root / "tests")
    good = (SQUARES / "solution" / "main.py").read_text()
    for step, program in (("port", good), ("refactor", second)):
        _write(root / "steps" / step / "instruction.md", "Port the squares job to Modal.\n")
        _write(root / "steps" / step / "solution" / "main.py", program)
        _write(
            root / "steps" / step / "solution" / "solve.sh",
            "#!/usr/bin/env bash\nmkdir -p /app && cp /solution/main.py /app/main.py\n",
        )
    return load_task(root)


NO_GPU = (SQUARES / "solution" / "main.py").read_text().replace('gpu="A10G", ', "")


@pytest.mark.parametrize("env", ENVS, indirect=True)
async def test_a_step_whose_submission_fails_the_gate_gets_0(env: str, tmp_path: Path) -> None:
    r = await attack_trial(env, staged(tmp_path / "t", NO_GPU), tmp_path)
    assert r.outcome == "graded", r.error
    # Step 2's test script passed (1), its program lost the GPU: the gate made it 0.
    assert stepped(r) == [("port", 1.0), ("refactor", 0.0)] and r.reward == 0.5
    trial = tmp_path / "job" / r.trial_name
    steps = json.loads((trial / "result.json").read_text())["steps"]
    first, second = (s["verifier_result"] for s in steps)
    assert [(s["name"], s["status"]) for s in first["stages"]] == [
        ("script", "passed"),
        ("contracts", "passed"),
    ]
    assert second["script_rewards"] == {"reward": 1.0}
    assert [(s["name"], s["status"]) for s in second["stages"]] == [
        ("script", "passed"),
        ("contracts", "failed"),
    ]
    assert second["submission"]["files"] == ["/app/main.py"]
    # Each step's submission is its own, taken before its grading.
    for step, program in (("port", "gpu="), ("refactor", "")):
        got = (trial / "steps" / step / "sandbox/submission/app/main.py").read_text()
        assert ("gpu=" in got) == bool(program)


async def test_min_reward_gates_on_the_rewards_after_the_stages(tmp_path: Path) -> None:
    # The first step's program fails the gate: its script reward is 1, its reward 0, below
    # its min_reward, so the second step never runs.
    task = staged(tmp_path / "t", NO_GPU)
    (task.step_dir("port") / "solution" / "main.py").write_text(NO_GPU)
    r = await attack_trial("local", load_task(task.path), tmp_path)
    assert r.outcome == "graded", r.error
    assert stepped(r) == [("port", 0.0)] and r.reward == 0.0
    assert r.steps is not None and r.steps[0].passed_min_reward is False
    assert r.steps[0].verifier_result is not None
    assert r.steps[0].verifier_result.script_rewards == {"reward": 1.0}


async def test_a_stage_that_cannot_run_ends_the_trial_with_its_kind(tmp_path: Path) -> None:
    # A judge whose endpoint is down (nothing listens on port 9): model_failed, as in a
    # one-step trial, with the stage's error kept in the step's record.
    toml = STAGES + (
        '[[metadata.crucible.stages]]\nkind = "judge"\nmodel = "m"\n'
        'base_url = "http://127.0.0.1:9/v1"\nmax_retries = 0\n'
    )
    r = await attack_trial("local", staged(tmp_path / "t", NO_GPU, toml), tmp_path)
    assert r.outcome == "model_failed" and r.reward is None
    assert r.steps is not None and len(r.steps) == 1 and r.steps[0].error
    vr = r.steps[0].verifier_result
    assert vr is not None and vr.rewards is None
    assert [(s.name, s.status) for s in vr.stages or []][-1] == ("judge", "error")


# -- what tasks check says ----------------------------------------------------------------


def test_tasks_check_no_longer_refuses_them(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from crucible.cli.main import app
    from crucible.tasks.support import unsupported_features

    separate = two_step(tmp_path / "sep", SEPARATE)
    stages = staged(tmp_path / "stages", NO_GPU)
    for task in (separate, stages):
        for provider in ("local", "docker", "modal"):
            assert unsupported_features(task, provider) == []
    out = CliRunner().invoke(app, ["tasks", "check", str(tmp_path)], terminal_width=400)
    assert out.exit_code == 0, out.output
    assert "2 valid" in out.output and "not supported" not in out.output
    out = CliRunner().invoke(app, ["tasks", "check", "--json", str(tmp_path / "sep")])
    features = {f["field"]: f for f in json.loads(out.output)["tasks"][0]["features"]}
    assert features["verifier.environment_mode"]["supported_on"] == ["local", "docker", "modal"]


# -- which verifier a step gets (no sandbox) ----------------------------------------------


def test_a_steps_verifier_follows_harbors_precedence(tmp_path: Path) -> None:
    from crucible.engine.spec import verifier_spec
    from crucible.engine.steps import step_task

    task = two_step(
        tmp_path / "t",
        'artifacts = ["/app/a"]\n[verifier]\nenvironment_mode = "separate"\nenv = { A = "1", B = "1" }\n'
        '[[verifier.collect]]\ncommand = "true"\n[verifier.environment]\ndocker_image = "task-v"\n',
    )
    toml = task.path / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            'name = "append"',
            'name = "append"\nartifacts = ["/app/b"]\n[steps.verifier]\nenv = { B = "2" }\n'
            'network_mode = "no-network"\n[[steps.verifier.collect]]\ncommand = "false"\n'
            "[steps.verifier.environment]\ncpus = 2\n",
        )
    )
    task = load_task(task.path)
    write, append = task.steps

    def spec(step: object) -> tuple[str | None, Path | None, float, str]:
        s = verifier_spec(task, job_id="j", trial_id="t", step=step)  # type: ignore[arg-type]
        return s.image, s.dockerfile_dir, s.cpus, s.trial_id

    # The task's [verifier.environment] image, unless the step's own tests bring a Dockerfile.
    assert spec(write) == ("task-v", None, 1, "t__verifier__write")
    assert spec(append)[:3] == ("task-v", None, 2)  # the step's resources, no image of its own
    (task.step_dir("append") / "tests").mkdir()
    (task.step_dir("append") / "tests" / "Dockerfile").write_text("FROM x\nWORKDIR /w\n")
    s = verifier_spec(task, job_id="j", trial_id="t", step=append)
    assert (s.image, s.dockerfile_dir, s.workdir) == (None, task.step_dir("append") / "tests", "/w")
    assert s.network == "none"  # [steps.verifier].network_mode: the phase's own policy
    # The step's view: env tables merged, collect hooks and artifacts the task's then its own.
    view = step_task(task, append)
    assert view.config.verifier.env == {"A": "1", "B": "2"}
    assert [h.command for h in view.config.verifier.collect] == ["true", "false"]
    assert view.config.artifacts == ["/app/a", "/app/b"]
