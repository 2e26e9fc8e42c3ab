"""`crucible runs list|get` and the shared error contract, on jobs dirs built on disk
(real SQLite index written through `Index`, real job folders)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.helpers.jobs import T0, JobsFactory
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.errors import ExitCode
from crucible.store.index import Index


def invoke(*args: object) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def run_json(*args: object) -> dict:
    res = invoke(*args, "--json")
    assert res.exit_code == 0, (res.stdout, res.stderr)
    return json.loads(res.stdout)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def three_jobs(jobs: JobsFactory) -> None:
    a = jobs.job("2026-01-01__a", tasks=["t1", "t2"], attempts=2, created_at=T0)
    a.trial("t1", 0, reward=1.0)
    a.trial("t1", 1, reward=0.0)
    a.trial("t2", 0, reward=1.0)
    a.trial("t2", 1, error="sandbox_failed", message="container vanished")
    a.finish("completed")
    b = jobs.job(
        "2026-01-02__b",
        tasks=["t1"],
        agent="terminal",
        model="gpt-x",
        created_at=T0 + timedelta(days=1),
        pid=os.getpid(),
    )
    b.trial("t1", 0, reward=0.5)
    c = jobs.job(
        "2026-01-03__c",
        tasks=["t1", "t2", "t3"],
        agent="terminal",
        model="claude-y",
        created_at=T0 + timedelta(days=2),
        pid=dead_pid(),
    )
    c.trial("t1", 0, error="model_failed", message="429 after retries")


def test_list_rows_counts_and_status(jobs: JobsFactory) -> None:
    three_jobs(jobs)
    data = run_json("runs", "list", "--jobs-dir", jobs.jobs_dir)
    rows = {r["job_id"]: r for r in data["jobs"]}
    assert [r["job_id"] for r in data["jobs"]] == [
        "2026-01-03__c",
        "2026-01-02__b",
        "2026-01-01__a",
    ]
    a = rows["2026-01-01__a"]
    assert a["status"] == "completed" and not a["interrupted"]
    assert a["n_trials"] == 4 and a["n_done"] == 4
    assert a["outcomes"] == {"graded": 3, "sandbox_failed": 1}
    assert a["n_errors"] == 1
    # the error is counted, never averaged in as a zero
    assert a["mean_reward"] == pytest.approx(2 / 3)
    assert a["agent"] == "oracle" and a["model"] is None and a["dataset"]
    assert datetime.fromisoformat(a["created_at"]) == T0
    datetime.fromisoformat(a["updated_at"])  # ISO 8601
    b = rows["2026-01-02__b"]
    assert b["status"] == "running" and b["pid"] == os.getpid()
    assert b["mean_reward"] == 0.5
    c = rows["2026-01-03__c"]
    assert c["status"] == "failed" and c["interrupted"] is True
    assert "crucible run --resume 2026-01-03__c" in c["hint"]
    assert c["mean_reward"] is None and c["outcomes"] == {"model_failed": 1}
    assert data["total"] == 3 and data["has_more"] is False


def test_list_filters_and_limit(jobs: JobsFactory) -> None:
    three_jobs(jobs)
    d = jobs.jobs_dir

    def ids(*args: object) -> list[str]:
        return [r["job_id"] for r in run_json("runs", "list", "--jobs-dir", d, *args)["jobs"]]

    assert ids("--status", "failed") == ["2026-01-03__c"]
    assert ids("--status", "interrupted") == ["2026-01-03__c"]
    assert ids("--status", "running") == ["2026-01-02__b"]
    assert ids("--agent", "terminal") == ["2026-01-03__c", "2026-01-02__b"]
    assert ids("--model", "claude-*") == ["2026-01-03__c"]
    assert ids("--model", "gpt-x", "--agent", "oracle") == []
    page = run_json("runs", "list", "--jobs-dir", d, "--limit", "2")
    assert len(page["jobs"]) == 2 and page["total"] == 3 and page["has_more"] is True
    # --since filters on last activity: age one job's updated_at into the past
    idx = Index(d)
    old = (datetime.now(UTC) - timedelta(hours=5)).isoformat()
    with idx.conn:
        idx.conn.execute("UPDATE jobs SET updated_at=? WHERE job_id=?", (old, "2026-01-01__a"))
    idx.close()
    assert "2026-01-01__a" not in ids("--since", "2h")
    assert "2026-01-01__a" in ids("--since", "6h")
    assert len(ids("--since", (datetime.now(UTC) - timedelta(days=1)).isoformat())) == 3


def test_list_bad_since_is_usage_error(jobs: JobsFactory) -> None:
    res = invoke("runs", "list", "--jobs-dir", jobs.jobs_dir, "--since", "yesterday-ish", "--json")
    assert res.exit_code == ExitCode.USAGE
    err = json.loads(res.stderr)
    assert err["error"] == "usage" and "--since" in err["message"]


def test_job_without_index_row_is_found_by_its_folder(jobs: JobsFactory) -> None:
    j = jobs.job("lonely", tasks=["t1", "t2"], index=False, status="running")
    j.trial("t1", 0, reward=1.0, index=False)
    j.trial("t2", 0, error="verifier_failed", index=False)
    data = run_json("runs", "list", "--jobs-dir", jobs.jobs_dir)
    (row,) = data["jobs"]
    assert row["job_id"] == "lonely" and row["status"] == "running"
    assert row["outcomes"] == {"graded": 1, "verifier_failed": 1}
    assert row["mean_reward"] == 0.5  # the verifier_failed trial counts as 0
    got = run_json("runs", "get", "lonely", "--jobs-dir", jobs.jobs_dir, "--verbose")
    assert got["progress"]["done"] == 2 and got["progress"]["total"] == 2
    assert [t["trial_name"] for t in got["trials"]] == ["t1__0", "t2__0"]


def test_get_progress_errors_and_reward_over_time(jobs: JobsFactory) -> None:
    j = jobs.job("job-x", tasks=["a", "b", "c"], attempts=2, pid=os.getpid())
    # finishing order differs from name order: b0 first, then a0, c0, a1
    j.trial("b", 0, reward=0.0, started=T0)
    j.trial("a", 0, reward=1.0, started=T0 + timedelta(seconds=20))
    j.trial("c", 0, error="sandbox_failed", message="lost", started=T0 + timedelta(seconds=25))
    j.trial("a", 1, reward=1.0, started=T0 + timedelta(seconds=40), cost=0.25)
    j.trial(
        "c", 1, error="sandbox_failed", message="lost again", started=T0 + timedelta(seconds=50)
    )
    j.start_trial("b", 1, at=T0 + timedelta(seconds=60))  # running: folder and log, no result
    d = run_json("runs", "get", "job-x", "--jobs-dir", jobs.jobs_dir)
    assert d["status"] == "running"
    assert d["progress"] == {
        "done": 5,
        "total": 6,
        "fraction": pytest.approx(5 / 6, abs=1e-4),
        "in_progress": 1,
        "cancelled": 0,
    }
    assert d["mean_reward"] == pytest.approx(2 / 3) and d["n_rewarded"] == 3
    assert d["errors"]["sandbox_failed"]["count"] == 2
    assert d["errors"]["sandbox_failed"]["example_message"] in ("lost", "lost again")
    assert d["n_errors"] == 2 and d["cost_usd"] == 0.25
    assert d["reward_over_time"] is None and d["trials"] is None
    v = run_json("runs", "get", "job-x", "--jobs-dir", jobs.jobs_dir, "--verbose")
    pts = v["reward_over_time"]
    assert [p["trial_name"] for p in pts] == ["b__0", "a__0", "a__1"]
    assert [p["mean_reward"] for p in pts] == pytest.approx([0.0, 0.5, 2 / 3])
    assert [p["n"] for p in pts] == [1, 2, 3]
    trials = {t["trial_name"]: t for t in v["trials"]}
    assert set(trials) == {"a__0", "a__1", "b__0", "c__0", "c__1"}
    assert trials["c__1"]["error_kind"] == "sandbox_failed"
    assert trials["c__1"]["error_message"] == "lost again"
    assert trials["a__0"]["rewards"] == {"reward": 1.0}
    assert trials["a__0"]["duration_sec"] == 10.0
    # human output carries the same facts
    res = invoke("runs", "get", "job-x", "--jobs-dir", jobs.jobs_dir, "--verbose")
    assert res.exit_code == 0
    assert "progress 5/6" in res.stdout and "sandbox_failed: 2" in res.stdout


def test_get_interrupted_job_says_how_to_resume(jobs: JobsFactory) -> None:
    j = jobs.job("crashed", tasks=["a"], pid=dead_pid())
    d = run_json("runs", "get", "crashed", "--jobs-dir", jobs.jobs_dir)
    assert d["status"] == "failed" and d["interrupted"] is True and d["pid_alive"] is False
    assert "crucible run --resume crashed" in d["hint"]
    assert j.path.exists()


def test_ids_resolve_by_unique_prefix(jobs: JobsFactory) -> None:
    jobs.job("2026-02-01__x", tasks=["a"])
    jobs.job("2026-02-02__y", tasks=["a"])
    assert (
        run_json("runs", "get", "2026-02-02", "--jobs-dir", jobs.jobs_dir)["job_id"]
        == "2026-02-02__y"
    )
    res = invoke("runs", "get", "2026-02", "--jobs-dir", jobs.jobs_dir, "--json")
    assert res.exit_code == ExitCode.USAGE
    err = json.loads(res.stderr)
    assert err["error"] == "ambiguous_id" and "2026-02-01__x" in err["message"]


@pytest.mark.parametrize(
    "cmd", [["get"], ["logs"], ["cancel"], ["trace", "--out", "x", "--dry-run"]]
)
def test_unknown_id_exits_3_with_json_error(jobs: JobsFactory, cmd: list[str]) -> None:
    jobs.job("real", tasks=["a"])
    res = invoke("runs", cmd[0], "nope", *cmd[1:], "--jobs-dir", jobs.jobs_dir, "--json")
    assert res.exit_code == ExitCode.NOT_FOUND
    assert res.stdout == ""
    err = json.loads(res.stderr)
    assert set(err) == {"error", "message", "hint"}
    assert err["error"] == "not_found" and "nope" in err["message"]


def test_missing_jobs_dir_is_not_found(tmp_path: Path) -> None:
    res = invoke("runs", "list", "--jobs-dir", tmp_path / "absent", "--json")
    assert res.exit_code == ExitCode.NOT_FOUND
    assert json.loads(res.stderr)["error"] == "not_found"


def test_usage_errors_exit_2_and_are_json_under_json(jobs: JobsFactory) -> None:
    res = invoke("runs", "get", "x", "--jobs-dir", jobs.jobs_dir, "--no-such-option", "--json")
    assert res.exit_code == ExitCode.USAGE
    err = json.loads(res.stderr)
    assert err["error"] == "usage" and "--no-such-option" in err["message"]
    res = invoke("runs", "get", "--json")  # missing argument
    assert res.exit_code == ExitCode.USAGE
    assert json.loads(res.stderr)["error"] == "usage"
    res = invoke("runs", "list", "--limit", "zero")  # no --json: click's own message
    assert res.exit_code == ExitCode.USAGE
    assert "--limit" in res.stderr


def test_exit_codes_are_listed_in_help() -> None:
    for cmd in (["runs"], ["runs", "list"], ["runs", "get"], ["runs", "cancel"]):
        res = invoke(*cmd, "--help")
        assert res.exit_code == 0
        text = " ".join(res.stdout.split())
        assert "0 ok, 1 error, 2 usage, 3 not found, 4 auth, 5 backend" in text


def test_human_list_shows_every_job(jobs: JobsFactory) -> None:
    three_jobs(jobs)
    res = invoke("runs", "list", "--jobs-dir", jobs.jobs_dir)
    assert res.exit_code == 0
    for job_id in ("2026-01-01__a", "2026-01-02__b", "2026-01-03__c"):
        assert job_id in res.stdout
    assert "--resume" in res.stdout
