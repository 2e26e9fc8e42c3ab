"""An agent that ends its own sandbox does not trade its 0 for an excluded
sandbox_failed (DESIGN "Errors are data"): from the agent phase on, a sandbox that
its own processes ended (the keeper or the entrypoint killed, `kill -9 -1`) counts
against the attempt, on local, docker and modal (the SDK stand-in). A sandbox lost
to the infrastructure (the container removed from outside) stays sandbox_failed.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.attack_tasks import attack_task, attack_trial
from tests.helpers.wait import await_until
from tests.sandboxes.modal_standin import World
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.sandboxes.modal import provider as modal_provider

# Every way the agent (root in its sandbox) could end the sandbox from inside.
KILLS = {
    "all": "kill -9 -1",
    "pid1-then-all": "kill -9 1; kill -9 -1",
    "keeper": "for p in /proc/[0-9]*; do n=${p#/proc/}; [ $n != $$ ] && kill -9 $n; done",
}

OUTLIVE = "; sleep 5"  # timing-ok: the agent outlives its kill (the sandbox may not)


def _counted_zero(outcome: str, rewards: dict[str, float] | None) -> bool:
    """Graded 0, or verifier_failed (counted as 0 by the blame rule)."""
    if outcome == "graded":
        return rewards == {"reward": 0.0}
    return outcome == "verifier_failed"


@pytest.mark.parametrize("env", ["local", "docker"])
@pytest.mark.parametrize("kill", sorted(KILLS))
async def test_an_agent_ending_its_sandbox_counts_zero(
    env: str, kill: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if env == "docker":
        request.getfixturevalue("docker_engine")
    task = attack_task(tmp_path / "t", solve=KILLS[kill] + OUTLIVE)
    r = await attack_trial(env, task, tmp_path)
    rewards = r.verifier_result.rewards if r.verifier_result else None
    assert _counted_zero(r.outcome, rewards), (r.outcome, r.error)
    if r.outcome == "verifier_failed":
        assert r.error is not None and "ended during the attempt" in r.error.message


async def test_a_container_removed_from_outside_is_the_infrastructures(
    docker_engine: None, tmp_path: Path
) -> None:
    import docker

    client = docker.from_env()
    job_id = f"attack-removed-{secrets.token_hex(4)}"

    def ours() -> list[Any]:
        return client.containers.list(filters={"label": f"crucible.job={job_id}"})

    async def remove_when_started() -> None:
        (container,) = await await_until(ours, "the trial's container")
        await await_until(
            lambda: container.exec_run(["test", "-e", "/app/started"]).exit_code == 0,
            "the agent phase",
        )
        container.remove(force=True)

    task = attack_task(tmp_path / "t", solve="touch /app/started; sleep 60")
    remover = asyncio.ensure_future(asyncio.to_thread(asyncio.run, remove_when_started()))
    r = await attack_trial("docker", task, tmp_path, job_id=job_id)
    await remover
    assert r.outcome == "sandbox_failed", (r.outcome, r.error)


def _modal_run(jobs: Path, task: Path) -> dict[str, Any]:
    res = CliRunner().invoke(
        app,
        ["run", str(task), "--agent", "oracle", "--env", "modal", "--env-param",
         "app_name=crucible-test", "--jobs-dir", str(jobs), "--job-name", "j", "--json",
         "--max-retries", "0"],
    )  # fmt: skip
    assert res.exit_code in (0, 1), (res.stdout, res.stderr)  # 1: nothing graded
    (result,) = [json.loads(p.read_text()) for p in (jobs / "j").glob("*/result.json")]
    return result  # type: ignore[no-any-return]


@pytest.mark.parametrize("kill", sorted(KILLS))
def test_an_agent_ending_its_modal_sandbox_counts_zero(
    standin: tuple[Any, World], monkeypatch: pytest.MonkeyPatch, kill: str, tmp_path: Path
) -> None:
    monkeypatch.setattr(modal_provider, "load_sdk", lambda: standin[0])
    task = attack_task(tmp_path / "t", solve=KILLS[kill] + OUTLIVE)
    result = _modal_run(tmp_path / "jobs", task.path)
    rewards = (result.get("verifier_result") or {}).get("rewards")
    assert _counted_zero(result["outcome"], rewards), (result["outcome"], result.get("error"))
    assert any(c[0] == "Sandbox.poll" for c in standin[1].calls) or result["outcome"] == "graded"


def test_an_agent_stalling_past_its_modal_sandboxs_timeout_counts_zero(
    standin: tuple[Any, World], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Attack: with a short `--env-param timeout`, an agent that would score 0 stalls until
    Modal ends the sandbox, hoping for an error left out of the mean. It counts 0."""
    monkeypatch.setattr(modal_provider, "load_sdk", lambda: standin[0])
    task = attack_task(tmp_path / "t", solve="sleep 30")
    res = CliRunner().invoke(
        app,
        ["run", str(task.path), "--agent", "oracle", "--env", "modal", "--env-param",
         "timeout=2", "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "j", "--json"],
    )  # fmt: skip
    assert res.exit_code in (0, 1), (res.stdout, res.stderr)
    (result,) = [json.loads(p.read_text()) for p in (tmp_path / "jobs" / "j").glob("*/result.json")]
    assert result["outcome"] == "verifier_failed", (result["outcome"], result.get("error"))
    assert "reached its timeout" in result["error"]["message"] and result["retries"] == 0
