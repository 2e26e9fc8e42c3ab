"""Why a trial scored 0 when a host-side verifier stage zeroed it (a translation task's
contracts gate, a judge's veto), everywhere a user looks: the run summary, `report` (a
why row per stage) and the viewer's trial page; and `report` with several reward keys
shows each key and says which one its means are of."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cdpclient import Browser
from tests.helpers.jobs import JobFactory, T
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.records.verifier import StageResult
from crucible.reports.viewer import ViewerServer
from crucible.store.layout import iter_trial_results

runner = CliRunner()

NO_PYTHON = "no Python file was submitted"
STAGES = [
    StageResult(name="tests", kind="script", role="score", status="passed"),
    StageResult(name="contracts", kind="contracts", role="gate", status="failed", reason=NO_PYTHON),
    StageResult(name="judge", kind="judge", role="veto", status="skipped", reason="gate failed"),
]


@pytest.fixture
def gated(make_job: JobFactory) -> Path:
    return make_job(
        "gated",
        {"port": [T({"reward": 0.0}, stages=STAGES), 1.0]},
        metadata={"port": {"category": "translation"}},
    )


def _report(*args: str) -> str:
    res = runner.invoke(app, ["report", *args, "-f", "markdown"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return res.output


def test_report_has_a_why_row_per_stage(gated: Path) -> None:
    out = _report(str(gated))
    why = out.split("## Why")[1]
    rows = [ln for ln in why.splitlines() if ln.startswith("| gated")]
    assert any("stage contracts" in r and f"failed: {NO_PYTHON}" in r for r in rows), why
    assert any("stage judge" in r and "skipped: gate failed" in r for r in rows), why
    assert any("stage tests" in r and "passed" in r for r in rows), why


def test_the_run_summary_says_which_stage_zeroed_it(gated: Path) -> None:
    from crucible.cli.run_output import reason_lines

    zero = next(r for r in iter_trial_results(gated, []) if r.attempt == 0)
    lines = reason_lines(zero, gated / zero.trial_name)
    assert lines[0] == f"reward 0: contracts failed: {NO_PYTHON}", lines


def test_the_viewer_trial_api_and_page_carry_the_stages(gated: Path) -> None:
    from crucible.reports.viewer_api import ViewerAPI

    api = ViewerAPI(gated.parent)
    data = api.trial("gated", "port__0")
    got = [(s["name"], s["status"], s["reason"]) for s in data["stages"]]
    assert got == [("tests", "passed", ""), ("contracts", "failed", NO_PYTHON),
                   ("judge", "skipped", "gate failed")]  # fmt: skip
    js = (Path(__file__).parents[2] / "src/crucible/reports/static/app.js").read_text()
    assert 'h("h2", {}, "Verifier stages")' in js and 'id: "stages"' in js


def test_report_shows_every_reward_key_and_names_the_primary(make_job: JobFactory) -> None:
    job = make_job(
        "keys",
        {"t1": [{"recall": 0.5, "precision": 1.0}], "t2": [{"recall": 1.0, "precision": 0.25}]},
    )
    out = _report(str(job), "--reward-key", "recall")
    results = out.split("## By task")[0]
    header = next(ln for ln in results.splitlines() if ln.startswith("| job"))
    assert "mean ± SE (recall)" in header, header
    assert "precision" in header, header
    row = next(ln for ln in results.splitlines() if ln.startswith("| keys"))
    assert "0.625" in row, row  # precision's mean beside recall's 0.750
    data = json.loads(
        runner.invoke(app, ["report", str(job), "--json", "--reward-key", "recall"]).output
    )
    assert data["jobs"][0]["overall"]["primary"] == "recall"


@pytest.mark.browser
async def test_the_viewer_trial_page_has_a_verifier_stages_section(
    chromium: str, server: ViewerServer, gated: Path
) -> None:
    async with Browser(chromium) as b:
        await b.goto(server.url)
        await b.eval("location.hash = '#/job/gated/trial/port__0'")
        await b.wait_for("!!document.querySelector('#stages')")
        text = await b.eval("document.querySelector('#stages').innerText")
        failed = await b.eval("document.querySelectorAll('#stages tr.err').length")
        assert b.exceptions == []
    assert "contracts" in text and f"failed\t{NO_PYTHON}" in text, text
    assert "judge" in text and "skipped" in text and failed == 1
