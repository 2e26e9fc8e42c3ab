"""The one service, wired (serve/wiring.py): grades and sessions share the warm pool
(`--warm`), the concurrency budget and the job; session trials are indexed like grades;
/metrics counts sessions; the body cap holds for session requests too; at shutdown the
pooled sandboxes are closed, leaving nothing for a cleanup to find."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import httpx
import pytest
from tests.engine.test_resume_local import _processes_of
from tests.helpers.serving import service_thread
from tests.helpers.wait import wait_until
from tests.serve.test_sessions import session_task

from crucible.records.serve import GradeStatus
from crucible.sandboxes.local.provider import LocalProvider
from crucible.serve.pool import pool_key
from crucible.serve.wiring import grade_specs
from crucible.store.index import Index
from crucible.trainers.client import ServiceClient, ServiceError

HELLO_FILES = {"type": "files", "files": {"/app/hello.txt": "Hello, crucible!\n"}}


def test_a_grade_and_a_session_served_from_the_warm_pool(tmp_path: Path) -> None:
    task = session_task(tmp_path)
    job = "wired-pool"
    with service_thread(tmp_path, [task.path], job=job, warm=1) as srv, \
            ServiceClient(srv.url, srv.token) as c, \
            httpx.Client(base_url=srv.url, timeout=120,
                         headers={"Authorization": f"Bearer {srv.token}"}) as http:  # fmt: skip
        pool = srv.pool
        specs = [*grade_specs(srv.service), *srv.manager.specs()]
        kinds = {pool_key(s) for s in specs}  # a grade's and a session's sandbox
        wait_until(lambda: pool.idle == len(kinds), "the pool to fill")
        grade = http.post("/v1/grade", json={"items": [{"id": "g1", "task": {"id": "hello"},
                                                        "submission": HELLO_FILES}],
                                             "wait_s": 120}).json()["results"][0]  # fmt: skip
        assert (grade["status"], grade["reward"]) == ("ok", 1.0)
        assert pool.hits == 1 and pool.misses == 0
        wait_until(lambda: pool.idle == len(kinds), "the pool to fill again")
        s = c.open_session("hello")
        assert c.exec(s.id, "ls -A /app").stdout == ""  # fresh: the grade's file is not here
        c.upload(s.id, "hello.txt", "Hello, crucible!\n")
        r = c.grade_session(s.id)
        assert r.status == GradeStatus.ok and r.reward == 1.0
        assert pool.hits == 2 and pool.misses == 0
        metrics = http.get("/metrics").text
        assert "crucible_serve_warm_hits_total 2" in metrics
        assert "crucible_serve_warm_misses_total 0" in metrics
        assert srv.provider._live  # the pool's refills, started and idle
        inner = srv.provider
    # Shutdown closed the pooled sandboxes: nothing left for a cleanup of the job.
    assert not inner._live and _processes_of(job) == []
    assert asyncio.run(LocalProvider().cleanup(job)) == 0
    # The session's trial is indexed with the grade's; the job counts both.
    index = Index(tmp_path / "jobs", readonly=True)
    rows = {(row["trial_name"], row["outcome"]) for row in index.trials(job)}
    index.close()
    assert len(rows) == 2 and {o for _, o in rows} == {"graded"}
    assert r.trial is not None and (r.trial.split("/")[1], "graded") in rows
    summary = json.loads((tmp_path / "jobs" / job / "result.json").read_text())
    assert summary["n_done"] == 2, summary


def test_sessions_in_metrics_and_under_the_body_cap(tmp_path: Path) -> None:
    task = session_task(tmp_path)
    with service_thread(tmp_path, [task.path], max_body_mb=0.01) as srv, \
            ServiceClient(srv.url, srv.token) as c:  # fmt: skip
        auth = {"Authorization": f"Bearer {srv.token}"}
        s = c.open_session("hello")
        text = httpx.get(f"{srv.url}/metrics", headers=auth).text
        assert "crucible_serve_sessions 1" in text and "crucible_serve_sessions_waiting 0" in text
        assert c.exec(s.id, "wc -c", input="x" * 4000).stdout.strip() == "4000"  # under it
        for call in (lambda: c.upload(s.id, "big", b"a" * 20_000),
                     lambda: c.exec(s.id, "wc -c", input="x" * 20_000)):  # fmt: skip
            with pytest.raises(ServiceError) as big:
                call()
            assert big.value.status == 413  # refused before anything reads it
        raw = httpx.post(f"{srv.url}/v1/sessions/{s.id}/upload", headers=auth,
                         json={"path": "f", "content": base64.b64encode(b"a" * 20_000).decode(),
                               "base64": True})  # fmt: skip
        assert raw.status_code == 413
        assert c.exec(s.id, "ls -A").stdout == ""  # the session lives on, nothing written
        c.close_session(s.id)
        text = httpx.get(f"{srv.url}/metrics", headers=auth).text
        assert "crucible_serve_sessions 0" in text
