"""The first run's surprises: the example meant to fail is said to be so in the summary
(from its task's [metadata]), and a task path that names no task exits 3 (not found)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.attack_tasks import HONEST_TEST, attack_task
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.errors import ExitCode

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_summary_says_which_trial_was_expected_to_fail(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        ["run", str(EXAMPLES / "verifier-timeout"), str(EXAMPLES / "hello-file"),
         "--jobs-dir", str(tmp_path)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = _flat(res.stdout)
    assert "1 trial expected to fail: verifier-timeout" in out, res.stdout
    # ...and why, from the task's [metadata] (expected_outcome, expected_reason)
    assert "expected verifier_failed: its verifier outlives its 3 s timeout" in out


def test_a_failure_the_metadata_does_not_expect_is_not_excused(tmp_path: Path) -> None:
    # expected to fail its verifier, but graded: nothing expected happened
    toml = '[metadata]\nexpected_outcome = "verifier_failed"\n'
    attack_task(tmp_path / "t" / "graded", solve="touch /app/ok", test=HONEST_TEST, toml=toml)
    # expected to be graded, but its verifier writes no reward: a real error
    toml = '[metadata]\nexpected_outcome = "graded"\n'
    attack_task(tmp_path / "t" / "broken", solve="touch /app/ok", test="true", toml=toml)
    res = CliRunner().invoke(app, ["run", str(tmp_path / "t"), "--jobs-dir", str(tmp_path / "j")])
    assert res.exit_code == 0, res.output
    assert "expected to fail" not in res.stdout


def test_a_path_that_names_no_task_exits_3(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "nowhere", tmp_path / "empty"):
        for args in (["run", str(path), "--jobs-dir", str(tmp_path / "j")],
                     ["tasks", "check", str(path)], ["tasks", "list", str(path)]):  # fmt: skip
            res = CliRunner().invoke(app, [*args, "--json"])
            assert res.exit_code == ExitCode.NOT_FOUND, (args, res.output)
    res = CliRunner().invoke(app, ["run", str(tmp_path / "nowhere"), "--json"])
    assert json.loads(res.stderr.strip().splitlines()[-1])["error"] == "not_found"


def test_a_missing_path_beside_real_tasks_is_skipped_by_skip_invalid(tmp_path: Path) -> None:
    args = ["run", str(tmp_path / "nowhere"), str(EXAMPLES / "hello-file")]
    res = CliRunner().invoke(app, [*args, "--jobs-dir", str(tmp_path / "j"), "--json"])
    assert res.exit_code == ExitCode.NOT_FOUND, res.output
    res = CliRunner().invoke(
        app, [*args, "--skip-invalid", "--jobs-dir", str(tmp_path / "j"), "--json"]
    )
    assert res.exit_code == 0 and json.loads(res.stdout)["n_trials"] == 1, res.output
