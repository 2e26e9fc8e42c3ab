"""Harbor features crucible cannot run yet: each task loads, `tasks check` names the
feature and where it runs, and the launch refuses it as resources_unavailable before
any sandbox exists. Also: ${VAR} resolution, the per-step layout, reward.json details."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from crucible.cli import tasks as tasks_cli
from crucible.engine.launch import LaunchRefused, prepare_launch
from crucible.engine.request import RunRequest
from crucible.errors import ErrorKind, TaskInvalid, VerifierFailed
from crucible.tasks.hostvars import HostEnv
from crucible.tasks.loader import check_task, load_task
from crucible.tasks.support import feature_uses, unsupported_features
from crucible.verifiers.rewards import split_reward_json

TASKS = Path(__file__).parent / "tasks"
# The host variables env-vars reads: allowed by the operator (--task-env), else never read.
ALLOWED = ["HARBOR_FROM_HOST", "HARBOR_UNSET_VAR", "HARBOR_ANSWER"]


def host() -> HostEnv:
    return HostEnv(ALLOWED, os.environ)


# compose sidecars, and their hooks and artifacts, run on docker only
DOCKER_ONLY = {"environment/docker-compose.yaml", "verifier.collect.service / artifacts.service"}


def network_task(tmp_path: Path, toml: str) -> Path:
    """A copy of the network-default task with this task.toml; its task.toml's path."""
    root = tmp_path / "t"
    shutil.copytree(TASKS / "network-default", root)
    (root / "task.toml").write_text(toml)
    return root / "task.toml"


@pytest.fixture(autouse=True)
def _host_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARBOR_FROM_HOST", "from-the-host")
    monkeypatch.delenv("HARBOR_UNSET_VAR", raising=False)
    monkeypatch.delenv("HARBOR_ANSWER", raising=False)


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("two-step", ["steps"]),
        ("separate-verifier", ["verifier.environment_mode", "verifier.collect", "artifacts"]),
        (
            "compose",
            [
                "verifier.collect.service / artifacts.service",
                "environment/docker-compose.yaml",
                "artifacts",
            ],
        ),
        ("healthcheck", ["environment.healthcheck"]),
        ("env-vars", []),
        ("network-default", []),
        ("entrypoint", []),
    ],
)
def test_each_task_loads_and_names_what_crucible_cannot_run(name: str, fields: list[str]) -> None:
    task = load_task(TASKS / name, host())
    assert [u.feature.field for u in feature_uses(task)] == fields
    runs = {
        "artifacts",
        "verifier.environment_mode",
        "verifier.collect",
        "environment.healthcheck",
        "steps",
    }
    refused = [f for f in fields if f not in runs]
    for provider in ("local", "docker", "modal"):
        want = [f for f in refused if provider != "docker" or f not in DOCKER_ONLY]
        assert [m.split(":")[0] for m in unsupported_features(task, provider)] == want


def test_per_phase_network_and_allowlist(tmp_path: Path) -> None:
    toml = network_task(
        tmp_path,
        '[environment]\nnetwork_mode = "public"\n[verifier]\nnetwork_mode = "no-network"\n',
    )
    root = toml.parent
    task = load_task(root)
    assert unsupported_features(task, "docker") == [
        "agent.network_mode / verifier.network_mode: a per-phase network policy that differs "
        "from the environment's is not supported yet"
    ]
    # Restating the environment's policy is no per-phase policy at all.
    toml.write_text('[environment]\nnetwork_mode = "public"\n[agent]\nnetwork_mode = "public"\n')
    assert unsupported_features(load_task(root), "docker") == []
    # An allowlist runs where a provider enforces one; the others refuse it themselves.
    toml.write_text("[environment]\nallowed_hosts = ['example.org']\n")
    (use,) = feature_uses(load_task(root), "docker")
    assert not use.supported and "supported on: modal" in use.describe()
    assert feature_uses(load_task(root), "modal")[0].supported


def test_env_tables_resolve_from_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARBOR_ANSWER", "7")
    cfg = load_task(TASKS / "env-vars", host()).config
    assert cfg.environment.env == {
        "FROM_HOST": "from-the-host",
        "WITH_DEFAULT": "fallback",
        "LITERAL": "plain ${not a template",
    }
    assert cfg.verifier.env == {"EXPECTED": "from-the-host"}
    assert cfg.solution.env == {"ANSWER": "7"}


def test_an_unset_variable_without_default_is_task_invalid_and_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HARBOR_FROM_HOST")
    check = check_task(TASKS / "env-vars", host())
    lines = sorted((p.line, p.message.split(" = ")[0]) for p in check.errors)
    assert lines == [(3, "environment.env.FROM_HOST"), (6, "verifier.env.EXPECTED")]
    assert all("'HARBOR_FROM_HOST'" in p.message for p in check.errors)
    with pytest.raises(TaskInvalid) as err:
        load_task(TASKS / "env-vars", host())
    assert err.value.kind == ErrorKind.task_invalid


def test_the_per_step_layout_is_checked(tmp_path: Path) -> None:
    root = tmp_path / "two-step"
    shutil.copytree(TASKS / "two-step", root)
    check = check_task(root)
    # No top-level instruction.md or tests/ asked for, and steps run (on local and docker).
    assert check.valid and check.problems == []
    assert [u.describe() for u in feature_uses(load_task(root))] == [
        "steps: multi-step tasks ([[steps]]: one sandbox, each step graded in it): "
        "supported on: local, docker, modal"
    ]
    (root / "steps" / "append" / "instruction.md").unlink()
    (root / "tests" / "test.sh").unlink()  # step 'append' used the shared one
    shutil.rmtree(root / "steps" / "write" / "solution")
    problems = {(p.severity, p.message) for p in check_task(root).problems}
    problems = {p for p in problems if not p[1].startswith("steps:")}
    assert problems == {
        ("error", "step 'append': instruction.md is missing"),
        (
            "error",
            "step 'append': neither steps/append/tests/test.sh nor tests/test.sh: "
            "the verifier has nothing to run",
        ),
        (
            "warning",
            "step 'write': solution/solve.sh is missing: the oracle agent cannot run this step",
        ),
    }


def test_step_names_are_portable_and_unique(tmp_path: Path) -> None:
    root = tmp_path / "t"
    shutil.copytree(TASKS / "two-step", root)
    toml = root / "task.toml"
    text = toml.read_text()
    toml.write_text(text.replace('name = "append"', 'name = "WRITE"'))
    assert any("used twice" in p.message for p in check_task(root).errors)
    toml.write_text(text.replace('name = "append"', 'name = "../up"'))
    assert any("invalid step name" in p.message for p in check_task(root).errors)


def test_tasks_check_prints_support_per_field() -> None:
    app = typer.Typer()
    tasks_cli.register(app)
    app.callback()(lambda: None)
    runner = CliRunner()
    allow = [a for name in ALLOWED for a in ("--task-env", name)]
    out = runner.invoke(app, ["tasks", "check", *allow, str(TASKS)], terminal_width=400)
    assert out.exit_code == 0, out.output  # valid Harbor tasks, all of them
    text = out.output
    assert (
        "verifier.collect: collect hooks ([[verifier.collect]]) in the main service: "
        "supported on: local, docker, modal" in text
    )
    assert (
        "steps: multi-step tasks ([[steps]]: one sandbox, each step graded in it): "
        "supported on: local, docker, modal" in text
    )
    as_json = json.loads(
        runner.invoke(app, ["tasks", "check", "--json", str(TASKS / "compose")]).output
    )
    features = {f["field"]: f for f in as_json["tasks"][0]["features"]}
    feature = features["environment/docker-compose.yaml"]
    assert feature["effect"] == "refused" and feature["supported_on"] == ["docker"]
    assert (
        "environment/docker-compose.yaml: multi-container environments (compose sidecars on "
        "a private network of the trial): supported on: docker" in text
    )


async def test_the_launch_refuses_them_before_anything_is_made(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    seen: list[Path] = []

    def on_invalid(path: Path, problems: list[object]) -> None:
        seen.append(path)

    req = RunRequest(
        paths=[TASKS],
        env="simulated",
        agent="oracle",
        jobs_dir=jobs,
        job_name="j",
        task_env=ALLOWED,
    )
    with pytest.raises(LaunchRefused) as refused:
        await prepare_launch(req, on_invalid=on_invalid)
    assert refused.value.error == "resources_unavailable"
    assert "2 task(s) use Harbor features" in refused.value.message
    assert sorted(p.name for p in seen) == ["all-fields", "compose"]
    assert not jobs.exists()
    # --skip-invalid runs the rest, and the refused tasks are not in the job.
    plan = await prepare_launch(req.model_copy(update={"skip_invalid": True}))
    try:
        assert sorted(t.name for t in plan.tasks) == [
            "entrypoint",
            "env-vars",
            "healthcheck",
            "network-default",
            "separate-verifier",
            "two-step",
        ]
    finally:
        await plan.provider.aclose()


def test_reward_json_numbers_are_rewards_and_the_rest_details() -> None:
    text = '{"reward": 1, "partial": 0.25, "label": "hard", "passed": true, "why": null}'
    assert split_reward_json(text) == (
        {"reward": 1.0, "partial": 0.25},
        {"label": "hard", "passed": True, "why": None},
    )
    for bad, why in [
        ('{"label": "no number"}', "no number"),
        ("{}", "empty object"),
        ('{"reward": NaN, "x": "y"}', "not finite"),
        ("[1]", "flat object"),
        ("nope", "not valid JSON"),
    ]:
        with pytest.raises(VerifierFailed, match=why):
            split_reward_json(bad)


def test_allowed_hosts_take_harbors_forms(tmp_path: Path) -> None:
    toml = network_task(
        tmp_path,
        "[environment]\nallowed_hosts = ['Example.org.', '*.example.net', '10.0.0.0/8', "
        "'2001:DB8::1', '192.0.2.7']\n[verifier]\nallowed_hosts = ['example.org']\n",
    )
    root = toml.parent
    cfg = load_task(root).config
    assert cfg.environment.allowed_hosts == [
        "example.org",
        "*.example.net",
        "10.0.0.0/8",
        "2001:db8::1",
        "192.0.2.7",
    ]
    assert cfg.verifier.network_mode == "allowlist"  # allowed_hosts alone implies it
    for bad in ("https://example.org", "example.org:443", "ex*.org", "10.0.0.1/8"):
        toml.write_text(f"[environment]\nallowed_hosts = [{bad!r}]\n")
        (error,) = check_task(root).errors
        assert "not URLs, ports or paths" in error.message and error.line == 2, bad


def test_no_network_comes_from_the_cli_or_a_config_file() -> None:
    def request(cli: dict[str, object], config: dict[str, object]) -> RunRequest:
        return RunRequest.from_sources(cli, config, env_params={}, agent_kwargs={})

    assert request({}, {}).no_network is None  # off, or as a resumed job recorded it
    assert request({"no_network": True}, {}).no_network is True
    assert request({}, {"no-network": True}).no_network is True


def test_os_is_linux_or_windows_as_in_harbor(tmp_path: Path) -> None:
    toml = network_task(tmp_path, "[environment]\nos = 'Windows'\n")
    assert load_task(toml.parent).config.environment.os == "windows"  # case-insensitive
    toml.write_text("[environment]\nos = 'macos'\n")
    (error,) = check_task(toml.parent).errors
    assert error.line == 2 and "'linux' or 'windows'" in error.message
