"""Multi-step tasks as Harbor 0.25 runs them, on real local and docker sandboxes.

- A step is graded with the task's tests/ AND its own steps/NAME/tests/, copied one over
  the other into /tests (the task's first, so a name in both is the step's): Harbor's
  src/harbor/verifier/verifier.py (`Verifier._resolve_tests`, then one upload_dir per
  folder in that order). The official multi-step recipe's step tests load a helper that
  only the top-level tests/ holds.
- Each step's /logs/artifacts is kept in the step's own folder, as Harbor keeps them in
  steps/NAME/artifacts/ (src/harbor/trial/multi_step.py, `_archive_step_outputs`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.engine.test_steps import ENVS, env
from tests.helpers.attack_tasks import attack_trial

from crucible.agents.nop import NopAgent
from crucible.engine.steps import step_task
from crucible.records.trial import TrialResult
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task

__all__ = ["env"]  # the fixture, shared with test_steps.py


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def shared_tests_task(root: Path) -> Task:
    """Two steps whose test.sh each source /tests/lib.sh, which only the task's tests/
    holds; the task's tests/ and step `second`'s both hold want.txt (the step's wins)."""
    _write(
        root / "task.toml",
        'schema_version = "1.4"\nmulti_step_reward_strategy = "mean"\n'
        '[environment]\ndocker_image = "debian:bookworm-slim"\nnetwork_mode = "no-network"\n'
        "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n"
        '[[steps]]\nname = "first"\nmin_reward = 1.0\n[[steps]]\nname = "second"\n',
    )
    _write(root / "environment" / "Dockerfile", "FROM debian:bookworm-slim\nWORKDIR /app\n")
    _write(
        root / "tests" / "lib.sh",
        'score() { if [ "$(cat "$1" 2>/dev/null)" = "$(cat /tests/want.txt)" ]; '
        "then echo 1; else echo 0; fi > /logs/verifier/reward.txt; }\n",
    )
    _write(root / "tests" / "want.txt", "alpha\n")
    for name, word in (("first", "alpha"), ("second", "beta")):
        step = root / "steps" / name
        _write(step / "instruction.md", f"Write {word} to /app/{name}.txt.\n")
        _write(
            step / "solution" / "solve.sh",
            f"#!/usr/bin/env bash\nmkdir -p /logs/artifacts\necho {word} > /app/{name}.txt\n"
            f"echo {name} > /logs/artifacts/{name}.log\n",
        )
        _write(
            step / "tests" / "test.sh",
            f"#!/usr/bin/env bash\n. /tests/lib.sh\nscore /app/{name}.txt\n",
        )
    _write(root / "steps" / "second" / "tests" / "want.txt", "beta\n")
    return load_task(root)


def rewards(r: TrialResult) -> list[tuple[str, float | None]]:
    return [
        (s.name, (s.verifier_result.rewards or {}).get("reward") if s.verifier_result else None)
        for s in r.steps or []
    ]


def test_a_step_copies_the_tasks_tests_then_its_own(tmp_path: Path) -> None:
    task = shared_tests_task(tmp_path / "t")
    first, second = (step_task(task, s) for s in task.steps)
    assert first.tests_dirs == [task.path / "tests", task.step_dir("first") / "tests"]
    assert second.tests_dirs[-1] == task.step_dir("second") / "tests"  # last: it wins
    assert task.tests_dirs == [task.path / "tests"]


@pytest.mark.parametrize("env", ENVS, indirect=True)
async def test_step_tests_load_a_helper_from_the_tasks_tests(env: str, tmp_path: Path) -> None:
    # Before: each step got only its own tests/, `. /tests/lib.sh` failed, no reward was
    # written, and step 1 ended verifier_failed. Harbor gives 1.0 (oracle) / 0.0 (nop).
    task = shared_tests_task(tmp_path / "t")
    r = await attack_trial(env, task, tmp_path)
    assert r.outcome == "graded", r.error
    # Step second's want.txt ("beta") stood over the task's ("alpha"): else it scores 0.
    assert rewards(r) == [("first", 1.0), ("second", 1.0)] and r.reward == 1.0
    trial = tmp_path / "job" / r.trial_name
    # Each step's /logs/artifacts in its own folder, with only what that step wrote.
    for name in ("first", "second"):
        got = trial / "steps" / name / "sandbox" / "logs" / "artifacts"
        assert sorted(p.name for p in got.iterdir()) == [f"{name}.log"], name

    nop = await attack_trial(env, shared_tests_task(tmp_path / "n"), tmp_path / "n", NopAgent())
    assert nop.outcome == "graded", nop.error
    assert rewards(nop) == [("first", 0.0)] and nop.reward == 0.0
