"""What a person sees (issue 15): the viewer's trial page and the HTML report, rendered
by headless Chromium at a fixed 1280x900 viewport, checked on the screenshot's pixels and
on element boxes against the viewport, not only in the DOM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cdpclient import Browser
from pngpixels import dark_share
from tests.helpers.jobs import JobFactory, T
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.reports.viewer import ViewerServer

pytestmark = pytest.mark.browser
VIEWPORT = {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}

COMMAND = "cd /app && ls -la\nprintf 'Hello, crucible!' > hello.txt"
TRAJ = [
    {"role": "user", "content": "Write hello.txt"},
    {
        "role": "assistant",
        "content": "I will write the file.",
        "tool_calls": [
            {"function": {"name": "bash", "arguments": json.dumps({"command": COMMAND})}}
        ],
    },
    {"role": "tool", "content": "total 0"},
]
WHY = "E   ModuleNotFoundError: No module named 'pytest'"


async def box(b: Browser, selector: str) -> dict[str, Any]:
    return dict(
        await b.eval(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return {x: r.left, y: r.top, w: r.width, h: r.height, right: r.right, bottom: r.bottom,"
            " px: r.left + window.scrollX, py: r.top + window.scrollY}; })()"
        )
    )


async def shot_of(b: Browser, r: dict[str, Any]) -> bytes:
    import base64

    res = await b.send(
        "Page.captureScreenshot",
        {"format": "png", "clip": {"x": r["px"], "y": r["py"], "width": r["w"], "height": r["h"],
                                    "scale": 1}},
    )  # fmt: skip
    return base64.b64decode(res["data"])


async def test_trial_page_as_seen(
    chromium: str, server: ViewerServer, make_job: JobFactory
) -> None:
    jdir = make_job(
        "fh",
        {"alpha": [T(0.0, cost=0.0123, tokens=(1200, 0, 0, 80), trajectory=TRAJ)]},
        model="gpt-4o",
    )
    (jdir / "alpha__0" / "verifier" / "test-stdout.txt").write_text(
        "collecting ...\n/usr/bin/python3: can't run the tests\n" + WHY + "\n"
    )
    async with Browser(chromium) as b:
        await b.send("Emulation.setDeviceMetricsOverride", VIEWPORT)
        await b.goto(server.url + "#/job/fh/trial/alpha__0")
        await b.wait_for(
            "!!document.querySelector('#why pre') && !!document.querySelector('.tool-call')"
        )
        page = await b.eval(
            "({cards: document.querySelector('#trial-cards').innerText,"
            " why: document.querySelector('#why').innerText,"
            " call: document.querySelector('.tool-call').innerText,"
            " overflow: document.documentElement.scrollWidth - window.innerWidth})"
        )
        # tokens and cost on the cards; the reason above the rest; the command as text
        assert "1200 in / 80 out" in page["cards"] and "$0.0123" in page["cards"]
        assert WHY in page["why"]
        assert page["call"] == "bash $ " + COMMAND  # two lines, as typed
        assert '{"command"' not in page["call"] and "\\n" not in page["call"]
        assert page["overflow"] <= 0  # nothing runs off the right edge
        for sel in ("#trial-cards", "#why pre", ".tool-call"):
            r = await box(b, sel)
            assert r["w"] > 0 and r["h"] > 0 and r["x"] >= 0 and r["right"] <= 1280, (sel, r)
        # the reason is painted where its box is, and nothing covers it
        await b.eval("document.querySelector('#why').scrollIntoView()")
        r = await box(b, "#why pre")
        top = await b.eval(
            f"document.elementFromPoint({r['x'] + 20}, {r['y'] + r['h'] / 2}).closest('#why') !== null"
        )
        assert top
        assert dark_share(await shot_of(b, r)) > 0.005  # text pixels (a blank box: 0)
        await b.eval("window.scrollTo(0, 0)")
        full = await b.screenshot()
        assert dark_share(full) > 0.005
        assert b.exceptions == []


async def test_html_report_as_seen(
    chromium: str, make_job: JobFactory, jobs_dir: Path, tmp_path: Path
) -> None:
    md = {"a": {"category": "easy"}, "b": {"category": "hard"}}
    long_a, long_b = (
        "terminal-agent-baseline-run-2026-11-30",
        "terminal-agent-new-prompt-2026-11-30",
    )
    make_job(long_a, {"a": [T(1.0, cost=0.01), T(0.0, cost=0.02, duration=25)],
                      "b": [T(0.5, cost=0.04), 1.0]}, metadata=md, agent="terminal", model="gpt-4o")  # fmt: skip
    make_job(long_b, {"a": [1.0, 1.0], "b": [0.0, T(1.0, cost=0.03)]}, metadata=md,
             agent="terminal", model="gpt-4o-mini")  # fmt: skip
    out = tmp_path / "report.html"
    res = CliRunner().invoke(app, ["report", long_a, long_b, "--jobs-dir", str(jobs_dir),
                                   "--format", "html", "-o", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    async with Browser(chromium) as b:
        await b.send("Emulation.setDeviceMetricsOverride", VIEWPORT)
        await b.goto(out.resolve().as_uri())
        clipped = await b.wait_for(
            "(() => { const out = [];"
            " for (const s of document.querySelectorAll('svg.plot')) {"
            "  const r = s.getBoundingClientRect();"
            "  for (const t of s.querySelectorAll('text')) { const q = t.getBoundingClientRect();"
            "   if (q.width && (q.left < r.left - 1 || q.right > r.right + 1 || q.top < r.top - 1"
            "       || q.bottom > r.bottom + 1)) out.push(s.dataset.plot + ': ' + t.textContent); } }"
            " return {n: document.querySelectorAll('svg.plot').length, clipped: out}; })()"
        )
        assert clipped["n"] == 5 and clipped["clipped"] == [], clipped
        legends = await b.eval(
            "[...document.querySelectorAll('svg.plot[data-plot=\"rewards\"] text.legend-label')].map(t => t.textContent)"
        )
        assert any(long_a in t for t in legends) and any(long_b in t for t in legends)
        await b.eval("document.querySelector('svg.plot[data-plot=\"costs\"]').scrollIntoView()")
        r = await box(b, "svg.plot[data-plot='costs']")
        assert r["right"] <= 1280 and dark_share(await shot_of(b, r)) > 0.01
        await b.eval("window.scrollTo(0, 0)")
        assert dark_share(await b.screenshot()) > 0.005
        assert b.exceptions == []
