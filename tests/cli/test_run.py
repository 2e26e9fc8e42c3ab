"""`crucible run` end to end on the local provider, through the real CLI."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"


def crucible(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crucible.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)  # fmt: skip


def test_examples_oracle_and_nop_with_attempts(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    res = crucible("run", str(EXAMPLES), "-k", "2", "-c", "8", "--jobs-dir", str(jobs),
                   "--job-name", "oracle", "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["status"] == "completed" and summary["n_trials"] == 12
    assert summary["outcomes"] == {"graded": 10, "verifier_failed": 2}
    # verifier-timeout's verifier fails for everyone: its 2 trials count as 0
    assert summary["mean_reward"] == 10 / 12
    assert summary["pass_at_k"] == {"pass@1": 10 / 12, "pass@2": 10 / 12}
    assert summary["n_excluded"] == 0

    # per-trial folders with Harbor's field names, readable by a later command
    for trial in sorted((jobs / "oracle").glob("*__*")):
        r = json.loads((trial / "result.json").read_text())
        for field in ("id", "task_name", "trial_name", "agent_info", "verifier_result", "exception_info",
                      "started_at", "finished_at", "attempt", "outcome", "agent_execution", "verifier"):  # fmt: skip
            assert field in r, (trial, field)
        assert (trial / "trial.log").read_text()
        if r["task_name"] == "verifier-timeout":
            assert r["outcome"] == "verifier_failed" and r["error"]["kind"] == "verifier_failed"
            assert r["verifier_result"]["rewards"] is None
        else:
            assert r["outcome"] == "graded" and r["error"] is None
            assert r["verifier_result"]["rewards"]["reward"] == 1.0
            assert (trial / "verifier" / "test-stdout.txt").exists()
    two = json.loads((jobs / "oracle" / "two-metrics__0" / "result.json").read_text())
    assert set(two["verifier_result"]["rewards"]) == {"reward", "recall"}

    conn = sqlite3.connect(jobs / "index.sqlite")
    assert conn.execute("SELECT status, n_trials FROM jobs WHERE job_id='oracle'").fetchone() == (
        "completed",
        12,
    )
    assert conn.execute("SELECT COUNT(*) FROM trials WHERE job_id='oracle'").fetchone()[0] == 12
    conn.close()

    nop = crucible(
        "run",
        str(EXAMPLES),
        "--agent",
        "nop",
        "--jobs-dir",
        str(jobs),
        "--job-name",
        "nop",
        "--json",
    )
    assert nop.returncode == 0, nop.stderr
    s = json.loads(nop.stdout)
    assert s["mean_reward"] == 0.0 and s["outcomes"] == {"graded": 5, "verifier_failed": 1}


def test_table_output_and_rerun_of_a_finished_job(tmp_path: Path) -> None:
    args = ("run", str(EXAMPLES / "hello-file"), "--jobs-dir", str(tmp_path), "--job-name", "j")
    first = crucible(*args)
    assert first.returncode == 0, first.stderr
    assert "hello-file" in first.stdout and "1.000" in first.stdout and "pass@1" in first.stdout
    record = (tmp_path / "j" / "hello-file__0" / "result.json").read_text()
    again = crucible(*args, "--json")  # the same name again resumes: nothing left to run
    assert again.returncode == 0 and json.loads(again.stdout)["n_done"] == 1
    # the finished trial was not run again: its record (id, times) is untouched
    assert (tmp_path / "j" / "hello-file__0" / "result.json").read_text() == record


def test_cannot_run_exit_codes(tmp_path: Path) -> None:
    missing = crucible("run", str(tmp_path / "nowhere"), "--jobs-dir", str(tmp_path), "--json")
    assert missing.returncode == 3  # not found: a path that names no task
    assert json.loads(missing.stderr.strip().splitlines()[-1])["error"] == "not_found"
    bad_env = crucible("run", str(EXAMPLES), "--env", "nope", "--jobs-dir", str(tmp_path), "--json")
    assert bad_env.returncode == 2 and "unknown provider" in bad_env.stderr
    bad_agent = crucible(
        "run", str(EXAMPLES), "--agent", "nope", "--jobs-dir", str(tmp_path), "--json"
    )
    assert bad_agent.returncode == 2 and "unknown agent" in bad_agent.stderr
    no_resume = crucible("run", "--resume", "ghost", "--jobs-dir", str(tmp_path), "--json")
    assert no_resume.returncode == 3
    assert not (tmp_path / "ghost").exists()


def test_help_imports_no_sdk() -> None:
    """What keeps `--help` fast (its time is not asserted: a loaded machine is slow, not broken)."""
    code = ("import sys; sys.argv=['crucible','--help'];\n"
            "from crucible.cli.main import app\n"
            "try: app()\nexcept SystemExit: pass\n"
            "bad=[m for m in ('modal','docker','httpx','sqlite3','crucible.engine.job') if m in sys.modules]\n"
            "print('IMPORTED', bad, file=sys.stderr)")  # fmt: skip
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    line = next(ln for ln in res.stderr.splitlines() if ln.startswith("IMPORTED"))
    assert "[]" in line, line


def test_usage_errors_are_json_under_json_on_every_command() -> None:
    for argv in (["run", "--bogus"], ["report", "--bogus"], ["tasks", "check", "--bogus"],
                 ["sandboxes", "check", "--bogus"], ["docs", "query", "--bogus"], ["runs", "get"]):  # fmt: skip
        res = crucible(*argv, "--json")
        assert res.returncode == 2, argv
        err = json.loads(res.stderr.strip().splitlines()[-1])
        assert err["error"] == "usage" and err["message"], argv


@pytest.mark.docker
def test_examples_on_docker_match_local_reward_for_reward(
    tmp_path: Path, docker_engine: None
) -> None:
    def rewards(env: str, agent: str) -> dict[str, object]:
        res = crucible("run", str(EXAMPLES), "--env", env, "--agent", agent, "-c", "4",
                       "--jobs-dir", str(tmp_path / env), "--job-name", agent, "--json")  # fmt: skip
        assert res.returncode == 0, res.stderr
        out = {}
        for path in sorted((tmp_path / env / agent).glob("*/result.json")):
            r = json.loads(path.read_text())
            out[r["task_name"]] = (r["outcome"], (r["verifier_result"] or {}).get("rewards"))
        return out

    for agent in ("oracle", "nop"):
        local, docker = rewards("local", agent), rewards("docker", agent)
        assert len(local) == 6 and docker == local, agent
