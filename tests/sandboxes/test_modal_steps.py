"""A multi-step task through the modal provider (the SDK stand-in): the same
provider-agnostic path as local and docker, every step in one sandbox."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.sandboxes.modal_standin import World
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.sandboxes.modal import provider as modal_provider

HARBOR = Path(__file__).resolve().parents[1] / "tasks" / "harbor" / "tasks"


@pytest.fixture
def cloud(standin: tuple[Any, World], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, World]:
    """The stand-in (conftest's, its token in the environment) as the modal SDK crucible loads."""
    monkeypatch.setattr(modal_provider, "load_sdk", lambda: standin[0])
    return standin


def _run(jobs: Path, task: Path, agent: str) -> dict[str, Any]:
    res = CliRunner().invoke(
        app,
        ["run", str(task), "--agent", agent, "--env", "modal", "--env-param",
         "app_name=crucible-test", "--jobs-dir", str(jobs), "--job-name", agent, "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, (res.stdout, res.stderr)
    (result,) = [json.loads(p.read_text()) for p in (jobs / agent).glob("*/result.json")]
    return result  # type: ignore[no-any-return]


def _steps(result: dict[str, Any]) -> list[tuple[str, float | None]]:
    return [
        (s["name"], ((s["verifier_result"] or {}).get("rewards") or {}).get("reward"))
        for s in result["steps"]
    ]


def test_a_two_step_task_runs_on_modal(cloud: tuple[Any, World], tmp_path: Path) -> None:
    task = tmp_path / "two-step"
    shutil.copytree(HARBOR / "two-step", task)
    result = _run(tmp_path / "jobs", task, "oracle")
    assert result["outcome"] == "graded", result.get("error")
    assert _steps(result) == [("write", 1.0), ("append", 1.0)]
    assert result["verifier_result"]["rewards"] == {"reward": 1.0}
    nop = _run(tmp_path / "jobs", task, "nop")
    assert nop["outcome"] == "graded" and _steps(nop) == [("write", 0.0)]
    assert nop["verifier_result"]["rewards"] == {"reward": 0.0}


def test_a_reward_planted_in_step_1_does_not_count_for_step_2_on_modal(
    cloud: tuple[Any, World], tmp_path: Path
) -> None:
    task = tmp_path / "two-step"
    shutil.copytree(HARBOR / "two-step", task)
    (task / "steps" / "write" / "solution" / "solve.sh").write_text(
        "#!/usr/bin/env bash\necho one > /app/log.txt\n"
        "mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt\n"
        "printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh\n"
    )
    (task / "steps" / "append" / "solution" / "solve.sh").write_text("#!/usr/bin/env bash\ntrue\n")
    # Step 2's tests write a reward only on success: a planted one would be all there is.
    (task / "tests" / "test.sh").write_text(
        '#!/usr/bin/env bash\n[ "$(cat /app/log.txt)" = "$(printf "one\\ntwo")" ]'
        " && echo 1 > /logs/verifier/reward.txt; exit 0\n"
    )
    res = CliRunner().invoke(
        app,
        ["run", str(task), "--agent", "oracle", "--env", "modal", "--env-param",
         "app_name=crucible-test", "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "p"],
    )  # fmt: skip
    assert res.exit_code == 1, res.stdout  # every trial ended in an error: nothing graded
    (path,) = (tmp_path / "jobs" / "p").glob("*/result.json")
    result = json.loads(path.read_text())
    assert result["outcome"] == "verifier_failed" and result["verifier_result"] is None
    assert _steps(result) == [("write", 1.0), ("append", None)]


def test_each_step_is_graded_in_its_own_verifier_sandbox_on_modal(
    cloud: tuple[Any, World], tmp_path: Path
) -> None:
    task = tmp_path / "two-step"
    shutil.copytree(HARBOR / "two-step", task)
    toml = task / "task.toml"
    head, rest = toml.read_text().split("[environment]")
    toml.write_text(
        f'{head}artifacts = ["/app/log.txt"]\n[verifier]\nenvironment_mode = "separate"\n'
        f"[environment]{rest}"
    )
    result = _run(tmp_path / "jobs", task, "oracle")
    assert result["outcome"] == "graded", result.get("error")
    assert _steps(result) == [("write", 1.0), ("append", 1.0)]
    assert [s["verifier_environment_mode"] for s in result["steps"]] == ["separate"] * 2
    trial = tmp_path / "jobs" / "oracle" / "two-step__0"
    assert (trial / "steps/append/sandbox/artifacts/app/log.txt").read_text() == "one\ntwo\n"
