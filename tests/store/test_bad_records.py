"""Attack: a jobs folder holds hostile or broken trial records beside honest ones: a
reward of 1.5e308 stored by a grader that did not check ranges, Infinity and NaN, a
lone surrogate escaped (valid JSON to some readers, no string to others), a truncated
file, the wrong schema. `crucible report`, `runs list`, `runs get` (and -v, --trial)
and the viewer's pages still answer, over the honest records, and warn naming each
bad one (its path, and why).

Before the one tolerant reader (store/trial_load.py), `report` died in fsum
(OverflowError) for every job in the folder, and the viewer's job page answered 500.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.helpers.jobs import JobFactory
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.reports.viewer import ViewerServer
from crucible.store.layout import INDEX_NAME

runner = CliRunner()
GOOD = {"good": [1.0, 0.0]}
# trial folder -> how its honest record (reward 1.0) is broken on disk
CORRUPT = {
    "inf__0": "inf",
    "nan__0": "nan",
    "surrogate__0": "surrogate",
    "truncated__0": "truncated",
    "schema__0": "schema",
}
STORED_HUGE = "huge__0"  # written as it was graded, before rewards were range-checked


def _strict(text: str) -> Any:
    """JSON as a browser reads it: Infinity and NaN are not JSON."""

    def refuse(c: str) -> Any:
        raise ValueError(f"not JSON: {c}")

    return json.loads(text, parse_constant=refuse)


def corrupt(path: Path, how: str) -> None:
    text = path.read_text()
    data = json.loads(text)
    if how in ("inf", "nan"):
        data["verifier_result"]["rewards"]["reward"] = math.inf if how == "inf" else math.nan
        path.write_text(json.dumps(data))  # Python writes Infinity / NaN
    elif how == "surrogate":
        data["verifier_result"]["details"] = {"note": "\udcff"}
        path.write_text(json.dumps(data))  # escaped: "\udcff"
    elif how == "truncated":
        path.write_text(text[: len(text) // 2])
    elif how == "schema":
        data["attempt"] = {"not": "a number"}
        path.write_text(json.dumps(data))


@pytest.fixture
def bad_job(make_job: JobFactory, jobs_dir: Path) -> Path:
    trials: dict[str, list[Any]] = {**GOOD, "huge": [1.5e308]}
    trials.update({name.split("__")[0]: [1.0] for name in CORRUPT})
    jdir = make_job("mixed", trials)
    for folder, how in CORRUPT.items():
        corrupt(jdir / folder / "result.json", how)
    return jdir


def bad_folders() -> list[str]:
    return [STORED_HUGE, *CORRUPT]


def assert_warned(stderr: str, jdir: Path, folders: list[str]) -> None:
    for folder in folders:
        assert str(jdir / folder / "result.json") in stderr, (folder, stderr)


def cli(*args: str) -> Any:
    res = runner.invoke(app, list(args), env={"COLUMNS": "250"})
    assert res.exit_code == 0, (args, res.output, res.exception)
    return res


def test_report_skips_bad_records_and_names_them(bad_job: Path, jobs_dir: Path) -> None:
    res = cli("report", "mixed", "--jobs-dir", str(jobs_dir), "--json")
    job = _strict(res.stdout)["jobs"][0]
    assert job["overall"]["rewards"]["reward"]["mean"] == pytest.approx(0.5)  # good: 1, 0
    assert job["overall"]["n_trials"] == 2
    assert len(job["skipped"]) == len(bad_folders())
    assert_warned(res.stderr, bad_job, bad_folders())
    assert "1.5e+308" in res.stderr and "not valid JSON" in res.stderr
    assert "wrong schema" in res.stderr
    for fmt in ("table", "markdown", "html"):
        out = cli("report", "mixed", "--jobs-dir", str(jobs_dir), "--format", fmt)
        assert_warned(out.stderr, bad_job, bad_folders())


@pytest.mark.parametrize("indexed", [True, False], ids=["index", "folders"])
def test_runs_list_and_get_skip_bad_records(bad_job: Path, jobs_dir: Path, indexed: bool) -> None:
    if not indexed:  # every count then comes from the folders
        (jobs_dir / INDEX_NAME).unlink()
    rows = _strict(cli("runs", "list", "--jobs-dir", str(jobs_dir), "--json").stdout)["jobs"]
    (row,) = rows
    assert row["mean_reward"] is not None and math.isfinite(row["mean_reward"])
    assert row["mean_reward"] <= 1.0
    for verbose in ([], ["-v"]):
        res = cli("runs", "get", "mixed", "--jobs-dir", str(jobs_dir), "--json", *verbose)
        detail = _strict(res.stdout)
        assert detail["mean_reward"] is not None and detail["mean_reward"] <= 1.0
        # the index holds the rows as graded: only the stored 1.5e308 is bad there,
        # until -v reads the records themselves; the folders show every bad one
        named = bad_folders() if verbose or not indexed else [STORED_HUGE]
        assert_warned(res.stderr, bad_job, named)
    table = cli("runs", "get", "mixed", "--jobs-dir", str(jobs_dir), "-v")
    assert "mean reward" in table.stdout
    assert_warned(table.stderr, bad_job, bad_folders())
    one = cli("runs", "get", "mixed", "--jobs-dir", str(jobs_dir), "--trial", "good__0")
    assert "good__0" in one.stdout
    assert_warned(one.stderr, bad_job, bad_folders())
    logs = cli("runs", "logs", "mixed", "--jobs-dir", str(jobs_dir))
    assert_warned(logs.stderr, bad_job, bad_folders())


@pytest.fixture
def viewer(jobs_dir: Path) -> Iterator[httpx.Client]:
    srv = ViewerServer(jobs_dir, "127.0.0.1", 0)
    th = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    th.start()
    auth = {"Authorization": f"Bearer {srv.gate.token}"}
    with httpx.Client(base_url=srv.base_url.rstrip("/"), headers=auth, timeout=10) as c:
        yield c
    srv.shutdown()
    srv.server_close()


def test_viewer_job_page_skips_bad_records(bad_job: Path, viewer: httpx.Client) -> None:
    jobs = viewer.get("/api/jobs")
    assert jobs.status_code == 200 and _strict(jobs.text)["jobs"][0]["job_id"] == "mixed"
    page = viewer.get("/api/jobs/mixed")
    assert page.status_code == 200, page.text
    data = _strict(page.text)
    assert data["metrics"]["n_trials"] == 2
    assert data["metrics"]["rewards"]["reward"]["mean"] == pytest.approx(0.5)
    assert sorted(s["trial"] for s in data["skipped"]) == sorted(bad_folders())
    assert data["running"] == []  # a bad record is not a trial still running
    for folder in bad_folders():
        trial = viewer.get(f"/api/jobs/mixed/trials/{folder}")
        assert trial.status_code == 200, (folder, trial.text)
        got = _strict(trial.text)
        assert got["status"] == "bad_record" and got["bad_record"], folder
    task = viewer.get("/api/jobs/mixed/tasks/huge")
    assert task.status_code == 200 and _strict(task.text)["metrics"] is None
