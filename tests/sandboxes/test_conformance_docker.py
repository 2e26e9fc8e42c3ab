"""The conformance suite on the docker provider, through the API and the CLI."""

from __future__ import annotations

import json
import os

import pytest
from tests.conftest import BASE_IMAGE
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.sandboxes.conformance import run_conformance
from crucible.sandboxes.docker.provider import DockerProvider
from crucible.verifiers.conformance import suite

pytestmark = pytest.mark.docker


async def test_whole_suite_passes_on_docker(docker_engine: None) -> None:
    provider = DockerProvider()
    try:
        await provider.preflight()
        results = await run_conformance(
            provider, spec_overrides={"image": BASE_IMAGE}, checks=suite()
        )
    finally:
        await provider.cleanup("conformance")
        await provider.aclose()
    failed = {r.name: r.detail for r in results if not r.passed}
    assert not failed
    assert {r.name for r in results} == set(suite())
    # As root on a local engine, the host's own addresses are blocked (hostblock.py).
    (addrs,) = [r.detail for r in results if r.name == "host_addresses_unreachable"]
    assert ("reached" in addrs) == (os.geteuid() != 0), addrs


def test_cli_check_on_docker(docker_engine: None) -> None:
    res = CliRunner().invoke(
        app,
        ["sandboxes", "check", "--env", "docker", "--only", "exec_result", "--json"],
    )
    assert res.exit_code == 0, (res.stdout, res.stderr)
    data = json.loads(res.stdout)
    assert data["passed"] is True and data["provider"] == "docker"


def test_cli_cleanup_on_docker(docker_engine: None) -> None:
    res = CliRunner().invoke(
        app, ["sandboxes", "cleanup", "--env", "docker", "--job", "no-such-job-xyz", "--json"]
    )
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout) == {"provider": "docker", "job": "no-such-job-xyz", "removed": 0}
