"""Grades outlive their requests and the service: a client that disconnects mid-request
leaves its grade running (stored under its id), and a `crucible serve` killed with
kill -9 and restarted on the same job answers finished ids from disk and runs the
unfinished ones again, after removing the sandboxes the killed run left."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.engine.test_resume_local import _processes_of
from tests.helpers.serving import Serving, hello_item, write_task
from tests.helpers.wait import await_until, wait_until

from crucible.sandboxes.local.provider import LocalProvider
from crucible.serve.store import trial_name_for_grade

REPO = Path(__file__).resolve().parents[2]


async def test_a_client_that_disconnects_does_not_lose_its_grade(tmp_path: Path, serving: Serving):
    # One slot (-c 1), held by a grade whose test hangs until the trial time limit ends it:
    # the grade asked for next waits for the slot while its client goes away.
    hello = write_task(tmp_path / "tasks", "hello")
    sleepy = write_task(tmp_path / "tasks", "sleepy", test="sleep 600\n")
    async with serving([hello, sleepy], concurrency=1, trial_timeout=3) as s:
        await s.grade(hello_item("hang", task="sleepy"), wait_s=0)
        await await_until(lambda: s.service.metrics.in_flight == 1, "the slot to be taken")
        request = asyncio.create_task(s.grade(hello_item("d1")))
        await await_until(lambda: s.service.records.get("d1") is not None, "d1 to be taken")
        assert s.service.records["d1"].result is None  # queued behind the hang
        request.cancel()  # the client goes away mid-request
        with pytest.raises(asyncio.CancelledError):
            await request
        got = (await s.http.get("/v1/grade/d1", params={"wait_s": 120})).json()
        assert (got["status"], got["reward"], got["cached"]) == ("ok", 1.0, True)
        hang = (await s.http.get("/v1/grade/hang")).json()
        # cut by the time limit inside the attempt's own budgets: a 0, never unscorable
        # (a policy that stalls its grading must not be left out of its batch)
        assert (hang["status"], hang["reward"]) == ("ok", 0.0) and "time limit" in hang["error"]
        assert len(s.creates) == 2


def _serve(task_dirs: list[Path], jobs: Path, job: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "crucible.cli.main", "serve", *map(str, task_dirs),
         "--jobs-dir", str(jobs), "--job-name", job, "--port", "0", "-c", "1", "--json", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        start_new_session=True,
    )  # fmt: skip


def _started(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the service did not start: {proc.stderr.read() if proc.stderr else ''}"
    return dict(json.loads(line))


def _terminate(proc: subprocess.Popen[str]) -> None:
    """SIGTERM: the service stops cleanly, exit 0."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


@pytest.fixture
def job() -> Iterator[str]:
    job_id = f"serve-kill9-{uuid.uuid4().hex[:8]}"
    yield job_id
    asyncio.run(LocalProvider().cleanup(job_id))


def test_kill_9_then_restart_answers_finished_ids_and_reruns_the_rest(tmp_path: Path, job: str):
    hello = write_task(tmp_path / "tasks", "hello")
    # Its test hangs: the grade is in flight, holding the one slot (-c 1), when the kill comes.
    sleepy = write_task(tmp_path / "tasks", "sleepy", test="sleep 600\n")
    jobs = tmp_path / "jobs"
    first = _serve([hello, sleepy], jobs, job)
    try:
        info = _started(first)
        with httpx.Client(base_url=info["url"], timeout=120,
                          headers={"Authorization": f"Bearer {info['token']}"}) as http:  # fmt: skip
            done = http.post("/v1/grade", json={"items": [hello_item("done")]}).json()
            assert done["results"][0]["reward"] == 1.0
            items = [hello_item("hung", task="sleepy"), hello_item("queued")]
            pending = http.post("/v1/grade", json={"items": items, "wait_s": 0}).json()
            assert [r["status"] for r in pending["results"]] == ["pending", "pending"]
        hung_log = jobs / job / trial_name_for_grade("hung") / "trial.log"
        wait_until(lambda: hung_log.is_file() and "verifier: started" in hung_log.read_text(),
                   "the hung grade's test to be running")  # fmt: skip
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # even if it has exited: its group goes too
        first.communicate()
    done_result = (jobs / job / trial_name_for_grade("done") / "result.json").read_text()
    assert not (jobs / job / trial_name_for_grade("queued")).exists()  # never started

    # Restarted: the hang is ended by the trial time limit, inside the attempt's own
    # budgets: a 0 (the attempt's), not retried and never unscorable.
    second = _serve([hello, sleepy], jobs, job, "--trial-timeout", "5", "--max-retries", "0")
    try:
        info = _started(second)
        with httpx.Client(base_url=info["url"], timeout=120,
                          headers={"Authorization": f"Bearer {info['token']}"}) as http:  # fmt: skip
            again = http.post("/v1/grade", json={"items": [hello_item("done")]}).json()
            assert again["results"][0]["cached"] is True and again["results"][0]["reward"] == 1.0
            queued = http.get("/v1/grade/queued", params={"wait_s": 120}).json()
            assert (queued["status"], queued["reward"]) == ("ok", 1.0)
            hung = http.get("/v1/grade/hung", params={"wait_s": 120}).json()
            assert (hung["status"], hung["reward"]) == ("ok", 0.0)
            assert "time limit" in hung["error"]
            metrics = http.get("/metrics").text
            assert "crucible_serve_trials_started_total 2" in metrics  # `done` was not re-run
        _terminate(second)
    finally:
        _kill(second)
    assert (jobs / job / trial_name_for_grade("done") / "result.json").read_text() == done_result
    log = (jobs / job / "job.log").read_text()
    assert "1 grade(s) answered from disk, 2 re-run" in log, log
    # What the killed run left (its slot's cgroup and scratch folder) was removed at start.
    assert "sandbox(es) an earlier run of this job left" in log, log
    assert _processes_of(job) == []
    summary = json.loads((jobs / job / "result.json").read_text())
    assert summary["status"] == "completed" and summary["n_done"] == 3, summary


def test_sigterm_mid_grade_stops_cleanly(tmp_path: Path, job: str):
    sleepy = write_task(tmp_path / "tasks", "sleepy", test="sleep 600\n")
    jobs = tmp_path / "jobs"
    served = _serve([sleepy], jobs, job)
    try:
        info = _started(served)
        with httpx.Client(base_url=info["url"], timeout=120,
                          headers={"Authorization": f"Bearer {info['token']}"}) as http:  # fmt: skip
            got = http.post("/v1/grade", json={"items": [hello_item("s1", task="sleepy")],
                                               "wait_s": 0})  # fmt: skip
            assert got.json()["results"][0]["status"] == "pending"
        log = jobs / job / trial_name_for_grade("s1") / "trial.log"
        wait_until(lambda: log.is_file() and "verifier: started" in log.read_text(),
                   "the grade's test to be running")  # fmt: skip
        _terminate(served)
    finally:
        _kill(served)
    assert _processes_of(job) == []  # the grade's sandbox was closed
    record = json.loads(next((jobs / job / ".grades").glob("*.json")).read_text())
    assert record["id"] == "s1" and record["result"] is None  # a restart runs it again
    summary = json.loads((jobs / job / "result.json").read_text())
    assert summary["status"] == "cancelled"


async def test_a_grade_killed_after_its_trial_finished_is_not_run_again(
    tmp_path: Path, serving: Serving
):
    hello = write_task(tmp_path / "tasks", "hello")
    async with serving([hello], job="window") as s:
        first = (await s.grade(hello_item("w1"))).json()["results"][0]
        record = s.service.store.path("w1")
        trial_record = s.service.job_dir / first["trial"].split("/")[1] / "result.json"
        trial_text = trial_record.read_text()
    # As if killed between the trial's result.json and the grade's own record: the
    # record still holds the submission and no result.
    data = json.loads(record.read_text())
    assert data["submission"] is None  # a finished grade keeps only its digest
    data["result"] = None
    data["submission"] = hello_item("w1")["submission"]
    record.write_text(json.dumps(data))
    async with serving([hello], job="window") as s:
        again = (await s.grade(hello_item("w1"))).json()["results"][0]
        # The trial's own final record was taken: no trial ran (a re-run, started
        # before this test's request, would have rewritten it).
        assert s.service.metrics.trials_started == 0
        assert trial_record.read_text() == trial_text
        assert (again["status"], again["reward"], again["cached"]) == ("ok", 1.0, True)
        assert again["trial"] == first["trial"]


def test_kill_9_then_restart_ends_the_open_sessions(tmp_path: Path, job: str):
    from crucible.store.index import Index
    from crucible.trainers.client import ServiceClient, ServiceError

    hello = write_task(tmp_path / "tasks", "hello")
    jobs = tmp_path / "jobs"
    first = _serve([hello], jobs, job, "-c", "2")
    try:
        info = _started(first)
        with ServiceClient(info["url"], info["token"]) as c:
            done = c.open_session("hello")
            c.upload(done.id, "hello.txt", "Hello, crucible!\n")
            graded = c.grade_session(done.id)
            assert graded.reward == 1.0
            left = c.open_session("hello")  # open when the kill comes
            assert c.exec(left.id, "touch /app/mine").exit_code == 0
        wait_until(lambda: len(_processes_of(job)) > 0, "the open session's sandbox")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate()
    second = _serve([hello], jobs, job)
    try:
        info = _started(second)
        assert _processes_of(job) == []  # its sandbox was removed by the startup cleanup
        with ServiceClient(info["url"], info["token"]) as c:
            for call in (lambda: c.exec(left.id, "ls"), lambda: c.grade_session(left.id)):
                with pytest.raises(ServiceError) as gone:
                    call()
                assert gone.value.status == 404
        _terminate(second)
    finally:
        _kill(second)
    assert "sandbox(es) an earlier run of this job left" in (jobs / job / "job.log").read_text()
    index = Index(jobs, readonly=True)
    rows = {row["trial_name"]: row["outcome"] for row in index.trials(job)}
    index.close()
    assert graded.trial is not None and rows == {graded.trial.split("/")[1]: "graded"}
