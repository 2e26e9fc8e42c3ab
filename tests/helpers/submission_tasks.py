"""Tasks for submission trials (agents/submission.py) on a real provider.

    task = submission_task(tmp_path / "t", test=EXPECTED_TEST, seed={"/app/m.py": "..."})
    r = await submit("local", task, tmp_path, {"type": "files", "files": {...}})

The seed is written by the task's healthcheck (as root, before the agent phase), so
the workdir holds files on the host userland too, where no image is copied in.
"""

from __future__ import annotations

import base64
import json
import shlex
from pathlib import Path
from typing import Any

from crucible.agents.submission import SubmissionAgent
from crucible.records.submission import SUBMISSION
from crucible.records.trial import TrialResult
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task
from tests.helpers.attack_tasks import HONEST_TEST, attack_task, attack_trial

# 1 only when the agent's file equals the test's own copy, byte for byte.
EXPECTED_TEST = (
    'if cmp -s /tests/expected "$CHECK"; then echo 1; else echo 0; fi > /logs/verifier/reward.txt'
)


def seed_command(seed: dict[str, str], links: dict[str, str] | None = None) -> str:
    """A shell command that writes `seed` (path -> text) and makes `links` (path -> target)."""
    parts = []
    for path, text in seed.items():
        b64 = base64.b64encode(text.encode()).decode()
        folder = shlex.quote(path.rsplit("/", 1)[0] or "/")
        parts.append(f"mkdir -p {folder} && printf %s {b64} | base64 -d > {shlex.quote(path)}")
    for path, target in (links or {}).items():
        parts.append(f"ln -sfn {shlex.quote(target)} {shlex.quote(path)}")
    return " && ".join(parts) or "true"


def submission_task(
    root: Path,
    *,
    test: str = HONEST_TEST,
    expected: str | None = None,
    check: str = "/app/out.txt",
    seed: dict[str, str] | None = None,
    links: dict[str, str] | None = None,
    toml: str = "",
    files: dict[str, str] | None = None,
    then: str = "",
    agent_user: str | None = None,
) -> Task:
    """A task graded by `test` (HONEST_TEST: 1 only for /app/ok), or, with `expected`, by
    EXPECTED_TEST on the file `check`. `then`: a shell command run (as root) after the
    seed is written; `agent_user`: the task's `[agent] user`. Its solution is never run."""
    extra = dict(files or {})
    if expected is not None:
        extra["tests/expected"] = expected
        test = f"CHECK={shlex.quote(check)}\n{EXPECTED_TEST}"
    if seed or links or then:
        command = json.dumps(" && ".join(c for c in (seed_command(seed or {}, links), then) if c))
        toml += f"[environment.healthcheck]\ncommand = {command}\nretries = 1\n"
    task = attack_task(root, solve="exit 1", test=test, toml=toml, files=extra)
    if agent_user is None:
        return task
    config = root / "task.toml"
    config.write_text(
        config.read_text().replace("[agent]\n", f"[agent]\nuser = {json.dumps(agent_user)}\n", 1)
    )
    return load_task(root)


async def submit(
    env: str, task: Task, tmp_path: Path, submission: dict[str, Any] | SubmissionAgent
) -> TrialResult:
    """One real trial with the submission agent."""
    agent = (
        submission
        if isinstance(submission, SubmissionAgent)
        else SubmissionAgent(SUBMISSION.validate_python(submission))
    )
    return await attack_trial(env, task, tmp_path, agent=agent)


def agent_error(r: TrialResult) -> str | None:
    err = r.agent_result.error if r.agent_result else None
    return None if err is None else err.type
