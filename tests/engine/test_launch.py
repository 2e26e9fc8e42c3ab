"""The launch layer: where options come from (CLI, config file, defaults), resume rules
and refusals, on real task folders and the simulated provider."""

from __future__ import annotations

from pathlib import Path

import pytest

from crucible.engine.launch import LaunchRefused, prepare_launch
from crucible.engine.request import RunRequest
from crucible.errors import ExitCode
from crucible.records.defaults import DEFAULT_AGENT, DEFAULT_ATTEMPTS, DEFAULT_MAX_RETRIES
from crucible.tasks.scaffold import scaffold_task


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    for name in ("a", "b"):
        scaffold_task(name, root)
    return root


def test_cli_wins_over_config_and_pairs_over_both() -> None:
    req = RunRequest.from_sources(
        {"attempts": 3, "model": None, "temperature": 0.5, "paths": None},
        {
            "attempts": 9,
            "max-retries": 5,
            "model": "m-from-config",
            "paths": ["x"],
            "env_params": {"k": 1, "j": "config"},
            "agent_kwargs": {"temperature": 0.1, "extra": "config"},
        },
        env_params={"j": "cli"},
        agent_kwargs={"extra": "cli"},
    )
    assert (req.attempts, req.max_retries, req.paths) == (3, 5, [Path("x")])
    assert req.env_params == {"k": "1", "j": "cli"}
    assert req.agent_kwargs == {"model": "m-from-config", "temperature": 0.1, "extra": "cli"}


async def test_defaults_then_resume_as_recorded(tasks: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    req = RunRequest(paths=[tasks], env="simulated", jobs_dir=jobs, job_name="j1")
    plan = await prepare_launch(req)
    assert (plan.cfg.agent, plan.cfg.attempts) == (DEFAULT_AGENT, DEFAULT_ATTEMPTS)
    assert plan.cfg.max_retries == plan.options.max_retries == DEFAULT_MAX_RETRIES
    assert not plan.resumed and not (jobs / "j1").exists()  # planning writes nothing
    await plan.runner().run()
    await plan.provider.aclose()

    again = await prepare_launch(RunRequest(resume="j1", jobs_dir=jobs, max_retries=7))
    assert again.resumed and again.cfg.env == "simulated" and again.options.max_retries == 7
    assert [t.name for t in again.tasks] == ["a", "b"]  # task paths from job.json
    await again.provider.aclose()

    with pytest.raises(LaunchRefused) as changed:
        await prepare_launch(RunRequest(resume="j1", jobs_dir=jobs, attempts=2))
    assert changed.value.code == ExitCode.USAGE and "attempts=1" in changed.value.message


async def test_refusals_carry_exit_code_and_error(tasks: Path, tmp_path: Path) -> None:
    cases = [
        (RunRequest(jobs_dir=tmp_path), ExitCode.USAGE, "usage"),
        (RunRequest(resume="ghost", jobs_dir=tmp_path), ExitCode.NOT_FOUND, "not_found"),
        (RunRequest(paths=[tasks], attempts=-1, jobs_dir=tmp_path), ExitCode.USAGE, "usage"),
        (RunRequest(paths=[tasks], env="nope", jobs_dir=tmp_path), ExitCode.USAGE, "usage"),
        (RunRequest(paths=[tasks], include=["zz*"], jobs_dir=tmp_path), ExitCode.NOT_FOUND,
         "not_found"),
    ]  # fmt: skip
    for req, code, error in cases:
        with pytest.raises(LaunchRefused) as refused:
            await prepare_launch(req)
        assert (refused.value.code, refused.value.error) == (code, error), req
    (tasks / "a" / "task.toml").write_text("not = [valid")
    seen: list[Path] = []
    with pytest.raises(LaunchRefused) as invalid:
        await prepare_launch(
            RunRequest(paths=[tasks], env="simulated", jobs_dir=tmp_path),
            on_invalid=lambda path, problems: seen.append(path),
        )
    assert invalid.value.error == "task_invalid" and seen == [tasks / "a"]
    plan = await prepare_launch(
        RunRequest(paths=[tasks], env="simulated", jobs_dir=tmp_path, skip_invalid=True)
    )
    assert [t.name for t in plan.tasks] == ["b"]


async def test_the_tamper_policy_is_stored_and_kept_on_resume(tasks: Path, tmp_path: Path) -> None:
    """`--tampered zero` reaches every trial's plan, is written to job.json, and a resume
    runs under it: asking for `flag` on resume is refused (no quiet downgrade)."""
    jobs = tmp_path / "jobs"
    req = RunRequest.from_sources(
        {"paths": [tasks], "env": "simulated", "jobs_dir": jobs, "job_name": "z",
         "tampered": "zero"},
        {}, env_params={}, agent_kwargs={},
    )  # fmt: skip
    plan = await prepare_launch(req)
    runner = plan.runner()
    assert {p.tampered for p in runner.plan()} == {"zero"}
    await runner.run()
    await plan.provider.aclose()
    assert '"tampered": "zero"' in (jobs / "z" / "job.json").read_text()

    again = await prepare_launch(RunRequest(resume="z", jobs_dir=jobs))
    assert again.cfg.tampered == "zero" and {p.tampered for p in again.runner().plan()} == {"zero"}
    await again.provider.aclose()
    with pytest.raises(LaunchRefused) as changed:
        await prepare_launch(RunRequest(resume="z", jobs_dir=jobs, tampered="flag"))
    assert changed.value.code == ExitCode.USAGE and "tampered='zero'" in changed.value.message
    with pytest.raises(ValueError):
        RunRequest(tampered="sometimes")  # type: ignore[arg-type]


async def test_a_new_job_defaults_to_flag(tasks: Path, tmp_path: Path) -> None:
    plan = await prepare_launch(RunRequest(paths=[tasks], env="simulated", jobs_dir=tmp_path))
    assert plan.cfg.tampered == "flag"
    await plan.provider.aclose()
