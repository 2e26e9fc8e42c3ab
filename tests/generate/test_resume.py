"""Resume after kill -9: a real `crucible generate` process killed with SIGKILL mid-proposal
continues where its state says, without asking the setter again or rerunning the proofs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from crucible.cli.main import app
from tests.generate.scripted import Solver, asked_category, propose, task_files
from tests.helpers.fake_openai import FakeOpenAI, Step
from tests.helpers.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from crucible.cli.main import main; main()", *args]


def _runs(jobs: Path) -> list[dict[str, Any]]:
    listed = CliRunner().invoke(app, ["runs", "list", "--jobs-dir", str(jobs), "--json"])
    assert listed.exit_code == 0, listed.output
    return json.loads(listed.stdout)["jobs"]  # type: ignore[no-any-return]


def _state(out: Path) -> dict[str, Any] | None:
    try:
        return json.loads((out / "state.json").read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def test_generate_resumes_after_kill_9(
    setter_server: FakeOpenAI, solver_server: FakeOpenAI, tmp_path: Path
) -> None:
    out, jobs = tmp_path / "gen", tmp_path / "jobs"
    cats = tmp_path / "cats.txt"
    cats.write_text("files\ntext\n")

    def setter(body: dict[str, Any]) -> Step:
        cat = asked_category(body) or "files"
        return propose(task_files(f"word{cat}", category=cat))

    setter_server.push(*[setter] * 4)
    release = threading.Event()
    solver = Solver({"wordfiles": [True, False], "wordtext": [False, True]})

    def held(body: dict[str, Any]) -> Step:
        release.wait(60)  # the first attempt hangs until the process is killed
        return solver(body)

    solver_server.push(held, *[solver] * 30)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("OPENAI_API_KEY", None)
    args = _cli(
        "generate", "-o", str(out), "--setter-model", "gpt-4.1-mini",
        "--setter-base-url", setter_server.url, "--solver-model", "gpt-4.1-mini",
        "--solver-base-url", solver_server.url, "--categories", str(cats),
        "--max-tasks", "2", "--max-proposals", "2", "-k", "2", "--quiet", "--jobs-dir", str(jobs),
    )  # fmt: skip
    proc = subprocess.Popen(args, env=env, cwd=tmp_path, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: solver_server.requests, "the solver's first request")
        state = _state(out)
        assert state is not None and state["proposals"][0]["phase"] == "proven", state
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    oracle = out / "proposals" / "files-000" / "jobs" / "oracle"
    proofs = sorted((d.name, (d / "result.json").read_text()) for d in oracle.glob("*/"))
    # the run reads as interrupted, and says how to continue
    (row,) = _runs(jobs)
    assert (row["kind"], row["status"], row["interrupted"]) == ("generate", "failed", True)
    assert "crucible generate -o" in row["hint"]

    done = CliRunner().invoke(app, [*args[3:], "--json"])  # the same command, in this process
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["proposed"], report["accepted"]) == (2, 2)
    assert report["coverage"] == {"files": 1, "text": 1}
    assert len(setter_server.requests) == 2  # the killed proposal was not asked again
    assert sorted((d.name, (d / "result.json").read_text()) for d in oracle.glob("*/")) == proofs
    (row,) = _runs(jobs)
    assert (row["kind"], row["status"], row["outcomes"]) == (
        "generate",
        "completed",
        {"accepted": 2},
    )
