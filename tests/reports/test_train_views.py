"""Training runs in `crucible report` (reward and components per step: JSON, text, HTML
with an SVG chart) and in the viewer (listed beside the jobs, one run's steps and samples,
its chart as SVG); names from the reward function are escaped, and a run name from the
URL must be a training run directly in the jobs dir."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.helpers.jobs import write_job
from tests.helpers.train_runs import fill, make_run
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.reports.viewer import ViewerServer

EVIL = "<script>alert(1)</script>"


def test_report_shows_reward_and_components_per_step(jobs_dir: Path, tmp_path: Path) -> None:
    h = make_run(jobs_dir)
    fill(h, component=EVIL)
    res = CliRunner().invoke(app, ["report", h.id, "--jobs-dir", str(jobs_dir), "--json"])
    assert res.exit_code == 0, res.stderr
    [run] = json.loads(res.stdout)["train_runs"]
    assert [(m["step"], m["reward_mean"]) for m in run["reward_per_step"]] == [(1, 0.25), (2, 0.75)]
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", h.id, "--jobs-dir", str(jobs_dir), "-f", "html",
                                   "-o", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.stderr
    page = out.read_text()
    assert "<svg" in page and page.count('class="series"') == 2  # reward and the component
    assert EVIL not in page and "&lt;script&gt;" in page


def test_report_of_jobs_is_unchanged_beside_training_runs(jobs_dir: Path) -> None:
    write_job(jobs_dir, "job-a", {"t1": [1.0]})
    fill(make_run(jobs_dir))
    res = CliRunner().invoke(app, ["report", "job-a", "--jobs-dir", str(jobs_dir), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["jobs"][0]["job_id"] == "job-a"


@pytest.fixture
def client(server: ViewerServer) -> Iterator[httpx.Client]:
    auth = {"Authorization": f"Bearer {server.gate.token}"}
    with httpx.Client(base_url=server.base_url.rstrip("/"), headers=auth, timeout=10) as c:
        yield c


def test_viewer_lists_and_plots_training_runs(client: httpx.Client, jobs_dir: Path) -> None:
    write_job(jobs_dir, "job-a", {"t1": [1.0]})
    h = make_run(jobs_dir)
    fill(h, component=EVIL)
    listed = client.get("/api/jobs").json()
    assert [j["job_id"] for j in listed["jobs"]] == ["job-a"]
    assert [(t["run_id"], t["reward_mean"]) for t in listed["train_runs"]] == [(h.id, 0.75)]
    one = client.get(f"/api/train/{h.id}").json()
    assert len(one["reward_per_step"]) == 2 and one["n_samples"] == 4
    svg = client.get(f"/api/train/{h.id}/plot.svg")
    assert svg.headers["content-type"].startswith("image/svg+xml")
    assert svg.text.startswith("<svg") and EVIL not in svg.text
    for bad in ("job-a", "..", "nope", f"{h.id}/other"):
        assert client.get(f"/api/train/{bad}").status_code == 404
