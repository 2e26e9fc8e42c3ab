"""The compose task in real trials on docker: main asks its `db` sidecar (built from
environment/db/, reached by name, no network otherwise) for a secret that exists only
there, so the oracle's 1 and the nop agent's 0 both come through the sidecar. A collect
hook runs in db and its artifact is taken from db. Nothing of the trial is left after it,
also when db never turns healthy (an environment error, not a 0). Local and modal refuse
it; a compose file crucible will not run makes the task invalid when it is loaded."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.tasks.harbor.test_runs import run

from crucible.engine.launch import LaunchRefused, prepare_launch
from crucible.engine.request import RunRequest
from crucible.store.layout import ARTIFACTS_DIR, SANDBOX_DIR
from crucible.tasks.hostvars import HostEnv
from crucible.tasks.loader import check_task

TASK = Path(__file__).parent / "tasks" / "compose"


@pytest.fixture
def engine(docker_engine: None) -> Iterator[Any]:
    import docker

    client = docker.from_env()
    yield client
    client.close()


def left_by(engine: Any, job: str) -> list[str]:
    label = {"label": f"crucible.job={job}"}
    return [c.name for c in engine.containers.list(all=True, filters=label)] + [
        n.name for n in engine.networks.list(filters=label)
    ]


@pytest.mark.docker
@pytest.mark.parametrize(("agent", "reward", "visits"), [("oracle", 1.0, "1"), ("nop", 0.0, None)])
async def test_the_answer_comes_from_the_sidecar(
    engine: Any, tmp_path: Path, agent: str, reward: float, visits: str | None
) -> None:
    job = f"compose-{agent}-{tmp_path.name}"[:60]
    req = RunRequest(paths=[TASK], env="docker", agent=agent, jobs_dir=tmp_path, job_name=job)
    (result,) = await run(req)
    assert result.outcome == "graded", result
    assert result.verifier_result is not None
    assert result.verifier_result.rewards == {"reward": reward}
    # The hook counted db's visits in db, before the verifier's own visit.
    count = tmp_path / job / result.trial_name / SANDBOX_DIR / ARTIFACTS_DIR / "tmp/visits.count"
    assert (count.read_text().strip() if count.exists() else None) == visits
    assert left_by(engine, job) == []


@pytest.mark.docker
async def test_a_sidecar_that_never_turns_healthy_is_an_environment_error(
    engine: Any, tmp_path: Path
) -> None:
    task = tmp_path / "compose"
    shutil.copytree(TASK, task)
    compose = task / "environment" / "docker-compose.yaml"
    compose.write_text(compose.read_text().replace("/tmp/ready", "/tmp/never"))
    job = f"compose-sick-{tmp_path.name}"[:60]
    req = RunRequest(
        paths=[task],
        env="docker",
        agent="oracle",
        jobs_dir=tmp_path / "jobs",
        job_name=job,
        env_params={"compose_timeout": "3"},
        max_retries=0,
    )
    (result,) = await run(req)
    assert result.outcome == "sandbox_failed" and result.verifier_result is None
    assert result.error is not None and "compose service 'db'" in result.error.message
    assert left_by(engine, job) == []


async def test_local_and_modal_refuse_a_compose_task_as_not_supported_there(
    tmp_path: Path,
) -> None:
    said: list[Any] = []
    for env in ("local", "modal"):
        said.clear()
        req = RunRequest(paths=[TASK], env=env, agent="oracle", jobs_dir=tmp_path, job_name="l")
        with pytest.raises(LaunchRefused) as refused:
            await prepare_launch(req, on_invalid=lambda path, problems: said.extend(problems))
        assert refused.value.error == "resources_unavailable"
        assert not (tmp_path / "l").exists()
        assert [p.message.split(": ", 1)[0] for p in said] == [
            "verifier.collect.service / artifacts.service",  # db's hook and artifact
            "environment/docker-compose.yaml",
        ]
        for problem in said:
            assert f"is not supported on this provider ('{env}'; runs on: docker)" in (
                problem.message
            )


async def test_a_compose_file_crucible_will_not_run_is_invalid_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = tmp_path / "compose"
    shutil.copytree(TASK, task)
    compose = task / "environment" / "docker-compose.yaml"
    compose.write_text(
        compose.read_text().replace("    expose:", "    privileged: true\n    expose:")
    )
    check = check_task(task)
    (problem,) = check.errors
    assert problem.path == compose
    assert problem.message == "services.db.privileged: refused: privileged containers"
    # The launch refuses it before any sandbox is made, on docker too.
    req = RunRequest(paths=[task], env="docker", agent="oracle", jobs_dir=tmp_path, job_name="j")
    with pytest.raises(LaunchRefused) as refused:
        await prepare_launch(req)
    assert refused.value.error == "task_invalid" and not (tmp_path / "j").exists()
    # Interpolated as at run time: from the task's env and the host variables allowed.
    compose.write_text("services:\n  db:\n    image: ${TEST_DB_IMAGE}\n")
    monkeypatch.delenv("TEST_DB_IMAGE", raising=False)
    # No value: an empty string, as Compose substitutes (and warns), here an empty image.
    unset = check_task(task, HostEnv(["TEST_DB_IMAGE"], os.environ))
    (problem,) = unset.errors
    assert problem.message == "services.db.image: an empty image name"
    (warning,) = unset.warnings
    assert "services.db.image: ${TEST_DB_IMAGE} has no value here (the host has no variable" in (
        warning.message
    )
    assert "Harbor's docker compose runs it with an empty string" in warning.message
    monkeypatch.setenv("TEST_DB_IMAGE", "debian:bookworm-slim")
    assert check_task(task, HostEnv(["TEST_DB_IMAGE"], os.environ)).problems == []
    (warning,) = check_task(task).warnings  # set on the host, but not allowed: never read
    assert "which this run does not allow (pass --task-env TEST_DB_IMAGE" in warning.message
    assert warning.line == 3
