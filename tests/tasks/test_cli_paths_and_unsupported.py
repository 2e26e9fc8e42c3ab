"""`tasks check` prints every path one way (relative to the working directory when under it,
else absolute: before, a task's own problems were relative and the feature warnings from the
loaded task absolute), and `run` calls a valid task the provider cannot run yet
"unsupported", never "invalid" (before, both were "invalid task")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crucible.cli.main import app

ALL_FIELDS = Path(__file__).resolve().parent / "harbor" / "tasks" / "all-fields"
COMPOSE = Path(__file__).resolve().parent / "harbor" / "tasks" / "compose"


def _check(*args: str) -> dict:  # type: ignore[type-arg]
    out = CliRunner().invoke(app, ["tasks", "check", *args, "--json"])
    return json.loads(out.stdout)


def _paths(report: dict) -> list[str]:  # type: ignore[type-arg]
    return [t["path"] for t in report["tasks"]] + [
        p["path"] for t in report["tasks"] for p in t["problems"]
    ]


def test_tasks_check_paths_are_relative_under_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = tmp_path / "set" / "all-fields"
    shutil.copytree(ALL_FIELDS, task)
    monkeypatch.chdir(tmp_path)
    for given in ("set/all-fields", str(task)):  # relative or absolute on the command line
        paths = _paths(_check(given))
        assert len(paths) > 2 and all(p.startswith("set/all-fields") for p in paths), paths
    # Outside the working directory: every one absolute.
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    paths = _paths(_check(str(task)))
    assert all(p.startswith(str(task)) for p in paths), paths
    # The text output too.
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["tasks", "check", str(task)]).output
    assert str(tmp_path) not in out and "set/all-fields/task.toml:" in out, out


def test_run_calls_a_valid_but_unsupported_task_unsupported(tmp_path: Path) -> None:
    out = CliRunner().invoke(
        app, ["run", str(COMPOSE), "-e", "local", "--jobs-dir", str(tmp_path / "jobs")]
    )
    assert out.exit_code != 0
    assert "unsupported task" in out.output and "invalid task" not in out.output, out.output
    assert "docker-compose" in out.output
