"""The scripted setter replies of examples/generate/setter/ (one Modal-translation task per
seed mode, as the files dict of a `propose_task` call) are proven tasks: `crucible run` on
local sandboxes, graded offline through the contracts and io stages (the offline Modal
runtime), gives the oracle 1.0, nop 0 and every failure case (solution/failures/*.sh run as
the solution) below 1.

The generate loop's own tests replay these replies; this pins that what they replay is sound.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.store.layout import iter_trial_results

SETTER = Path(__file__).resolve().parents[2] / "examples" / "generate" / "setter"
REPLIES = {"mine": "spectral-peaks-map", "issues": "chunked-variance-merge"}
runner = CliRunner()


def materialise(reply: dict[str, Any], dst: Path) -> Path:
    for rel, text in reply["files"].items():
        path = dst / rel
        assert path.resolve().is_relative_to(dst.resolve()), rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return dst


def reply(mode: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SETTER / f"{mode}.json").read_text())
    return data


def job(tasks: Path, jobs: Path, name: str, agent: str) -> dict[str, dict[str, Any]]:
    result = runner.invoke(app, ["run", str(tasks), "--agent", agent, "--env", "local",
                                 "--jobs-dir", str(jobs), "--job-name", name, "--max-retries", "0",
                                 "--concurrency", "2", "--json", "--quiet"])  # fmt: skip
    assert result.exit_code == 0, result.output
    return {r.task_name: r.model_dump(mode="json") for r in iter_trial_results(jobs / name)}


def test_each_reply_is_a_complete_task_with_failure_cases() -> None:
    for mode, name in REPLIES.items():
        r = reply(mode)
        assert set(r) == {"category", "files"} and r["category"] == "fan_out"
        files = r["files"]
        assert {"task.toml", "instruction.md", "environment/Dockerfile", "solution/solve.sh",
                "tests/test.sh"} <= set(files), name  # fmt: skip
        assert [f for f in files if f.startswith("solution/failures/")], name
        stages = files["task.toml"]
        assert 'kind = "contracts"' in stages and 'kind = "io"' in stages, name


@pytest.mark.slow
def test_the_replies_are_proven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRUCIBLE_JUDGE_BASE_URL", raising=False)
    tasks, failures = tmp_path / "tasks", tmp_path / "all" / "failures"
    expected_failures = []
    for mode, name in REPLIES.items():
        r = reply(mode)
        materialise(r, tasks / name)
        for rel, text in r["files"].items():
            if rel.startswith("solution/failures/"):
                case = f"{name}--{Path(rel).stem}"
                shutil.copytree(tasks / name, failures / case)
                (failures / case / "solution" / "solve.sh").write_text(text)
                expected_failures.append(case)

    # one oracle job: the references and the failure cases (each run as the solution)
    shutil.copytree(tasks, tmp_path / "all" / "tasks")
    ran = job(tmp_path / "all", tmp_path / "jobs", "oracle", "oracle")
    oracle = {n: r for n, r in ran.items() if n in REPLIES.values()}
    failed = {n: r for n, r in ran.items() if n not in oracle}
    assert sorted(oracle) == sorted(REPLIES.values())
    for name, r in oracle.items():
        v = r["verifier_result"]
        assert v["rewards"] == {"reward": 1.0, "contracts.present": 1.0, "io.pass_rate": 1.0,
                                "io.all_pass": 1.0}, (name, v["stages"])  # fmt: skip
        assert [(s["kind"], s["status"]) for s in v["stages"]] == [
            ("script", "passed"), ("contracts", "passed"), ("io", "passed")]  # fmt: skip

    nop = job(tasks, tmp_path / "jobs", "nop", "nop")
    assert {n: r["verifier_result"]["rewards"]["reward"] for n, r in nop.items()} == {
        n: 0.0 for n in REPLIES.values()
    }

    assert sorted(failed) == sorted(expected_failures) and len(failed) == 4
    for case, r in failed.items():
        v = r["verifier_result"]
        assert r["outcome"] == "graded" and v["rewards"]["reward"] < 1.0, case
        # each is caught by a host-side stage, not by a broken script
        assert any(s["kind"] in ("contracts", "io") and s["status"] == "failed"
                   for s in v["stages"]), case  # fmt: skip
