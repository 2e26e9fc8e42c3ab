"""The viewer's JSON API and file serving, over a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.helpers.jobs import JobFactory, T

from crucible.agents.terminal.trajectory import TrajectoryLog
from crucible.records.trajectory import Trajectory, Turn
from crucible.records.trial import utcnow
from crucible.reports.viewer import ViewerServer

TRAJ = [
    {"role": "system", "content": "You are in a terminal."},
    {"role": "user", "content": "Do the thing"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}],
    },
    {"role": "tool", "content": "file.txt"},
]


@pytest.fixture
def client(server: ViewerServer) -> Iterator[httpx.Client]:
    auth = {"Authorization": f"Bearer {server.gate.token}"}
    with httpx.Client(base_url=server.base_url.rstrip("/"), headers=auth, timeout=10) as c:
        yield c


@pytest.fixture
def built_jobs(make_job: JobFactory) -> None:
    make_job(
        "done",
        {"alpha": [T(1.0, trajectory=TRAJ), 0.0], "beta": ["sandbox_failed", T(0.5, duration=3)]},
        metadata={"alpha": {"category": "c1"}, "beta": {"category": "c2"}},
        model="gpt-4o",
    )
    make_job("live", {"alpha": [1.0]}, status="running", attempts=2)


def test_page_and_static_assets(client: httpx.Client) -> None:
    r = client.get("/")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert '<script src="/static/app.js">' in r.text
    assert "default-src 'self'" in r.headers["content-security-policy"]
    js = client.get("/static/app.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    assert client.get("/static/app.css").status_code == 200
    assert client.get("/static/../viewer.py").status_code == 404
    assert client.get("/static/viewer.py").status_code == 404


def test_jobs_job_task_trial(client: httpx.Client, built_jobs: None) -> None:
    data = client.get("/api/jobs").json()
    assert {j["job_id"] for j in data["jobs"]} == {"done", "live"}
    live = next(j for j in data["jobs"] if j["job_id"] == "live")
    assert live["status"] == "running" and live["n_planned"] == 2 and live["n_done"] == 1

    job = client.get("/api/jobs/done").json()
    assert job["n_planned"] == 4 and job["running"] == []
    m = job["metrics"]
    assert m["n_trials"] == 4 and m["errors"] == {"sandbox_failed": 1}
    assert m["rewards"]["reward"]["tasks"]["mean"] == pytest.approx((0.5 + 0.5) / 2)
    assert [t["task"] for t in job["tasks"]] == ["alpha", "beta"]
    assert [tr["folder"] for tr in job["tasks"][0]["trials"]] == ["alpha__0", "alpha__1"]

    task = client.get("/api/jobs/done/tasks/alpha").json()
    assert "Do the thing for alpha" in task["instruction"]["text"]
    assert task["metadata"] == {"category": "c1"}
    assert task["metrics"]["n_trials"] == 2

    trial = client.get("/api/jobs/done/trials/alpha__0").json()
    assert (
        trial["task"] == "alpha"
        and trial["outcome"] == "graded"
        and trial["rewards"] == {"reward": 1.0}
    )
    assert trial["trajectory"] == TRAJ
    assert "Do the thing for alpha" in trial["instruction"]["text"]
    assert any("PASSED" in v["text"] for v in trial["verifier"])
    # the collected reward file is shown too, named by where it sits in the trial folder
    assert "sandbox/logs/verifier/reward.json" in [v["name"] for v in trial["verifier"]]
    assert trial["timings"]["agent_execution"]["duration_sec"] == pytest.approx(7.0)
    assert [ln["message"] for ln in trial["log"]] == [
        "trial alpha__0: task alpha attempt 0",
        "outcome graded; reward 1.0",
    ]
    assert any(f["path"] == "result.json" for f in trial["files"])
    # no trajectory: the agent's log files instead
    t2 = client.get("/api/jobs/done/trials/alpha__1").json()
    assert t2["trajectory"] is None and t2["agent_logs"][0]["text"].startswith("ran solve.sh")
    err = client.get("/api/jobs/done/trials/beta__0").json()
    assert err["outcome"] == "sandbox_failed" and err["result"]["error"]["kind"] == "sandbox_failed"


def test_instruction_copy_in_trial_folder_wins(
    client: httpx.Client, built_jobs: None, jobs_dir: Path
) -> None:
    (jobs_dir / "done" / "alpha__0" / "instruction.md").write_text("the copy as run")
    trial = client.get("/api/jobs/done/trials/alpha__0").json()
    assert trial["instruction"]["text"] == "the copy as run"


def test_shows_the_terminal_agents_append_only_log(
    client: httpx.Client, built_jobs: None, jobs_dir: Path
) -> None:
    agent_dir = jobs_dir / "done" / "alpha__1" / "agent"
    t = Trajectory(
        agent="terminal", agent_version="1", model="m", base_url="u", task="alpha", mode="tools"
    )
    t.messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    t.turns.append(
        Turn(index=0, started_at=utcnow(), mode="tools", metrics={"token_ids": [1, 2, 3]})
    )
    t.status = "submitted"
    TrajectoryLog(agent_dir, cap_bytes=1 << 20).sync(t, finished=True)
    trial = client.get("/api/jobs/done/trials/alpha__1").json()
    shown = trial["trajectory"]
    assert shown["status"] == "submitted" and shown["messages"][1]["content"] == "go"
    assert shown["turns"][0]["metrics"] == {"token_ids": "[3 items]"}  # not the ids themselves
    assert all(f["name"] != "trajectory.jsonl" for f in trial["agent_logs"])


def test_follows_a_running_job(client: httpx.Client, built_jobs: None, jobs_dir: Path) -> None:
    tdir = jobs_dir / "live" / "alpha__1"
    (tdir / "agent").mkdir(parents=True)
    (tdir / "trial.log").write_text("2025-01-01T00:00:00.000+00:00 INFO agent started\n")
    job = client.get("/api/jobs/live").json()
    assert job["running"] == ["alpha__1"] and job["metrics"]["n_trials"] == 1
    running = client.get("/api/jobs/live/trials/alpha__1").json()
    assert running["status"] == "running" and running["log"][0]["message"] == "agent started"
    # the record lands: the next request sees it
    src = (jobs_dir / "live" / "alpha__0" / "result.json").read_text()
    (tdir / "result.json").write_text(
        src.replace('"attempt": 0', '"attempt": 1').replace("alpha__0", "alpha__1")
    )
    job = client.get("/api/jobs/live").json()
    assert job["running"] == [] and job["metrics"]["n_trials"] == 2


def raw_get(client: httpx.Client, path: str) -> tuple[int, str]:
    """GET `path` byte for byte (HTTP clients normalise '..' away before sending)."""
    host, port = client.base_url.host, client.base_url.port
    with socket.create_connection((host, port or 80), timeout=10) as sock:
        auth = client.headers["Authorization"]
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {auth}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode(errors="replace")


def test_files_and_path_traversal(
    client: httpx.Client, built_jobs: None, jobs_dir: Path, tmp_path: Path
) -> None:
    base = "/api/jobs/done/trials/alpha__0/files"
    r = client.get(f"{base}/verifier/test-stdout.txt")
    assert r.status_code == 200 and r.text == "PASSED test_alpha\n"
    assert r.headers["content-type"].startswith("text/plain")
    (tmp_path / "secret.txt").write_text("s3cret")
    (jobs_dir / "done" / "alpha__0" / "escape").symlink_to(tmp_path / "secret.txt")
    attempts = [
        f"{base}/../job.json",
        f"{base}/..%2Fjob.json",
        f"{base}/..%2F..%2F..%2Fsecret.txt",
        f"{base}/%2E%2E/%2E%2E/%2E%2E/secret.txt",
        f"{base}/escape",
        f"{base}/{'..%2F' * 12}etc/passwd",
        "/api/jobs/..%2F..%2Fsecret.txt",
        "/api/jobs/done/trials/..%2F..%2F/files/secret.txt",
        "/api/jobs/done/trials/%2E%2E/files/done/job.json",
        "/api/jobs/%2E%2E/trials/jobs/files/done/job.json",
    ]
    codes: dict[str, int] = {}
    for url in attempts:
        status, body = raw_get(client, url)
        assert status in (403, 404), url
        assert "s3cret" not in body and "job_id" not in body, url
        codes[url] = status
    # the server saw the '..' (the file exists one level up, so: forbidden, not absent)
    assert codes[f"{base}/../job.json"] == 403
    assert codes[f"{base}/escape"] == 403


def test_unknown_things_are_404_json(client: httpx.Client, built_jobs: None) -> None:
    for url in (
        "/api/jobs/nope",
        "/api/jobs/done/trials/nope",
        "/api/jobs/done/tasks/nope",
        "/api/nope",
        "/x",
    ):
        r = client.get(url)
        assert r.status_code == 404, url
        assert "error" in r.json()


def test_rejects_foreign_host_header(client: httpx.Client, built_jobs: None) -> None:
    r = client.get("/api/jobs", headers={"Host": "attacker.example:80"})
    assert r.status_code == 403
    assert client.get("/api/jobs", headers={"Host": "localhost:1234"}).status_code == 200
    # A name is the whole host, not a prefix: a port that is not a number, or text after
    # the brackets, passed as 127.0.0.1 and ::1.
    for host in ("127.0.0.1:1@attacker.example", "[::1]attacker.example", "127.0.0.1:x"):
        assert client.get("/api/jobs", headers={"Host": host}).status_code == 403, host
    assert client.get("/api/jobs", headers={"Host": "[::1]:80"}).status_code == 200


def test_empty_and_missing_jobs_dir(tmp_path: Path) -> None:
    srv = ViewerServer(tmp_path / "absent", "127.0.0.1", 0)
    th = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    th.start()
    try:
        auth = {"Authorization": f"Bearer {srv.gate.token}"}
        data = httpx.get(srv.base_url + "api/jobs", headers=auth, timeout=10).json()
        assert data["jobs"] == []
        assert json.dumps(data)
    finally:
        srv.shutdown()
        srv.server_close()


def test_crucible_view_command_serves_the_jobs_dir(built_jobs: None, jobs_dir: Path) -> None:
    import os
    import re
    import subprocess
    import sys

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "crucible.cli.main",
            "view",
            "--jobs-dir",
            str(jobs_dir),
            "--port",
            "0",
            "--no-open",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        assert proc.stdout is not None
        url = None
        while url is None:  # readline blocks until the viewer prints (or exits: "")
            line = proc.stdout.readline().decode()
            if not line:
                break
            if m := re.search(r"http://127\.0\.0\.1:\d+/\?token=[A-Za-z0-9_-]+", line):
                url = m.group(0)
        assert url, "the viewer did not print its URL with a token"
        base = url.split("?")[0]
        assert httpx.get(base + "api/jobs", timeout=10).status_code == 401
        with httpx.Client(timeout=10) as browser:  # as a browser: the URL, then the cookie
            first = browser.get(url)
            assert first.status_code == 302 and first.headers["location"] == "/"
            assert "HttpOnly" in first.headers["set-cookie"]
            data = browser.get(base + "api/jobs").json()
        assert {j["job_id"] for j in data["jobs"]} == {"done", "live"}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
