"""Attack tests: a hostile task folder whose files are links to the host (tasks/taskfs.py).

Each task is built in the test around a host file holding a secret. crucible reads no
task file through a link (in or out of the folder), copies no linked folder into a
sandbox, and sends no build context holding a link out of it: each is task_invalid
naming the link, before any sandbox or build, and the secret appears nowhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from task_factory import MakeTask
from tests.helpers.fake_openai import FakeOpenAI, fake_openai
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.errors import TaskInvalid
from crucible.tasks.compose import compose_variables, load_compose
from crucible.tasks.loader import check_task

__all__ = ["fake_openai"]  # the fixture, used below

SECRET = "host-secret-4b1d9e"
STEPS_TOML = """\
schema_version = "1.1"
[environment]
network_mode = "no-network"
[[steps]]
name = "one"
"""
runner = CliRunner()


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A host file outside every task folder (think /etc/shadow, ~/.netrc)."""
    host = tmp_path / "host"
    (host / "dir").mkdir(parents=True)
    (host / "shadow").write_text(f"root:{SECRET}:19000::::::\n")
    (host / "dir" / "id_rsa").write_text(SECRET)
    return host / "shadow"


def errors(root: Path) -> list[tuple[Path, str]]:
    check = check_task(root)
    assert not check.valid
    for p in check.problems:
        assert SECRET not in p.message
    return [(p.path, p.message) for p in check.errors]


def link(at: Path, target: Path | str) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    if at.exists() or at.is_symlink():
        if at.is_dir() and not at.is_symlink():
            import shutil

            shutil.rmtree(at)
        else:
            at.unlink()
    at.symlink_to(target)


def test_an_instruction_linked_to_a_host_file_never_reaches_the_model(
    make_task: MakeTask,
    secret: Path,
    fake_openai: FakeOpenAI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = make_task("leak", files={"environment/Dockerfile": None})
    link(root / "instruction.md", secret)
    ((path, message),) = errors(root)
    assert path == root / "instruction.md" and "is a symbolic link" in message
    # A real run with the terminal agent: refused before any model call or sandbox.
    monkeypatch.setenv("TASK_LINK_KEY", "sk-test")
    jobs = tmp_path / "jobs"
    out = runner.invoke(
        app,
        [
            "run", str(root), "--agent", "terminal", "--env", "local", "--model", "gpt-4o",
            "--model-base-url", fake_openai.url, "--model-api-key-env", "TASK_LINK_KEY",
            "--jobs-dir", str(jobs), "--job-name", "j", "--json", "--quiet",
        ],
    )  # fmt: skip
    assert out.exit_code == 1, out.output
    assert json.loads(out.stderr.splitlines()[-1])["error"] == "task_invalid"
    assert fake_openai.requests == [] and SECRET not in out.output  # no model call at all
    assert not (jobs / "j").exists()


def test_a_link_inside_the_folder_is_refused_too(make_task: MakeTask) -> None:
    """Contained links are refused as well: the host never reads through a task's link."""
    root = make_task("inner", files={"notes.md": "Write hello.\n"})
    link(root / "instruction.md", "notes.md")
    ((path, message),) = errors(root)
    assert path == root / "instruction.md" and "'notes.md'" in message


def test_task_toml_and_the_dockerfile_are_not_read_through_links(
    make_task: MakeTask, secret: Path, tmp_path: Path
) -> None:
    root = make_task("toml")
    (tmp_path / "host" / "task.toml").write_text(f'[metadata]\nnote = "{SECRET}"\n')
    link(root / "task.toml", tmp_path / "host" / "task.toml")
    ((path, message),) = errors(root)
    assert path == root / "task.toml" and "is a symbolic link" in message
    root = make_task("dockerfile")
    link(root / "environment" / "Dockerfile", secret)
    ((path, message),) = errors(root)
    assert path == root / "environment" / "Dockerfile" and "is a symbolic link" in message


def test_a_step_instruction_linked_to_a_host_file_is_refused(
    make_task: MakeTask, secret: Path
) -> None:
    root = make_task("steps", toml=STEPS_TOML, files={"instruction.md": None})
    (root / "steps" / "one" / "tests").mkdir(parents=True)
    (root / "steps" / "one" / "tests" / "test.sh").write_text(
        "echo 1 > /logs/verifier/reward.txt\n"
    )
    link(root / "steps" / "one" / "instruction.md", secret)
    ((path, message),) = errors(root)
    assert path == root / "steps" / "one" / "instruction.md" and "symbolic link" in message
    # The step's folder itself a link: copied from wherever it points, so refused by name.
    (root / "steps" / "one" / "instruction.md").unlink()
    link(root / "steps" / "one" / "workdir", secret.parent / "dir")
    (root / "steps" / "one" / "instruction.md").write_text("Do it.\n")
    ((path, message),) = errors(root)
    assert path == root / "steps" / "one" / "workdir" and "symbolic link" in message


@pytest.mark.parametrize("folder", ["tests", "solution", "environment"])
def test_a_linked_task_folder_is_refused(make_task: MakeTask, secret: Path, folder: str) -> None:
    """tests/ -> ~/.ssh would be copied whole into the sandbox's /tests."""
    root = make_task("linked")
    link(root / folder, secret.parent / "dir")
    assert (root / folder, True) in [(p, "symbolic link" in m) for p, m in errors(root)]


@pytest.mark.parametrize(
    ("entry", "target", "said"),
    [
        ("shadow", "ABS", "a link to an absolute path"),
        ("sub/up", "../../../host/shadow", "a link out of the build context"),
        ("chain", "sub/hop", "a link out of the build context"),  # hop leaves; chain via hop
        ("root", "/", "a link to an absolute path"),
    ],
)
def test_a_build_context_link_out_of_environment_is_refused(
    make_task: MakeTask, secret: Path, entry: str, target: str, said: str
) -> None:
    root = make_task("ctx")
    (root / "environment" / "sub").mkdir()
    (root / "environment" / "sub" / "hop").symlink_to("../../../host/shadow")
    (root / "environment" / "inside").symlink_to("Dockerfile")  # contained: fine
    if entry != "sub/up":
        link(root / "environment" / entry, str(secret) if target == "ABS" else target)
    else:
        link(root / "environment" / entry, target)
    found = errors(root)
    assert (root / "environment" / entry, said) in [(p, m.split(" (")[0]) for p, m in found]
    assert all("inside" not in str(p) for p, _ in found)


def test_a_compose_build_context_linked_out_is_refused(make_task: MakeTask, secret: Path) -> None:
    root = make_task("compose")
    env = root / "environment"
    (env / "db").mkdir()
    (env / "db" / "Dockerfile").write_text("FROM debian:bookworm-slim\nCOPY key /key\n")
    (env / "db" / "key").symlink_to(secret.parent / "dir" / "id_rsa")
    (env / "docker-compose.yaml").write_text("services:\n  db:\n    build: ./db\n")
    # environment/ is main's build context, and holds db/: refused at load, by path.
    assert (env / "db" / "key", "a link to an absolute path") in [
        (p, m.split(" (")[0]) for p, m in errors(root)
    ]
    # The docker provider reads the file again: the sidecar's context is refused there too.
    variables = compose_variables({}, env_dir=env, cpus=1, memory_mb=512, image=None)
    with pytest.raises(TaskInvalid, match=r"services\.db\.build\.context: refused: .*db/key"):
        load_compose(env / "docker-compose.yaml", variables)


IMAGE_TOML = 'schema_version = "1.1"\n[environment]\ndocker_image = "debian:bookworm-slim"\n'


def test_a_compose_file_linked_to_a_host_file_is_refused(
    make_task: MakeTask, secret: Path, tmp_path: Path
) -> None:
    root = make_task("compose", toml=IMAGE_TOML, files={"environment/Dockerfile": None})
    env = root / "environment"
    (tmp_path / "host" / "compose.yaml").write_text(f"services: {{db: {{image: '{SECRET}'}}}}\n")
    link(env / "docker-compose.yaml", tmp_path / "host" / "compose.yaml")
    ((path, message),) = errors(root)
    assert path == env / "docker-compose.yaml" and "file: is a symbolic link" in message
    # env_file is never read at all (a file of the host's), link or not.
    (env / "docker-compose.yaml").unlink()
    (env / "vars.env").symlink_to(secret)
    (env / "docker-compose.yaml").write_text(
        "services:\n  db:\n    image: debian:bookworm-slim\n    env_file: vars.env\n"
    )
    ((path, message),) = errors(root)
    assert message == "services.db.env_file: refused: files read from the host"


def test_a_fifo_in_the_task_does_not_hang_the_loader(make_task: MakeTask) -> None:
    root = make_task("fifo")
    os.mkfifo(root / "tests" / "pipe")
    code = f"from crucible.tasks.loader import check_task; print(check_task({str(root)!r}).valid)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "True"


def test_a_bundled_verifier_context_is_checked_like_environment(
    make_task: MakeTask, secret: Path
) -> None:
    """tests/Dockerfile makes tests/ a separate verifier's build context (Harbor's)."""
    root = make_task("bundled")
    link(root / "tests" / "Dockerfile", secret)
    ((path, message),) = errors(root)
    assert path == root / "tests" / "Dockerfile" and "is a symbolic link" in message
    (root / "tests" / "Dockerfile").unlink()
    (root / "tests" / "Dockerfile").write_text("FROM debian:bookworm-slim\nCOPY key /key\n")
    (root / "tests" / "key").symlink_to(secret)
    ((path, message),) = errors(root)
    assert path == root / "tests" / "key" and message.startswith("a link to an absolute path")
