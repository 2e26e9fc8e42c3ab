"""`crucible generate` and `generate report` at the CLI, on proposals the static checks settle
(no sandbox): budgets, a setter without tool calls, usage errors, the report's forms."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.contracts import MODERN_IDS
from tests.generate.scripted import propose, task_files
from tests.helpers.fake_openai import FakeOpenAI

runner = CliRunner()


def _generate(server: FakeOpenAI, out: Path, *extra: str) -> dict[str, object]:
    res = runner.invoke(app, [
        "generate", "-o", str(out), "--setter-model", "gpt-4.1-mini", "--setter-base-url",
        server.url, "--solver-model", "m", "--solver-base-url", server.url, "--json",
        "--jobs-dir", str(out.parent / "jobs"), *extra,
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)  # type: ignore[no-any-return]


def test_token_budget_stops_the_run_and_a_setter_without_tools_answers_in_text(
    tmp_path: Path,
) -> None:
    with FakeOpenAI(reject_tools=True) as server:
        server.push(propose(task_files("leak", leak=True, category="app"), as_text=True))
        report = _generate(server, tmp_path / "gen", "--max-tokens", "1", "--max-tasks", "5")
        assert len(server.requests) == 2  # refused with tools, then asked without
        assert "tools" not in server.requests[1]
    assert (report["proposed"], report["rejected"]) == (1, {"leaked_solution": 1})
    assert list(report["coverage"]) == list(MODERN_IDS)  # the default: the 25 contract ids
    state = json.loads((tmp_path / "gen" / "state.json").read_text())
    assert state["stop_reason"] == "max_tokens"
    html = runner.invoke(app, ["generate", "report", str(tmp_path / "gen"), "--html"])
    assert html.exit_code == 0 and "<pre>" in html.stdout and "leaked_solution" in html.stdout
    text = runner.invoke(app, ["generate", "report", str(tmp_path / "gen")])
    assert "funnel: proposed 1 -> valid 0" in text.stdout


def test_usage_errors_are_json_with_stable_codes(tmp_path: Path) -> None:
    res = runner.invoke(app, ["generate", "--setter-model", "m", "--json"])
    assert res.exit_code == 2
    res = runner.invoke(app, ["generate", "-o", str(tmp_path), "--setter-model", "m",
                              "--setter-base-url", "http://127.0.0.1:9/v1", "--band", "0.9,0.1"])  # fmt: skip
    assert res.exit_code == 2 and "LO <= HI" in res.output
    res = runner.invoke(app, ["generate", "-o", str(tmp_path / "g"), "--setter-model", "m",
                              "--setter-base-url", "http://127.0.0.1:9/v1", "--json"])  # fmt: skip
    assert res.exit_code == 2 and "needs a model" in json.loads(res.stderr)["message"]
    assert not (tmp_path / "g").exists()  # refused before anything ran
    res = runner.invoke(app, ["generate", "report", str(tmp_path / "none"), "--json"])
    assert res.exit_code == 3 and json.loads(res.stderr)["error"] == "not_found"
