"""The parity suite (examples/parity/): task shapes from public Harbor repositories, each with
the rewards Harbor gives it under oracle and nop ([metadata] expected_oracle_reward /
expected_nop_reward). Each agent runs once per provider, as real jobs through `crucible run`
on local (bubblewrap, image mode) and docker; every trial must score what its task says, so
the two providers agree with Harbor and with each other (the /etc/hosts shape included).
The compose sidecar runs on docker only: local names it unsupported and runs the rest."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.records.trial import TrialResult
from crucible.store.layout import iter_trial_results
from crucible.tasks.dataset import check_tasks

PARITY = Path(__file__).resolve().parents[2] / "examples" / "parity"
NAMES = sorted(p.name for p in PARITY.iterdir() if (p / "task.toml").is_file())
DOCKER_ONLY = {"compose-sidecar"}
ENVS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


def test_the_suite_is_all_there_and_valid() -> None:
    assert NAMES == [
        "compose-sidecar",
        "etc-hosts-entrypoint",
        "multi-reward",
        "multi-step-shared-tests",
    ]
    checks = check_tasks([PARITY])
    assert [(c.name, c.valid, c.warnings) for c in checks] == [(n, True, []) for n in NAMES]
    readme = (PARITY / "README.md").read_text()
    for c in checks:  # each shape names where it comes from
        assert c.task is not None and c.task.metadata.get("source"), c.name
        assert f"`{c.name}`" in readme, c.name


@pytest.fixture
def env(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_engine")
    else:
        request.getfixturevalue("buildah")  # local runs the tasks on their images
    return str(request.param)


def _run(env: str, agent: str, jobs: Path) -> tuple[str, list[TrialResult]]:
    args = ["run", str(PARITY), "-a", agent, "-e", env, "--jobs-dir", str(jobs)]
    args += ["--job-name", f"parity-{env}-{agent}", "-c", "2", "--skip-invalid"]
    out = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    return out.output, list(iter_trial_results(jobs / f"parity-{env}-{agent}", []))


@pytest.mark.slow
@pytest.mark.parametrize("env", ENVS, indirect=True)
def test_each_shape_scores_what_harbor_gives(env: str, tmp_path: Path) -> None:
    expected_tasks = [n for n in NAMES if env == "docker" or n not in DOCKER_ONLY]
    for agent in ("oracle", "nop"):
        output, results = _run(env, agent, tmp_path / "jobs")
        assert sorted(r.task_name for r in results) == expected_tasks, output
        for r in results:
            task = _metadata(r.task_name)
            assert r.outcome == "graded", (r.task_name, r.error)
            assert r.reward == task[f"expected_{agent}_reward"], (agent, r.task_name, r.reward)
            if r.task_name == "multi-step-shared-tests":  # every step graded, none skipped
                want = 2 if agent == "oracle" else 1  # nop stops at step 1's min_reward
                assert r.steps is not None and len(r.steps) == want
        multi = next(r for r in results if r.task_name == "multi-reward")
        assert multi.verifier_result is not None
        value = 1.0 if agent == "oracle" else 0.0
        assert multi.verifier_result.rewards == {"correctness": value, "style": value}
        # Mixed reward keys: the trial without `reward` is counted, and said to be.
        assert "(1 graded without 'reward': counted 0)" in output, output
        if env == "local":
            assert "unsupported task" in output and "compose-sidecar" in output


def _metadata(name: str) -> dict[str, object]:
    from crucible.tasks.loader import load_task

    return dict(load_task(PARITY / name).metadata)
