"""The in-sandbox stage: tests/test.sh under Harbor's semantics.

Order matters for trust: every agent process is killed, stale reward files
are removed, and only then are the tests copied in, so nothing the agent left
behind can see, alter or pre-empt grading.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crucible.errors import VerifierFailed
from crucible.sandboxes.base import ExecResult, Sandbox
from crucible.verifiers.rewards import (
    REWARD_DIR,
    REWARD_JSON,
    REWARD_TXT,
    parse_reward_json,
    parse_reward_txt,
)

TESTS_DIR = "/tests"


async def prepare_verifier(sandbox: Sandbox, tests_dir: Path) -> None:
    """End the agent phase: kill its processes, clear rewards, then copy tests in."""
    await sandbox.kill_all()
    res = await sandbox.exec(
        f"rm -rf {TESTS_DIR} {REWARD_DIR} && mkdir -p {REWARD_DIR} {TESTS_DIR}", timeout=60
    )
    if not res.ok:
        raise VerifierFailed(f"could not reset {REWARD_DIR}: {res.stderr.strip()[:500]}")
    await sandbox.upload_dir(tests_dir, TESTS_DIR)


@dataclass
class ScriptOutcome:
    rewards: dict[str, float]
    exec_result: ExecResult


async def run_test_script(
    sandbox: Sandbox,
    *,
    timeout_sec: float,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> ExecResult:
    return await sandbox.exec(
        f"bash {TESTS_DIR}/test.sh",
        timeout=timeout_sec,
        env=env,
        cwd=cwd,
    )


async def read_rewards(sandbox: Sandbox) -> dict[str, float]:
    """reward.json if present (it wins), else reward.txt; VerifierFailed if neither."""
    try:
        return parse_reward_json((await sandbox.read_file(REWARD_JSON)).decode("utf-8", "replace"))
    except FileNotFoundError:
        pass
    try:
        return parse_reward_txt((await sandbox.read_file(REWARD_TXT)).decode("utf-8", "replace"))
    except FileNotFoundError:
        raise VerifierFailed(
            f"the verifier wrote no reward ({REWARD_JSON} or {REWARD_TXT})"
        ) from None
