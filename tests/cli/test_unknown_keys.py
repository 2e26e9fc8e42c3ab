"""A typo in a `--config` key or an `--env-param` key is a usage error (exit 2) that names
the closest known key: it is never silently ignored (`attemps = 3` once ran one attempt,
`userlnd=host` ran on the default userland)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.engine.request import RunRequest
from crucible.errors import ExitCode

HELLO = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "hello-file"


def _run(*args: str) -> tuple[int, dict[str, str]]:
    res = CliRunner().invoke(app, [*args, "--json"])
    lines = res.stderr.strip().splitlines()
    return res.exit_code, (json.loads(lines[-1]) if lines else {})


def test_a_config_key_typo_names_the_closest_key() -> None:
    with pytest.raises(ValueError, match="unknown config key 'attemps': did you mean 'attempts'"):
        RunRequest.from_sources({}, {"attemps": 3}, env_params={}, agent_kwargs={})


def test_a_command_line_only_option_in_a_config_file_says_so() -> None:
    with pytest.raises(ValueError, match="'job_name' is a command-line option: pass --job-name"):
        RunRequest.from_sources({}, {"job_name": "j"}, env_params={}, agent_kwargs={})


def test_run_refuses_a_config_typo_before_anything_runs(tmp_path: Path) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text("attemps = 3\n")
    jobs = tmp_path / "jobs"
    code, err = _run("run", str(HELLO), "--config", str(cfg), "--jobs-dir", str(jobs))
    assert code == ExitCode.USAGE, err
    assert err["error"] == "usage" and "did you mean 'attempts'?" in err["message"]
    assert not jobs.exists() or not any(jobs.iterdir())


@pytest.mark.parametrize("where", ["cli", "config"])
def test_run_refuses_an_env_param_typo(tmp_path: Path, where: str) -> None:
    jobs = tmp_path / "jobs"
    args = ["run", str(HELLO), "--jobs-dir", str(jobs)]
    if where == "cli":
        args += ["--env-param", "userlnd=host"]
    else:
        (tmp_path / "run.toml").write_text('[env_params]\nuserlnd = "host"\n')
        args += ["--config", str(tmp_path / "run.toml")]
    code, err = _run(*args)
    assert code == ExitCode.USAGE, err
    assert "unknown local env-param 'userlnd': did you mean 'userland'?" in err["message"]
    assert not jobs.exists() or not any(jobs.iterdir())


def test_tasks_check_and_sandboxes_check_refuse_an_env_param_typo() -> None:
    code, err = _run("tasks", "check", "--run", str(HELLO), "--env-param", "userlnd=host")
    assert code == ExitCode.USAGE and "did you mean 'userland'?" in err["message"], err
    code, err = _run("sandboxes", "check", "--env", "docker", "--env-param", "imgae=x")
    assert code == ExitCode.USAGE and "did you mean 'image'?" in err["message"], err


def test_known_env_params_still_run(tmp_path: Path) -> None:
    code, err = _run("run", str(HELLO), "--jobs-dir", str(tmp_path), "--env-param", "userland=host")
    assert code == 0, err
