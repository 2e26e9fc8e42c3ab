"""The viewer shows ATIF trajectories: a claude-code run's recorded stream-json converted on the
fly from agent/stdout.txt, and a written agent/trajectory.atif.json; one check in Chromium."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cdpclient import Browser
from tests.helpers.jobs import JobsFactory

from crucible.export.atif.installed import installed_to_atif
from crucible.reports.viewer import ViewerServer

SAMPLES = Path(__file__).resolve().parents[1] / "export" / "atif_samples"
STREAM = (SAMPLES / "claude-code-stream.jsonl").read_text()


@pytest.fixture
def client(server: ViewerServer) -> Iterator[httpx.Client]:
    auth = {"Authorization": f"Bearer {server.gate.token}"}
    with httpx.Client(base_url=server.base_url.rstrip("/"), headers=auth, timeout=10) as c:
        yield c


@pytest.fixture
def cc_job(jobs_dir: Path) -> Path:
    """A claude-code job: trial alpha__0 left only its stdout (converted when viewed),
    beta__0 a written ATIF file (what agents/installed.py leaves now)."""
    job = JobsFactory(jobs_dir).job("cc", tasks=["alpha", "beta"], agent="command")
    job.trial("alpha", 0, agent_files={"stdout.txt": STREAM, "command.txt": "claude -p\n"})
    doc = installed_to_atif("claude-code", STREAM)
    assert doc is not None
    job.trial("beta", 0, agent_files={"trajectory.atif.json": json.dumps(doc.to_json_dict())})
    result = job.path / "alpha__0" / "result.json"
    data = json.loads(result.read_text())
    data["agent_result"]["metadata"] = {"template": "claude-code"}
    result.write_text(json.dumps(data))
    job.finish()
    return job.path


def test_claude_code_log_is_shown_as_an_atif_trajectory(client: httpx.Client, cc_job: Path) -> None:
    for trial, source in (("alpha__0", "claude-code"), ("beta__0", "atif")):
        data = client.get(f"/api/jobs/cc/trials/{trial}").json()
        atif = data["atif"]
        assert atif["source"] == source
        steps = atif["document"]["steps"]
        assert [s["source"] for s in steps] == ["agent", "agent", "agent"]
        assert steps[0]["tool_calls"][0]["function_name"] == "Bash"
        assert steps[0]["observation"]["results"][0]["content"] == "README.md"
        assert "trajectory.atif.json" not in [t["name"] for t in data["agent_logs"]]
    # a trial without the template's name is not guessed at
    data = json.loads((cc_job / "alpha__0" / "result.json").read_text())
    data["agent_result"]["metadata"] = {}
    (cc_job / "alpha__0" / "result.json").write_text(json.dumps(data))
    assert client.get("/api/jobs/cc/trials/alpha__0").json()["atif"] is None


def test_hostile_atif_file_falls_back(client: httpx.Client, cc_job: Path) -> None:
    """Attack: an agent writes its own agent/trajectory.atif.json (a link to a host file, or
    an invalid document). Neither is followed or shown; the stdout conversion stands in."""
    atif = cc_job / "alpha__0" / "agent" / "trajectory.atif.json"
    atif.symlink_to("/etc/passwd")
    got = client.get("/api/jobs/cc/trials/alpha__0").json()["atif"]
    assert got["source"] == "claude-code"
    atif.unlink()
    atif.write_text('{"schema_version": "ATIF-v1.8", "steps": "<script>"}')
    assert client.get("/api/jobs/cc/trials/alpha__0").json()["atif"]["source"] == "claude-code"


@pytest.mark.browser
async def test_atif_steps_in_chromium(chromium: str, server: ViewerServer, cc_job: Path) -> None:
    async with Browser(chromium) as b:
        await b.goto(server.url)
        await b.eval("location.hash = '#/job/cc/trial/alpha__0'")
        await b.wait_for("document.querySelectorAll('#atif-trajectory .atif-step').length === 3")
        text = await b.eval("document.querySelector('#atif-trajectory').innerText")
        assert "from claude-code" in text and "Bash $ ls /app" in text
        assert "→ README.md" in text and "I should check what is in the folder first." in text
