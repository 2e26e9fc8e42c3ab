"""Attack trials: the oracle "agent" runs an attack as solve.sh against an honest
tests/test.sh, on a real provider (local bubblewrap, or docker with the base image).

    task = attack_task(tmp_path / "t", solve="...attack...", test=HONEST_TEST)
    r = await attack_trial("local", task, tmp_path)
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from crucible.agents.base import Agent
from crucible.agents.oracle import OracleAgent
from crucible.engine.spec import TrialPlan
from crucible.engine.trial import run_trial
from crucible.records.trial import TrialResult
from crucible.sandboxes.base import Provider
from crucible.tasks.loader import load_task
from crucible.tasks.models import Task

BASE_IMAGE = "debian:bookworm-slim"

# The honest verifier most attacks face: 1 only when the agent made /app/ok.
HONEST_TEST = (
    "if [ -f /app/ok ]; then echo 1 > /logs/verifier/reward.txt; "
    "else echo 0 > /logs/verifier/reward.txt; fi"
)


def attack_task(
    root: Path,
    *,
    solve: str,
    test: str = HONEST_TEST,
    toml: str = "",
    files: dict[str, str] | None = None,
    agent_timeout: float = 60,
    verifier_timeout: float = 60,
) -> Task:
    """A task whose solution is the attack. `files`: extra files (tests/x.py, ...)."""
    root.mkdir(parents=True)
    (root / "task.toml").write_text(
        f'schema_version = "1.1"\n[agent]\ntimeout_sec = {agent_timeout}\n[verifier]\ntimeout_sec = {verifier_timeout}\n'
        f'[environment]\ndocker_image = "{BASE_IMAGE}"\nnetwork_mode = "no-network"\n' + toml
    )
    (root / "instruction.md").write_text("Make /app/ok.\n")
    for sub, name, body in (("tests", "test.sh", test), ("solution", "solve.sh", solve)):
        (root / sub).mkdir()
        (root / sub / name).write_text("#!/usr/bin/env bash\n" + body + "\n")
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return load_task(root)


@asynccontextmanager
async def provider_for(env: str, job_id: str) -> AsyncIterator[Provider]:
    if env == "docker":
        from crucible.sandboxes.docker.provider import DockerProvider

        provider: Provider = DockerProvider()
    else:
        from crucible.sandboxes.local.provider import LocalProvider

        # The attacks here aim at the host-userland mode's layout (the base image has no
        # python3); image mode's own attacks are in tests/sandboxes/test_local_images.py.
        provider = LocalProvider(userland="host")
    await provider.preflight()
    try:
        yield provider
    finally:
        await provider.cleanup(job_id)
        await provider.aclose()


async def attack_trial(
    env: str,
    task: Task,
    tmp_path: Path,
    agent: Agent | None = None,
    attempt: int = 0,
    job_id: str | None = None,
) -> TrialResult:
    # Unique per call: a name shared with another run (tmp_path's own name is "0" or "1"
    # in several tests) would let that run's leftover sweep remove this one's sandboxes.
    job_id = job_id or f"attack-{tmp_path.name[:40]}-{secrets.token_hex(4)}"
    async with provider_for(env, job_id) as provider:
        return await run_trial(
            TrialPlan(task=task, attempt=attempt, job_id=job_id),
            provider=provider,
            agent=agent or OracleAgent(),
            job_dir=tmp_path / "job",
        )
