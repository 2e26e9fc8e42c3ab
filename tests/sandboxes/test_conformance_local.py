"""The conformance suite on the local provider, through the API and the CLI."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.errors import ExitCode
from crucible.sandboxes.conformance import run_conformance
from crucible.sandboxes.local.provider import LocalProvider
from crucible.verifiers.conformance import suite

REQUIRED = {
    "exec_result",
    "stdin",
    "env_and_cwd",
    "timeout_kills_tree",
    "memory_limit",
    "fork_bomb",
    "pids_limit",
    "output_cap",
    "network_blocked",
    "host_loopback_unreachable",
    "host_addresses_unreachable",
    "writes_outside_fail",
    "etc_files_private",
    "host_env_invisible",
    "host_home_invisible",
    "tests_absent_in_agent_phase",
    "agent_leftovers_do_not_reach_grading",
    "stale_reward_reset_from_host",
    "grading_env_is_fresh",
    "reset_dir_and_alive",
    "background_process_persists",
    "upload_download_roundtrip",
    "unicode_and_binary",
    "build_steps_isolated",
}


async def test_whole_suite_passes_on_local() -> None:
    assert set(suite()) >= REQUIRED
    provider = LocalProvider()
    await provider.preflight()
    results = await run_conformance(provider, checks=suite())
    failed = {r.name: r.detail for r in results if not r.passed}
    assert not failed
    assert {r.name for r in results} == set(suite())


def test_cli_check_json() -> None:
    res = CliRunner().invoke(
        app,
        [
            "sandboxes",
            "check",
            "--env",
            "local",
            "--only",
            "exec_result",
            "--only",
            "output_cap",
            "--json",
        ],
    )
    assert res.exit_code == 0, (res.stdout, res.stderr)
    data = json.loads(res.stdout)
    assert data["passed"] is True
    assert [c["name"] for c in data["checks"]] == ["exec_result", "output_cap"]
    assert all(c["passed"] and "duration_sec" in c for c in data["checks"])


def test_cli_check_unknown_name_is_usage_error() -> None:
    res = CliRunner().invoke(app, ["sandboxes", "check", "--only", "no_such_check", "--json"])
    assert res.exit_code == ExitCode.USAGE
    assert json.loads(res.stderr)["error"] == "usage"


def test_cli_cleanup_json() -> None:
    res = CliRunner().invoke(
        app, ["sandboxes", "cleanup", "--env", "local", "--job", "no-such-job-xyz", "--json"]
    )
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout) == {"provider": "local", "job": "no-such-job-xyz", "removed": 0}


def test_whole_suite_passes_in_image_mode_through_the_cli(buildah: None) -> None:
    """`crucible sandboxes check --env local --env-param userland=image`: every check on
    sandboxes that run on the base image, with a private writable layer."""
    res = CliRunner().invoke(
        app, ["sandboxes", "check", "--env", "local", "--env-param", "userland=image", "--json"]
    )
    assert res.exit_code == 0, (res.stdout, res.stderr)
    data = json.loads(res.stdout)
    assert data["passed"] is True and {c["name"] for c in data["checks"]} == set(suite())
    checks = {c["name"]: c["detail"] for c in data["checks"]}
    assert "10.0.2.2" in checks["host_loopback_unreachable"]  # the gateway was probed too
    # System paths are the image's, writable in the trial's own layer only.
    (writes,) = [c for c in data["checks"] if c["name"] == "writes_outside_fail"]
    assert "private to the sandbox" in writes["detail"]
    # Its own /etc/hosts, /etc/hostname and /etc/resolv.conf, writable as on docker.
    (etc,) = [c for c in data["checks"] if c["name"] == "etc_files_private"]
    assert "/etc/hosts: writable, its own; /etc/hostname: writable, its own" in etc["detail"]
