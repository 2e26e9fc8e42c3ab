"""Attack tests: a hostile task's `${VAR}` fishing for the host's secrets (tasks/hostvars.py).

The task folder is the attacker's: its env tables and compose file name crucible's own
credentials while they are set on the host (monkeypatched). Only the names the operator
allows (--task-env) are ever read, credentials never; real local runs show that nothing
of a secret reaches the sandbox, the tests or the job folder, and that an allowed plain
variable still works end to end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.engine.launch import LaunchRefused, prepare_launch
from crucible.engine.request import RunRequest
from crucible.store.layout import iter_trial_results, read_job_config
from crucible.tasks.compose import compose_variables, load_compose
from crucible.tasks.loader import check_task

SECRETS = {
    "OPENAI_API_KEY": "sk-host-openai-7f3a",
    "CRUCIBLE_JUDGE_API_KEY": "sk-host-judge-91c2",
    "MODAL_TOKEN_SECRET": "as-host-modal-55d0",
}
runner = CliRunner()


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


def task(root: Path, env_tables: str, solve: str = "", test: str = "") -> Path:
    """A local task: solve.sh and test.sh dump their whole environment where it is kept."""
    root.mkdir(parents=True)
    (root / "task.toml").write_text(
        'schema_version = "1.1"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n'
        '[environment]\nnetwork_mode = "no-network"\n' + env_tables
    )
    (root / "instruction.md").write_text("Make /app/ok.\n")
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text(
        "#!/bin/bash\nenv > /logs/agent/env.txt\n" + (solve or "touch /app/ok\n")
    )
    (root / "tests").mkdir()
    # The test writes its env into the reward's details: they land in result.json.
    (root / "tests" / "test.sh").write_text(
        "#!/bin/bash\nenv | sort > /logs/verifier/env.txt\n"
        + (
            test
            or 'python3 -c \'import json,os; json.dump({"reward": 1.0 if os.path.exists("/app/ok")'
            ' else 0.0, "env": dict(os.environ)}, open("/logs/verifier/reward.json","w"))\'\n'
        )
    )
    return root


def assert_nowhere(folder: Path) -> None:
    for f in folder.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            for value in SECRETS.values():
                assert value.encode() not in data, f"{value} in {f}"


async def run(req: RunRequest) -> list[object]:
    plan = await prepare_launch(req)
    try:
        await plan.runner().run()
    finally:
        await plan.provider.aclose()
    assert req.jobs_dir is not None and req.job_name is not None
    return [(r.outcome, r.reward) for r in iter_trial_results(req.jobs_dir / req.job_name)]


HOSTILE = (
    'env = { K = "${OPENAI_API_KEY}" }\n'
    '[verifier.env]\nJ = "${CRUCIBLE_JUDGE_API_KEY}"\n'
    '[solution.env]\nM = "${MODAL_TOKEN_SECRET}"\n'
)


async def test_a_task_naming_host_credentials_is_invalid_naming_each_and_its_line(
    tmp_path: Path,
) -> None:
    root = task(tmp_path / "fish", HOSTILE)
    check = check_task(root)
    found = sorted((p.line, p.message.split(" = ")[0]) for p in check.errors)
    assert found == [(8, "environment.env.K"), (10, "verifier.env.J"), (12, "solution.env.M")]
    for p, name in zip(sorted(check.errors, key=lambda p: p.line or 0), SECRETS, strict=True):
        assert p.path == root / "task.toml"
        assert f"{name!r}, which looks like a credential" in p.message
    # Allowing it changes nothing: crucible's credentials are never resolvable.
    from crucible.tasks.hostvars import HostEnv, HostEnvRefused

    with pytest.raises(HostEnvRefused, match="looks like a credential"):
        HostEnv(["OPENAI_API_KEY"], os.environ)
    # The launch refuses the task before anything is made: no job folder at all.
    req = RunRequest(paths=[root], env="local", agent="oracle", jobs_dir=tmp_path / "jobs")
    with pytest.raises(LaunchRefused) as refused:
        await prepare_launch(req.model_copy(update={"job_name": "j"}))
    assert refused.value.error == "task_invalid" and not (tmp_path / "jobs" / "j").exists()


@pytest.mark.parametrize(
    "name", ["GITHUB_PAT", "OPENAI_APIKEY", "SENTRY_DSN", "REDIS_PASS", "DATABASE_URL", "DB_PWD"]
)
def test_credentials_spelled_otherwise_cannot_be_allowed(name: str) -> None:
    # Attack: the operator is talked into `--task-env NAME` for a credential that the
    # patterns missed (each of these was allowed, and its value handed to the task).
    from crucible.tasks.hostvars import HostEnv, HostEnvRefused

    with pytest.raises(HostEnvRefused, match="looks like a credential"):
        HostEnv([name], {name: "secret"})


async def test_with_defaults_the_host_is_never_read_and_no_secret_reaches_the_job(
    tmp_path: Path,
) -> None:
    """`${OPENAI_API_KEY:-none}` takes the default: in a real local run, neither the
    agent's env, the tests' env, reward details, result.json nor any job file holds a
    secret; the trial is graded with the defaults."""
    tables = (
        'env = { K = "${OPENAI_API_KEY:-none}" }\n'
        '[verifier.env]\nJ = "${CRUCIBLE_JUDGE_API_KEY:-none}"\n'
        '[solution.env]\nM = "${MODAL_TOKEN_SECRET:-none}"\n'
    )
    fish = task(tmp_path / "tasks" / "fish", tables)
    jobs = tmp_path / "jobs"
    req = RunRequest(paths=[fish.parent], env="local", agent="oracle", jobs_dir=jobs, job_name="j")
    assert await run(req) == [("graded", 1.0)]
    assert_nowhere(jobs)
    (result,) = iter_trial_results(jobs / "j")
    assert result.verifier_result is not None
    details = (jobs / "j" / result.trial_name / "result.json").read_text()
    assert '"J": "none"' in details and '"K": "none"' in details  # the defaults
    assert (
        "M=none"
        in (jobs / "j" / result.trial_name / "sandbox" / "logs" / "agent" / "env.txt").read_text()
    )


async def test_an_allowed_plain_variable_reaches_agent_and_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASK_GREETING", "hello-from-the-host")
    root = task(
        tmp_path / "greet",
        'env = { G = "${TASK_GREETING}" }\n[verifier.env]\nEXPECTED = "${TASK_GREETING}"\n',
        solve='echo "$G" > /app/out\n',
        test='[ "$(cat /app/out)" = "$EXPECTED" ] && [ -n "$EXPECTED" ] && r=1 || r=0\n'
        "echo $r > /logs/verifier/reward.txt\n",
    )
    jobs = tmp_path / "jobs"
    base = RunRequest(paths=[root], env="local", agent="oracle", jobs_dir=jobs)
    # Not allowed: the host is not read, the task cannot run.
    with pytest.raises(LaunchRefused) as refused:
        await prepare_launch(base.model_copy(update={"job_name": "no"}))
    assert refused.value.error == "task_invalid"
    allowed = base.model_copy(update={"job_name": "yes", "task_env": ["TASK_GREETING"]})
    assert await run(allowed) == [("graded", 1.0)]
    # job.json names what was allowed, never a value.
    cfg = read_job_config(jobs / "yes")
    assert cfg.task_env == ["TASK_GREETING"]
    assert "hello-from-the-host" not in (jobs / "yes" / "job.json").read_text()
    # A resume keeps the allow-list; another one is refused.
    with pytest.raises(LaunchRefused, match="task_env"):
        await prepare_launch(RunRequest(resume="yes", jobs_dir=jobs, task_env=["OTHER"]))


def test_the_cli_refuses_to_allow_a_credential(tmp_path: Path) -> None:
    root = task(tmp_path / "t", "")
    names = tmp_path / "names.txt"
    names.write_text("# what the tasks may read\nTASK_MODE\nMODAL_TOKEN_SECRET  # no\n")
    for args in (
        ["run", str(root), "--task-env", "OPENAI_API_KEY"],
        ["run", str(root), "--task-env-file", str(names)],
        ["tasks", "check", str(root), "--task-env", "CRUCIBLE_JUDGE_API_KEY"],
    ):
        out = runner.invoke(app, [*args, "--json"])
        assert out.exit_code == 2, out.output
        error = json.loads(out.stderr)
        assert error["error"] == "usage" and "looks like a credential" in error["message"]
    names.write_text("TASK_MODE=secret-value\n")  # values never come from a file
    out = runner.invoke(app, ["tasks", "check", str(root), "--task-env-file", str(names)])
    assert out.exit_code == 2 and "not a variable name" in out.stderr


def test_tasks_check_lists_the_host_variables_each_task_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASK_MODE", "fast")
    root = task(
        tmp_path / "t",
        'env = { MODE = "${TASK_MODE}", K = "${OPENAI_API_KEY:-none}", L = "${TASK_LEVEL:-3}" }\n',
    )
    out = runner.invoke(app, ["tasks", "check", str(root), "--task-env", "TASK_MODE", "--json"])
    assert out.exit_code == 0, out.output
    (entry,) = json.loads(out.stdout)["tasks"]
    reads = {r["name"]: (r["outcome"], r["line"], r["where"]) for r in entry["host_env"]}
    assert reads == {
        "TASK_MODE": ("host", 8, "environment.env.MODE"),
        "OPENAI_API_KEY": ("default", 8, "environment.env.K"),
        "TASK_LEVEL": ("default", 8, "environment.env.L"),
    }
    assert "fast" not in out.stdout and SECRETS["OPENAI_API_KEY"] not in out.stdout
    # The task's identity is its files: the host's values do not change its digest.
    monkeypatch.setenv("TASK_MODE", "slow")
    again = runner.invoke(app, ["tasks", "check", str(root), "--task-env", "TASK_MODE", "--json"])
    assert json.loads(again.stdout)["tasks"][0]["digest"] == entry["digest"] is not None
    text = runner.invoke(
        app, ["tasks", "check", str(root), "--task-env", "TASK_MODE"], terminal_width=300
    ).output
    assert "host env TASK_MODE: allowed, from the host (task.toml:8" in text
    assert "host env OPENAI_API_KEY: the task's default (the host is not read)" in text


def test_a_compose_file_reads_only_allowed_host_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crucible.tasks.hostvars import HostEnv

    env = tmp_path / "environment"
    env.mkdir()
    path = env / "docker-compose.yaml"
    variables = compose_variables({}, env_dir=env, cpus=1, memory_mb=512, image=None)
    path.write_text(
        "services:\n  db:\n    image: debian:bookworm-slim\n"
        '    environment: [OPENAI_API_KEY, "J=${CRUCIBLE_JUDGE_API_KEY:-none}"]\n'
    )
    scope = HostEnv([], os.environ).scope()
    db = load_compose(path, variables, host=scope).sidecars["db"]
    assert db.environment == {"J": "none"}  # the bare name is left out, not inherited
    assert [(r.name, r.outcome, r.line) for r in scope.reads] == [
        ("CRUCIBLE_JUDGE_API_KEY", "default", 4),
        ("OPENAI_API_KEY", "default", 4),
    ]
    path.write_text(
        "services:\n  db:\n    image: debian:bookworm-slim\n    command: ${MODAL_TOKEN_SECRET}\n"
    )
    # A credential is never read: Compose's empty string stands in for it, with a warning.
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "must-never-be-read")
    scope = HostEnv([], os.environ).scope()
    db = load_compose(path, variables, host=scope).sidecars["db"]
    assert db.command == ""
    assert [(r.name, r.outcome, r.empty) for r in scope.reads] == [
        ("MODAL_TOKEN_SECRET", "credential", True)
    ]
    assert "it names the host variable 'MODAL_TOKEN_SECRET'" in scope.why_not("MODAL_TOKEN_SECRET")
    path.write_text("services:\n  db:\n    image: ${TASK_IMAGE:?needed}\n")
    with pytest.raises(Exception, match="which this run does not allow"):
        load_compose(path, variables, host=HostEnv().scope())


def test_what_a_compose_file_reads_goes_with_the_task_and_no_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The docker provider reads the compose file again from task.host_env: the allowed
    values the task read (its env tables and its compose file), never the rest."""
    from crucible.tasks.hostvars import HostEnv

    monkeypatch.setenv("TASK_IMAGE", "debian:host-chosen")
    monkeypatch.setenv("TASK_UNUSED", "x")
    root = task(tmp_path / "c", 'docker_image = "debian:bookworm-slim"\n')
    (root / "environment").mkdir()
    (root / "environment" / "docker-compose.yaml").write_text(
        "services:\n  db:\n    image: ${TASK_IMAGE}\n    command: ${OPENAI_API_KEY:-x}\n"
    )
    check = check_task(root, HostEnv(["TASK_IMAGE", "TASK_UNUSED"], os.environ))
    assert check.valid and check.task is not None
    assert check.task.host_env == {"TASK_IMAGE": "debian:host-chosen"}
    assert "host-chosen" not in repr(check.task)  # nor in logs of it
