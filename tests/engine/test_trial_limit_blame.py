"""`--trial-timeout` and the blame rule. Attack: an agent that would score 0 stalls until
the operator's trial limit (shorter than the task's own agent timeout) ends it, hoping for
a hang (sandbox_failed: retried, then left out of the mean). Inside the attempt's own
budgets the limit cut the attempt's time, so it counts 0; only past them is it a hang."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from crucible.engine.trial import attempt_budget_sec
from crucible.tasks.loader import load_task

REPO = Path(__file__).resolve().parents[2]


def _task(root: Path, agent_timeout: float = 120.0) -> Path:
    d = root / "stall"
    for sub in ("solution", "tests"):
        (d / sub).mkdir(parents=True)
    (d / "instruction.md").write_text("Nothing.\n")
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\nsleep 60\n")
    (d / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (d / "task.toml").write_text(
        f'schema_version = "1.1"\n[agent]\ntimeout_sec = {agent_timeout}\n'
        '[verifier]\ntimeout_sec = 30.0\n[environment]\nnetwork_mode = "no-network"\n'
    )
    return d


def test_a_stalling_agent_cut_by_the_trial_limit_counts_zero(tmp_path: Path) -> None:
    task = _task(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "crucible.cli.main", "run", str(task), "--agent", "oracle",
         "--jobs-dir", str(tmp_path / "jobs"), "--trial-timeout", "2", "--json"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    summary = json.loads(run.stdout)
    assert summary["outcomes"] == {"verifier_failed": 1} and summary["n_retries"] == 0, summary
    (trial,) = (tmp_path / "jobs").glob("*/stall__*/result.json")
    assert "while the attempt ran" in json.loads(trial.read_text())["error"]["message"]


def test_the_attempts_budget_is_its_phases_timeouts(tmp_path: Path) -> None:
    task = load_task(_task(tmp_path, agent_timeout=40.0))
    # agent timeout + its grace + verifier timeout; past it (and HANG_MARGIN_SEC) a hang
    assert attempt_budget_sec(task) == 40.0 + 5.0 + 30.0
