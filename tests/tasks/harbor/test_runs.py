"""Harbor's defaults in real trials: the network when a task sets none (and `--no-network`
taking it away), ${VAR} values reaching the sandbox, and an image's ENTRYPOINT running
on docker. Real sandboxes, the oracle agent, the tasks' own tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from crucible.engine.launch import LaunchRefused, prepare_launch
from crucible.engine.request import RunRequest
from crucible.records.trial import TrialResult
from crucible.store.layout import iter_trial_results, read_job_config

TASKS = Path(__file__).parent / "tasks"


async def run(req: RunRequest) -> list[TrialResult]:
    plan = await prepare_launch(req)
    try:
        await plan.runner().run()
    finally:
        await plan.provider.aclose()
    assert req.jobs_dir is not None and req.job_name is not None
    return iter_trial_results(req.jobs_dir / req.job_name)


def rewards(results: list[TrialResult]) -> list[object]:
    return [(r.outcome, r.verifier_result.rewards if r.verifier_result else None) for r in results]


async def test_no_network_mode_means_the_network_and_the_job_can_lock_it(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    base = RunRequest(paths=[TASKS / "network-default"], env="local", agent="oracle", jobs_dir=jobs)
    # The test writes 1 when the sandbox has an interface besides loopback.
    opened = await run(base.model_copy(update={"job_name": "open"}))
    assert rewards(opened) == [("graded", {"reward": 1.0})]
    locked = await run(base.model_copy(update={"job_name": "locked", "no_network": True}))
    assert rewards(locked) == [("graded", {"reward": 0.0})]
    assert read_job_config(jobs / "locked").no_network is True
    assert read_job_config(jobs / "open").no_network is False
    # A resumed job keeps its policy; asking for another is refused.
    with pytest.raises(LaunchRefused, match="no_network=True"):
        await prepare_launch(RunRequest(resume="locked", jobs_dir=jobs, no_network=False))


async def test_env_templates_reach_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARBOR_FROM_HOST", "host-value")
    monkeypatch.delenv("HARBOR_UNSET_VAR", raising=False)
    monkeypatch.delenv("HARBOR_ANSWER", raising=False)
    req = RunRequest(
        paths=[TASKS / "env-vars"],
        env="local",
        agent="oracle",
        jobs_dir=tmp_path,
        job_name="e",
        task_env=["HARBOR_FROM_HOST", "HARBOR_UNSET_VAR", "HARBOR_ANSWER"],
    )
    # solve.sh writes "$FROM_HOST $WITH_DEFAULT $ANSWER"; test.sh compares with $EXPECTED.
    assert rewards(await run(req)) == [("graded", {"reward": 1.0})]


@pytest.mark.docker
async def test_the_image_entrypoint_runs_on_docker(docker_engine: None, tmp_path: Path) -> None:
    req = RunRequest(
        paths=[TASKS / "entrypoint"], env="docker", agent="oracle", jobs_dir=tmp_path, job_name="d"
    )
    try:
        # The test writes 1 when the ENTRYPOINT's set-up (/etc/entrypoint-ran) happened.
        assert rewards(await run(req)) == [("graded", {"reward": 1.0})]
    finally:
        from crucible.sandboxes.docker.provider import DockerProvider

        provider = DockerProvider()
        await provider.cleanup("d")
        await provider.aclose()
