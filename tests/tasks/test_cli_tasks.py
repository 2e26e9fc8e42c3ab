"""`crucible tasks check|list|init` through the CLI: output, --json and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from task_factory import MakeTask
from typer.testing import CliRunner

from crucible.cli import tasks as tasks_cli
from crucible.errors import ExitCode

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"


@pytest.fixture
def invoke():
    app = typer.Typer()
    tasks_cli.register(app)

    @app.callback()
    def _root() -> None:  # keeps `tasks` a subcommand, as in the real app
        pass

    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(app, ["tasks", *map(str, args)])

    return run


def test_check_valid_task_exits_0(invoke, make_task: MakeTask) -> None:
    root = make_task("fine")
    result = invoke("check", root)
    assert result.exit_code == 0, result.output
    assert "fine" in result.stdout
    assert "1 task(s): 1 valid, 0 invalid; 0 error(s), 0 warning(s)" in result.stdout


def test_check_reports_every_problem_with_file_and_line(
    invoke, make_task: MakeTask, tmp_path: Path
) -> None:
    make_task("good", parent=tmp_path / "s")
    bad = make_task(
        "bad",
        parent=tmp_path / "s",
        toml="[environment]\nmemory_mb = 'x'\n",
        files={"tests/test.sh": None},
    )
    result = invoke("check", tmp_path / "s")
    assert result.exit_code == ExitCode.ERROR
    out = " ".join(result.stdout.split())  # rich may wrap long lines
    assert f"{bad / 'task.toml'}:2: environment.memory_mb" in out
    assert f"{bad / 'tests' / 'test.sh'}: tests/test.sh is missing" in out
    assert "2 task(s): 1 valid, 1 invalid; 2 error(s), 0 warning(s)" in out


def test_check_warnings_alone_exit_0(invoke, make_task: MakeTask) -> None:
    root = make_task("w", files={"solution/solve.sh": None})
    result = invoke("check", root)
    assert result.exit_code == 0
    assert "1 warning(s)" in result.stdout


def test_check_json(invoke, make_task: MakeTask, tmp_path: Path) -> None:
    make_task("ok", parent=tmp_path / "s")
    make_task("broken", parent=tmp_path / "s", toml="a = 1\nb = [\n")
    result = invoke("check", tmp_path / "s", tmp_path / "missing", "--json")
    assert result.exit_code == ExitCode.NOT_FOUND  # the missing path wins over the invalid task
    data = json.loads(result.stdout)
    assert data["summary"] == {"tasks": 3, "valid": 1, "invalid": 2, "errors": 2, "warnings": 0}
    by_name = {t["name"]: t for t in data["tasks"]}
    assert by_name["ok"]["valid"] and len(by_name["ok"]["digest"]) == 64
    [problem] = by_name["broken"]["problems"]
    assert problem["line"] == 2 and problem["severity"] == "error"  # "at end of document"
    assert problem["path"].endswith("broken/task.toml")
    assert by_name["missing"]["problems"][0]["message"] == "no such file or directory"


def test_check_filters(invoke, make_task: MakeTask, tmp_path: Path) -> None:
    make_task("keep", parent=tmp_path / "s")
    make_task("drop", parent=tmp_path / "s", toml="x = \n")
    result = invoke("check", tmp_path / "s", "--exclude", "drop", "--json")
    assert result.exit_code == 0
    assert [t["name"] for t in json.loads(result.stdout)["tasks"]] == ["keep"]


def test_list(invoke, make_task: MakeTask, tmp_path: Path) -> None:
    make_task("one", parent=tmp_path / "s")
    result = invoke("list", tmp_path / "s", "--json")
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)["tasks"]
    assert row["name"] == "one"
    assert (row["cpus"], row["memory_mb"], row["network"], row["workdir"]) == (
        2,
        1024,
        "no-network",
        "/app",
    )
    assert row["dockerfile"] is True and row["image"] is None

    human = invoke("list", tmp_path / "s")
    assert human.exit_code == 0 and "one" in human.stdout and row["digest"][:10] in human.stdout

    make_task("bad", parent=tmp_path / "s", files={"instruction.md": ""})
    broken = invoke("list", tmp_path / "s")
    assert broken.exit_code == ExitCode.ERROR
    assert "instruction.md is empty" in broken.stderr


def test_init_scaffold_passes_check(invoke, tmp_path: Path) -> None:
    result = invoke("init", "my-task", "--dir", tmp_path)
    assert result.exit_code == 0, result.output
    root = tmp_path / "my-task"
    for rel in (
        "task.toml",
        "instruction.md",
        "environment/Dockerfile",
        "solution/solve.sh",
        "tests/test.sh",
    ):
        assert (root / rel).is_file(), rel
    assert "FROM debian:bookworm-slim" in (root / "environment" / "Dockerfile").read_text()
    assert (root / "tests" / "test.sh").stat().st_mode & 0o111

    check = invoke("check", root, "--json")
    assert check.exit_code == 0
    assert json.loads(check.stdout)["summary"] == {
        "tasks": 1,
        "valid": 1,
        "invalid": 0,
        "errors": 0,
        "warnings": 0,
    }


def test_init_refuses_existing_and_bad_names(invoke, tmp_path: Path) -> None:
    assert invoke("init", "t", "--dir", tmp_path).exit_code == 0
    again = invoke("init", "t", "--dir", tmp_path, "--json")
    assert again.exit_code == ExitCode.ERROR
    assert json.loads(again.stderr)["error"] == "exists"
    bad = invoke("init", "../escape", "--dir", tmp_path)
    assert bad.exit_code == ExitCode.USAGE
    assert not (tmp_path.parent / "escape").exists()


def test_real_entry_point_checks_the_examples() -> None:
    # Through the installed console script's module, as a user runs it.
    proc = subprocess.run(
        [sys.executable, "-m", "crucible.cli.main", "tasks", "check", str(EXAMPLES), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["summary"]["invalid"] == 0 and data["summary"]["warnings"] == 0
    assert {t["name"] for t in data["tasks"]} == {
        "background-service",
        "hello-file",
        "no-network",
        "python-project",
        "two-metrics",
        "verifier-timeout",
    }
