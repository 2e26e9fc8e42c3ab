"""What the service writes behind its answers (serve/store.py write_later, the running
summary in serve/jobbook.py): off the request's path, and still all on disk at shutdown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers.serving import HELLO, Serving, hello_item, write_task

from crucible.serve import jobbook, store
from crucible.serve.store import GRADES_DIR, GradeRecord


async def test_finished_records_and_the_summary_are_on_disk_after_shutdown(
    tmp_path: Path, serving: Serving, monkeypatch: pytest.MonkeyPatch
):
    # No batch and no running summary comes due while the service runs: only
    # close() can write the finished records and the final summary.
    monkeypatch.setattr(store, "FLUSH_DELAY_SEC", 3600.0)
    monkeypatch.setattr(jobbook, "SUMMARY_INTERVAL_SEC", 3600.0)
    task = write_task(tmp_path / "tasks", "hello")
    async with serving([task], concurrency=2) as s:
        items = [hello_item(f"d{i}", HELLO if i % 2 == 0 else "no\n") for i in range(4)]
        resp = await s.grade(*items)
        assert resp.status_code == 200, resp.text
        assert [r["reward"] for r in resp.json()["results"]] == [1.0, 0.0, 1.0, 0.0]
        job_dir = s.service.job_dir
        # Answered from memory before the records are written: a cached answer is the same.
        again = await s.grade(items[0])
        assert again.json()["results"][0]["cached"] is True
        assert again.json()["results"][0]["reward"] == 1.0
    records = [GradeRecord.model_validate_json(p.read_text())
               for p in (job_dir / GRADES_DIR).glob("*.json")]  # fmt: skip
    assert sorted(r.id for r in records) == ["d0", "d1", "d2", "d3"]
    assert all(r.result is not None and r.submission is None for r in records)
    assert {r.id: r.result.reward for r in records if r.result} == {
        "d0": 1.0, "d1": 0.0, "d2": 1.0, "d3": 0.0}  # fmt: skip
    summary = json.loads((job_dir / "result.json").read_text())
    assert (summary["status"], summary["n_trials"], summary["n_done"]) == ("completed", 4, 4)
    assert summary["mean_reward"] == 0.5


def test_the_running_summary_backs_off_as_it_grows_costly():
    share = jobbook.SUMMARY_SHARE
    assert jobbook.next_summary_in(0.0) == jobbook.SUMMARY_INTERVAL_SEC
    assert jobbook.next_summary_in(share * jobbook.SUMMARY_INTERVAL_SEC / 2) == (
        jobbook.SUMMARY_INTERVAL_SEC)  # fmt: skip
    # A summary that took 0.1 s waits 0.1 / SUMMARY_SHARE for the next: at most that
    # share of the event loop goes to it, however many grades the job holds.
    assert jobbook.next_summary_in(0.1) == pytest.approx(0.1 / share)
    assert jobbook.next_summary_in(0.1) > jobbook.SUMMARY_INTERVAL_SEC
