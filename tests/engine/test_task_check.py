"""`crucible tasks check --run`: oracle and nop on real sandboxes flag a broken
task (its verifier fails for the oracle) and a free reward (nop scores > 0)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.attack_tasks import HONEST_TEST, attack_task
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.errors import ExitCode

TASKS = {
    "fine": ("touch /app/ok", HONEST_TEST),
    "broken": ("touch /app/ok", "echo 'the tests forgot to write a reward'"),
    "free": ("touch /app/ok", "echo 1 > /logs/verifier/reward.txt"),
}


def _tasks(root: Path, names: list[str]) -> Path:
    for name in names:
        solve, test = TASKS[name]
        attack_task(root / name, solve=solve, test=test)
    return root


def test_check_run_flags_broken_and_free_tasks(tmp_path: Path) -> None:
    root = _tasks(tmp_path / "tasks", ["broken", "fine", "free"])
    res = CliRunner().invoke(
        app,
        ["tasks", "check", "--run", "--env", "local", str(root), "--json",
         "--keep-dir", str(tmp_path / "kept")],
    )  # fmt: skip
    assert res.exit_code == ExitCode.ERROR, res.output
    data = json.loads(res.stdout)
    runs = {r["name"]: r for r in data["runs"]}
    assert runs["fine"]["ok"] and runs["fine"]["oracle"]["reward"] == 1.0
    assert runs["fine"]["nop"]["reward"] == 0.0
    assert not runs["broken"]["ok"]
    assert runs["broken"]["problems"][0].startswith(
        "broken task: the verifier fails for the oracle"
    )
    assert not runs["free"]["ok"] and runs["free"]["problems"] == [
        "nop scores 1: doing nothing earns a reward"
    ]
    assert data["summary"]["flagged"] == 2


def test_check_run_on_good_tasks_exits_0_with_a_readable_line(tmp_path: Path) -> None:
    root = _tasks(tmp_path / "tasks", ["fine"])
    kept = tmp_path / "kept"
    res = CliRunner().invoke(app, ["tasks", "check", "--run", str(root), "--keep-dir", str(kept)])
    assert res.exit_code == 0, res.output
    assert "fine  oracle 1, nop 0" in res.stdout
    assert "ran oracle and nop on 1 task(s) with --env local: 0 flagged" in res.stdout
    assert not any(kept.iterdir())  # nothing flagged: nothing kept


# The oracle exits cleanly but the tests say it did not solve the task: a reward of 0.
WEAK_TEST = (
    "echo 'collected 1 item'; echo 'FAILED test_ok: /app/done is missing'; "
    "echo 0 > /logs/verifier/reward.txt"
)


def test_check_run_fails_a_task_whose_oracle_scores_below_1(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    attack_task(root / "weak", solve="touch /app/ok", test=WEAK_TEST)
    _tasks(root, ["fine"])
    kept_in = tmp_path / "kept"
    res = CliRunner().invoke(
        app, ["tasks", "check", "--run", str(root), "--json", "--keep-dir", str(kept_in)]
    )
    assert res.exit_code == ExitCode.ERROR, res.output
    data = json.loads(res.stdout)
    runs = {r["name"]: r for r in data["runs"]}
    weak = runs["weak"]
    assert weak["ok"] is False and data["summary"]["flagged"] == 1
    assert weak["problems"][0].startswith("the oracle scores 0, below 1")
    # The verifier's last lines say why, and the trial folders are kept to look into.
    assert "FAILED test_ok: /app/done is missing" in weak["oracle"]["verifier_tail"]
    kept = Path(weak["trials_dir"])
    assert kept.parent == kept_in
    assert (kept / "weak__0" / "verifier" / "test-stdout.txt").is_file()
    assert (kept / "weak__1").is_dir()  # nop's, beside the oracle's
    assert runs["fine"]["ok"] and runs["fine"]["trials_dir"] is None
    assert not (kept / "fine__0").exists()  # a task that passed leaves nothing behind


def test_check_run_text_shows_the_verifier_tail_and_the_kept_folder(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    attack_task(root / "weak", solve="touch /app/ok", test=WEAK_TEST)
    res = CliRunner().invoke(
        app, ["tasks", "check", "--run", str(root), "--keep-dir", str(tmp_path / "kept")]
    )
    assert res.exit_code == ExitCode.ERROR, res.output
    out = " ".join(res.stdout.split())
    assert "flagged weak oracle 0, nop 0" in out
    assert "error the oracle scores 0, below 1" in out
    assert "FAILED test_ok: /app/done is missing" in out
    assert "trial folders kept in" in out
