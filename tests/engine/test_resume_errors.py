"""Resume from finished error trials, through `crucible run` on REAL local sandboxes.

A job of three tasks leaves one trial of each kind: graded (the oracle passes), a
verifier_failed (the test script writes no reward: the attempt's own failure, counted
0) and a sandbox_failed (the environment's healthcheck fails before any agent runs:
infrastructure, left out of the mean). Then:

- a plain `--resume` runs nothing again: every trial has its final record;
- `--resume --retry-errors` runs the sandbox_failed trial again, and only it: a
  verifier_failed 0 rerun would get a fresh draw that a graded 0 never gets.

A trial run again gets a new record id; a kept one keeps its record byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.tasks.scaffold import scaffold_task

runner = CliRunner()
GRADED, NO_REWARD, UNHEALTHY = "passes", "no-reward", "unhealthy"


def _tasks(root: Path) -> list[Path]:
    passes = scaffold_task(GRADED, root)
    no_reward = scaffold_task(NO_REWARD, root)
    (no_reward / "tests" / "test.sh").write_text("#!/usr/bin/env bash\necho 'no reward written'\n")
    unhealthy = scaffold_task(UNHEALTHY, root)
    toml = unhealthy / "task.toml"
    toml.write_text(
        toml.read_text() + '\n[environment.healthcheck]\ncommand = "exit 3"\nretries = 1\n'
    )
    return [passes, no_reward, unhealthy]


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["run", *args, "--max-retries", "0", "--json", "--quiet"])
    return result.exit_code, result.output


def _records(job_dir: Path) -> dict[str, str]:
    """Each trial's result.json as written."""
    return {p.parent.name: p.read_text() for p in job_dir.glob("*/result.json")}


def _outcomes(records: dict[str, str]) -> dict[str, str]:
    return {name: json.loads(text)["outcome"] for name, text in records.items()}


def _ids(records: dict[str, str]) -> dict[str, str]:
    return {name: json.loads(text)["id"] for name, text in records.items()}


def _first_run(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    jobs = tmp_path / "jobs"
    paths = [str(p) for p in _tasks(tmp_path / "tasks")]
    code, out = _run(*paths, "--env", "local", "--jobs-dir", str(jobs), "--job-name", "j")
    assert code == 0, out
    before = _records(jobs / "j")
    assert _outcomes(before) == {
        f"{GRADED}__0": "graded",
        f"{NO_REWARD}__0": "verifier_failed",
        f"{UNHEALTHY}__0": "sandbox_failed",
    }, before
    summary = json.loads((jobs / "j" / "result.json").read_text())
    assert summary["n_done"] == 3 and summary["mean_reward"] == 0.5, summary  # (1 + 0) / 2
    return jobs, before


def test_a_plain_resume_runs_no_finished_trial_again(tmp_path: Path) -> None:
    jobs, before = _first_run(tmp_path)
    code, out = _run("--resume", "j", "--jobs-dir", str(jobs))
    assert code == 0, out
    # neither the counted 0 nor the excluded error ran again: every record as it was
    assert _records(jobs / "j") == before
    summary = json.loads((jobs / "j" / "result.json").read_text())
    assert summary["n_done"] == 3 and summary["mean_reward"] == 0.5, summary


def test_retry_errors_reruns_the_sandbox_failed_trial_never_the_counted_zero(
    tmp_path: Path,
) -> None:
    jobs, before = _first_run(tmp_path)
    code, out = _run("--resume", "j", "--jobs-dir", str(jobs), "--retry-errors")
    assert code == 0, out
    after = _records(jobs / "j")
    rerun = {name for name, id_ in _ids(after).items() if _ids(before)[name] != id_}
    assert rerun == {f"{UNHEALTHY}__0"}, _outcomes(after)
    # the graded trial and the verifier_failed 0 are kept, byte for byte
    kept = {name: text for name, text in after.items() if name not in rerun}
    assert kept == {name: text for name, text in before.items() if name not in rerun}
    # the rerun met the same failing healthcheck: still excluded, the mean unchanged
    assert _outcomes(after)[f"{UNHEALTHY}__0"] == "sandbox_failed"
    summary = json.loads((jobs / "j" / "result.json").read_text())
    assert summary["n_done"] == 3 and summary["mean_reward"] == 0.5, summary
