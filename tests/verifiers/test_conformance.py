"""The conformance checks of grading (verifiers/conformance.py), on local and docker
sandboxes: they grade with the real verifier, so they live on the verifier's side, and
`crucible sandboxes check` runs them with the providers' own suite."""

from __future__ import annotations

import json

import pytest
from tests.conftest import BASE_IMAGE
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.sandboxes.base import Provider
from crucible.sandboxes.conformance import CHECKS, run_conformance
from crucible.sandboxes.local.provider import LocalProvider
from crucible.verifiers.conformance import GRADING_CHECKS, suite

GRADING = {
    "stale_reward_reset_from_host",
    "grading_env_is_fresh",
    "agent_leftovers_do_not_reach_grading",
}


def test_grading_checks_are_the_verifiers_and_the_suite_has_both() -> None:
    assert set(GRADING_CHECKS) == GRADING
    assert not GRADING & set(CHECKS)  # the providers' suite grades nothing itself
    assert set(suite()) == set(CHECKS) | GRADING


async def _passes(provider: Provider, overrides: dict[str, str]) -> dict[str, str]:
    try:
        await provider.preflight()
        results = await run_conformance(provider, checks=GRADING_CHECKS, spec_overrides=overrides)
    finally:
        await provider.cleanup("conformance")
        await provider.aclose()
    assert {r.name for r in results} == GRADING
    failed = {r.name: r.detail for r in results if not r.passed}
    assert not failed
    return {r.name: r.detail for r in results}


async def test_grading_checks_pass_on_local() -> None:
    details = await _passes(LocalProvider(), {})
    assert "mode 0311" in details["stale_reward_reset_from_host"]


@pytest.mark.docker
async def test_grading_checks_pass_on_docker(docker_engine: None) -> None:
    from crucible.sandboxes.docker.provider import DockerProvider

    details = await _passes(DockerProvider(), {"image": BASE_IMAGE})
    assert "/tmp/.crucible-home-" in details["grading_env_is_fresh"]


def test_sandboxes_check_runs_the_grading_checks() -> None:
    res = CliRunner().invoke(
        app,
        ["sandboxes", "check", "--env", "local", "--only", "grading_env_is_fresh",
         "--only", "exec_result", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, (res.stdout, res.stderr)
    data = json.loads(res.stdout)
    assert [(c["name"], c["passed"]) for c in data["checks"]] == [
        ("grading_env_is_fresh", True),
        ("exec_result", True),
    ]
