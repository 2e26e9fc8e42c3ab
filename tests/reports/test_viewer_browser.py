"""Headless Chromium drives the viewer (jobs -> job -> trial, live updates) and
opens the HTML report, checking that its plots render."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from cdpclient import Browser
from tests.helpers.jobs import JobFactory, JobsFactory, T
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.reports.viewer import ViewerServer

pytestmark = pytest.mark.browser

TRAJ = [
    {"role": "user", "content": "Do the thing for alpha"},
    {
        "role": "assistant",
        "content": "I will list the files.",
        "tool_calls": [{"function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}],
    },
    {"role": "tool", "content": "answer.txt"},
]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", data[16:24])
    return w, h


async def test_viewer_in_chromium(
    chromium: str, server: ViewerServer, make_job: JobFactory, jobs_dir: Path
) -> None:
    make_job("finished", {"alpha": [T(1.0, trajectory=TRAJ), 0.0], "beta": ["sandbox_failed", 1.0]})
    live = make_job("live", {"alpha": [1.0], "beta": []}, status="running", attempts=2)
    async with Browser(chromium) as b:
        await b.goto(server.url)
        # the token came once in the URL: it is gone from the address bar, kept in a
        # cookie no script can read, and a request without the cookie gets nothing
        assert await b.eval("location.href") == server.base_url
        assert server.gate.token not in await b.eval("document.cookie")
        refused = await b.eval("fetch('/api/jobs', {credentials: 'omit'}).then(r => r.status)")
        assert refused == 401
        # jobs list
        await b.wait_for("document.querySelectorAll('#jobs tbody tr').length === 2")
        assert await b.eval(
            "[...document.querySelectorAll('#jobs tbody tr')].map(r => r.dataset.job).sort()"
        ) == [
            "finished",
            "live",
        ]
        # click into the running job
        await b.eval("document.querySelector('#jobs tr[data-job=\"live\"] a').click()")
        await b.wait_for(
            "document.body.dataset.view === 'job' && !!document.querySelector('#tasks')"
        )
        assert await b.eval("document.querySelectorAll('#tasks a.badge').length") == 1
        # a trial finishes while we watch: the page updates by itself
        JobsFactory(live.parent).reopen("live").trial("beta", 0, reward=0.0)
        await b.wait_for("document.querySelectorAll('#tasks a.badge').length === 2", timeout=10)
        cards = await b.eval("document.querySelector('#job-cards').innerText")
        assert "2 / 4" in cards

        # the finished job, then its first trial
        await b.eval("location.hash = '#/'")
        await b.wait_for("!!document.querySelector('#jobs tr[data-job=\"finished\"]')")
        await b.eval("document.querySelector('#jobs tr[data-job=\"finished\"] a').click()")
        await b.wait_for("document.querySelectorAll('#tasks tbody tr').length === 2")
        badges = await b.eval(
            "[...document.querySelectorAll('#tasks a.badge')].map(a => a.className)"
        )
        assert sorted(badges) == sorted(["badge pass", "badge fail", "badge error", "badge pass"])
        await b.eval("document.querySelector('#tasks tr[data-task=\"alpha\"] a.badge').click()")
        await b.wait_for(
            "document.body.dataset.view === 'trial' && !!document.querySelector('#trajectory')"
        )
        trial = await b.eval(
            "({instr: document.querySelector('#instruction').innerText,"
            " traj: document.querySelector('#trajectory').innerText,"
            " verifier: document.querySelector('#verifier').innerText,"
            " rewards: document.querySelector('#rewards').innerText,"
            " timings: document.querySelector('#timings').innerText,"
            " log: document.querySelector('#trial-log').innerText,"
            " cards: document.querySelector('#trial-cards').innerText})"
        )
        assert "Do the thing for alpha" in trial["instr"]
        assert "I will list the files." in trial["traj"] and "bash\ncmd: ls" in trial["traj"]
        assert "PASSED test_alpha" in trial["verifier"]
        assert "reward" in trial["rewards"] and "1.0000" in trial["rewards"]
        assert "agent_execution" in trial["timings"] and "7.0 s" in trial["timings"]
        assert "trial alpha__0: task alpha attempt 0" in trial["log"]
        assert "graded" in trial["cards"]
        # a file link serves the raw file
        href = await b.eval(
            "[...document.querySelectorAll('#files a')].find(a => a.textContent === 'verifier/test-stdout.txt').href"
        )
        text = await b.eval(f"fetch({json.dumps(href)}).then(r => r.text())")
        assert text == "PASSED test_alpha\n"
        # the errored trial shows its error; crumbs lead back to the task
        await b.eval("location.hash = '#/job/finished/trial/beta__0'")
        await b.wait_for("!!document.querySelector('#trial-error')")
        assert "sandbox_failed" in await b.eval("document.querySelector('#trial-error').innerText")
        await b.eval(
            "[...document.querySelectorAll('#crumbs a')].find(a => a.textContent === 'beta').click()"
        )
        await b.wait_for(
            "document.body.dataset.view === 'task' && document.querySelectorAll('#trials tbody tr').length === 2"
        )
        # an unknown job shows an error, not a blank page
        await b.eval("location.hash = '#/job/nope'")
        await b.wait_for("!!document.querySelector('#error')")
        shot = await b.screenshot()
        w, h = png_size(shot)
        assert w == 1280 and h > 500
        assert b.exceptions == []


async def test_html_report_renders_in_chromium(
    chromium: str, make_job: JobFactory, jobs_dir: Path, tmp_path: Path
) -> None:
    md = {"a": {"category": "easy"}, "b": {"category": "hard"}}
    make_job(
        "r1",
        {
            "a": [T(1.0, cost=0.01), T(0.0, cost=0.02, duration=25)],
            "b": [T(0.5, cost=0.04), "model_failed"],
        },
        metadata=md,
    )
    make_job("r2", {"a": [1.0, 1.0], "b": [0.0, 1.0]}, metadata=md)
    out = tmp_path / "report.html"
    res = CliRunner().invoke(
        app, ["report", "r1", "r2", "--jobs-dir", str(jobs_dir), "--format", "html", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    async with Browser(chromium) as b:
        await b.goto("about:blank")
        blank = await b.screenshot()
        await b.goto(out.resolve().as_uri())
        plots = await b.wait_for(
            "[...document.querySelectorAll('svg.plot')].map(s => { const r = s.getBoundingClientRect();"
            " return {kind: s.dataset.plot, w: r.width, h: r.height,"
            " marks: s.querySelectorAll('rect.bar, path.series, circle.point').length}; })"
        )
        assert {p["kind"] for p in plots} == {
            "pass-k",
            "rewards",
            "categories",
            "durations",
            "costs",
        }
        for p in plots:
            assert p["w"] > 100 and p["h"] > 100 and p["marks"] > 0, p
        # the task filter works, and a trial link points at a real file
        await b.eval(
            "const f = document.getElementById('filter'); f.value = 'b'; f.dispatchEvent(new Event('input'))"
        )
        visible = await b.eval(
            "[...document.querySelectorAll('#tasks tbody tr')].filter(r => r.style.display !== 'none').map(r => r.dataset.task)"
        )
        assert visible == ["b"]
        href = await b.eval("document.querySelector('#tasks a.t').href")
        assert href.startswith("file://") and href.endswith("trial.log")
        # the browser resolved the relative link to the trial's log on disk
        log = Path(unquote(urlsplit(href).path))
        assert await asyncio.to_thread(log.is_file) and log.parent.parent == jobs_dir / "r1"
        shot = await b.screenshot()
        w, h = png_size(shot)
        assert w == 1280 and h > 500
        assert len(shot) > 3 * len(blank)  # plots and tables, not an empty page
        assert b.exceptions == []
