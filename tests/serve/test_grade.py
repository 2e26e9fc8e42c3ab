"""POST /v1/grade end to end: real uvicorn on loopback, real local sandboxes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.helpers.serving import HELLO, Serving, hello_item, write_task

from crucible.records.serve import GradeResponse, GradeStatus
from crucible.serve.store import GRADES_DIR
from crucible.store.index import Index


async def test_a_concurrent_batch_is_graded_in_input_order(tmp_path: Path, serving: Serving):
    task = write_task(tmp_path / "tasks", "hello")
    async with serving([task], concurrency=4) as s:
        items = [hello_item(f"b{i}", HELLO if i % 2 == 0 else "wrong\n") for i in range(8)]
        resp = await s.grade(*items)
        assert resp.status_code == 200, resp.text
        results = GradeResponse.model_validate(resp.json()).results
        assert [r.id for r in results] == [f"b{i}" for i in range(8)]
        assert [r.reward for r in results] == [1.0 if i % 2 == 0 else 0.0 for i in range(8)]
        assert {r.status for r in results} == {GradeStatus.ok}
        assert all(not r.cached and r.task_hash == s.service.by_name["hello"].digest
                   for r in results)  # fmt: skip
        assert len(s.creates) == 8
        # Every grade is a trial of the service's one job: the index knows them.
        job_id = s.service.cfg.job_id
        trials = {r.trial.split("/")[1] for r in results if r.trial}
        assert all((tmp_path / "jobs" / job_id / t / "result.json").is_file() for t in trials)
    index = Index(tmp_path / "jobs", readonly=True)
    try:
        row = index.get_job(job_id)
        assert row is not None and row["agent"] == "submission" and row["n_trials"] == 8
        rows = index.trials(job_id)
        assert {t["trial_name"] for t in rows} == trials
        # Each grade of a task is another attempt of it: reports count every one.
        assert sorted(t["attempt"] for t in rows) == list(range(8))
    finally:
        index.close()
    cfg = json.loads((tmp_path / "jobs" / job_id / "job.json").read_text())
    assert (cfg["agent"], cfg["attempts"]) == ("submission", 8)


async def test_a_retried_request_starts_no_second_sandbox(tmp_path: Path, serving: Serving):
    task = write_task(tmp_path / "tasks", "hello")
    async with serving([task]) as s:
        first = (await s.grade(hello_item("r1"))).json()["results"][0]
        again = (await s.grade(hello_item("r1"))).json()["results"][0]
        polled = (await s.http.get("/v1/grade/r1")).json()
        assert first["status"] == again["status"] == polled["status"] == "ok"
        assert first["reward"] == again["reward"] == polled["reward"] == 1.0
        assert (first["cached"], again["cached"], polled["cached"]) == (False, True, True)
        assert len(s.creates) == 1
        # In flight too: two requests at once for one id await the same grade.
        both = await asyncio.gather(s.grade(hello_item("r2")), s.grade(hello_item("r2")))
        got = [b.json()["results"][0] for b in both]
        assert [g["reward"] for g in got] == [1.0, 1.0]
        assert sorted(g["cached"] for g in got) == [False, True]
        # And twice in one request.
        dup = (await s.grade(hello_item("r3"), hello_item("r3"))).json()["results"]
        assert [d["cached"] for d in dup] == [False, True]
        assert len(s.creates) == 3
        metrics = (await s.http.get("/metrics")).text
        assert 'crucible_serve_grades_total{status="ok"} 3' in metrics
        assert "crucible_serve_trials_started_total 3" in metrics
        assert "crucible_serve_sandboxes_started_total 3" in metrics


async def test_every_status(tmp_path: Path, serving: Serving):
    hello = write_task(tmp_path / "tasks", "hello")
    # An environment that never comes up: its healthcheck always fails (sandbox_failed).
    broken = write_task(tmp_path / "tasks", "broken", toml=(
        '[environment.healthcheck]\ncommand = "false"\nretries = 1\n'
        "interval_sec = 0.1\nstart_period_sec = 0\n"
    ))  # fmt: skip
    async with serving([hello, broken], max_retries=2) as s:
        patch = {"type": "patch", "patch": "--- a/nothing\n+++ b/nothing\n@@ -1 +1 @@\n-x\n+y\n"}
        resp = await s.grade(
            hello_item("ok1"),
            hello_item("ok0", "wrong\n"),
            {"id": "inv", "task": {"id": "hello"}, "submission": patch},
            hello_item("uns", task="broken"),
        )
        r = {x["id"]: x for x in resp.json()["results"]}
        assert (r["ok1"]["status"], r["ok1"]["reward"]) == ("ok", 1.0)
        assert (r["ok0"]["status"], r["ok0"]["reward"]) == ("ok", 0.0)
        assert (r["inv"]["status"], r["inv"]["reward"]) == ("invalid", 0.0)
        assert "no such file to patch" in r["inv"]["error"]
        assert (r["uns"]["status"], r["uns"]["reward"]) == ("unscorable", None)
        assert r["uns"]["error"].startswith("sandbox_failed")
        assert r["uns"]["metrics"]["retries"] == 2  # the service retried it itself
        broken_creates = [c for c in s.creates if c.task_name == "broken"]
        assert len(broken_creates) == 3

        # pending: not done within wait_s (0: not waited for at all), then polled.
        pending = (await s.grade(hello_item("p1"), wait_s=0)).json()["results"][0]
        assert pending["status"] == "pending" and pending["reward"] is None
        polled = (await s.http.get("/v1/grade/p1", params={"wait_s": 120})).json()
        assert (polled["status"], polled["reward"]) == ("ok", 1.0)


async def test_conflicts_and_unknowns_start_nothing(tmp_path: Path, serving: Serving):
    hello = write_task(tmp_path / "tasks", "hello")
    other = write_task(tmp_path / "tasks", "other")
    async with serving([hello, other]) as s:
        assert (await s.grade(hello_item("c1"))).status_code == 200
        assert len(s.creates) == 1
        # The same id with another submission, or for another task: 409.
        resp = await s.grade(hello_item("c1", "other content\n"))
        assert resp.status_code == 409 and "another submission" in resp.json()["detail"]
        resp = await s.grade(hello_item("c1", task="other"))
        assert resp.status_code == 409 and "another task" in resp.json()["detail"]
        # A pinned task hash that is not the task's: 409, and the whole request refused.
        pinned = hello_item("c2")
        pinned["task"]["hash"] = "0" * 64
        resp = await s.grade(hello_item("c3"), pinned)
        assert resp.status_code == 409 and "has hash" in resp.json()["detail"]
        # An unknown task: 404 for the whole request.
        resp = await s.grade(hello_item("c4"), hello_item("c5", task="nope"))
        assert resp.status_code == 404 and "nope" in resp.json()["detail"]
        # Two items of one request with one id and two submissions: 409.
        resp = await s.grade(hello_item("c6"), hello_item("c6", "x\n"))
        assert resp.status_code == 409
        assert len(s.creates) == 1
        for gid in ("c2", "c3", "c4", "c5", "c6"):
            assert (await s.http.get(f"/v1/grade/{gid}")).status_code == 404
        grades = s.service.job_dir / GRADES_DIR
        assert len(list(grades.iterdir())) == 1  # nothing recorded for the refused ones
        # A pinned hash that matches is fine.
        pinned["task"]["hash"] = s.service.by_name["hello"].digest
        assert (await s.grade(pinned)).json()["results"][0]["reward"] == 1.0


async def test_ids_are_arbitrary_strings(tmp_path: Path, serving: Serving):
    hello = write_task(tmp_path / "tasks", "hello")
    async with serving([hello]) as s:
        odd = "../../etc/passwd/ \u00e9?#%" + "x" * 150
        resp = await s.grade(hello_item(odd))
        result = resp.json()["results"][0]
        assert result["id"] == odd and result["reward"] == 1.0
        trial = result["trial"].split("/")[1]
        assert trial.startswith("grade__") and "/" not in trial and ".." not in trial
        from urllib.parse import quote

        got = await s.http.get(f"/v1/grade/{quote(odd, safe='')}")
        assert got.status_code == 200 and got.json()["cached"] is True
        records = list((s.service.job_dir / GRADES_DIR).iterdir())
        assert [json.loads(p.read_text())["id"] for p in records] == [odd]


async def test_a_malformed_submission_is_invalid_and_the_batch_still_graded(
    tmp_path: Path, serving: Serving
):
    hello = write_task(tmp_path / "tasks", "hello")
    async with serving([hello]) as s:

        def item(gid: str, submission: object) -> dict:
            return {"id": gid, "task": {"id": "hello"}, "submission": submission}

        resp = await s.grade(
            item("m1", {"type": "patch", "patch": ""}),
            hello_item("good"),
            item("m2", {"type": "files", "files": {"relative/path": "x"}}),
            item("m3", {"type": "video"}),
            item("m4", {"type": "files", "files": {"/a/../../etc/x": "x"}}),
        )
        assert resp.status_code == 200, resp.text
        r = resp.json()["results"]
        assert [x["id"] for x in r] == ["m1", "good", "m2", "m3", "m4"]
        assert r[1]["status"] == "ok" and r[1]["reward"] == 1.0
        for x in (r[0], r[2], r[3], r[4]):
            assert (x["status"], x["reward"]) == ("invalid", 0.0), x
            assert x["error"].startswith("malformed submission")
        assert "not absolute" in r[2]["error"] and ".." in r[4]["error"]
        assert len(s.creates) == 1  # none for the malformed ones
        # A malformed submission under an id already graded is another submission: 409.
        resp = await s.grade(item("good", {"type": "patch", "patch": ""}))
        assert resp.status_code == 409
        # An unknown task is still a 404 for the whole request.
        bad = item("m5", {"type": "patch", "patch": ""})
        bad["task"]["id"] = "nope"
        assert (await s.grade(bad)).status_code == 404


async def test_max_builds_is_the_services_one_build_gate_closed_at_shutdown(
    serving: Serving, tmp_path: Path
) -> None:
    """--max-builds bounds the service's image builds (the provider's gate, through a warm
    pool too), and a shutdown closes the gate: no build starts after it."""
    hello = write_task(tmp_path / "tasks", "hello")
    from crucible.engine.request import RunRequest
    from crucible.serve.pool import PooledProvider
    from crucible.serve.server import ServeOptions, running_service
    from crucible.serve.wiring import SessionOptions

    req = RunRequest(paths=[hello], env="local", jobs_dir=tmp_path / "jobs", job_name="gate",
                     max_builds=3)  # fmt: skip
    opts = ServeOptions(port=0, sessions=SessionOptions(warm=1))
    async with running_service(req, opts) as r:
        gate = r.service.provider.build_gate
        assert gate.limit == 3 and not gate.closed  # not the default (half the cores)
        pool = r.service.provider
        assert isinstance(pool, PooledProvider) and pool.inner.build_gate is gate
    assert gate.closed
