"""The loader on valid and broken tasks: every problem, with its file and line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from task_factory import GOOD_TOML, MakeTask

from crucible.errors import ErrorKind, TaskInvalid
from crucible.tasks.loader import (
    Problem,
    check_task,
    dockerfile_workdir,
    load_task,
    tree_digest,
    validate_task,
)
from crucible.tasks.models import NetworkMode
from crucible.tasks.support import feature_uses


def errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]


def warnings(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "warning"]


def only(problems: list[Problem], needle: str) -> Problem:
    hits = [p for p in problems if needle in p.message]
    assert len(hits) == 1, f"expected one problem about {needle!r}, got {problems}"
    return hits[0]


def test_valid_task_loads_with_its_fields(make_task: MakeTask) -> None:
    root = make_task("hello")
    task = load_task(root)
    assert task.name == "hello"
    assert task.path == root.resolve()
    assert task.instruction.startswith("Write hello")
    assert task.config.environment.cpus == 2
    assert task.config.environment.memory_mb == 1024
    assert task.config.environment.resolved_network() is NetworkMode.no_network
    assert task.agent_timeout_sec == 60.0
    assert task.verifier_timeout_sec == 30.0
    assert task.dockerfile_workdir == "/app"
    assert task.workdir == "/app"
    assert len(task.digest) == 64 and task.environment_digest is not None
    assert validate_task(root) == []


def test_task_section_name_wins_over_directory_name(make_task: MakeTask) -> None:
    root = make_task(
        "dir-name", toml='[task]\nname = "org/real-name"\n' + GOOD_TOML.split("\n", 1)[1]
    )
    assert load_task(root).name == "org/real-name"


def test_digest_is_deterministic_and_tracks_content(make_task: MakeTask, tmp_path: Path) -> None:
    root = make_task("d")
    first = load_task(root)
    # Same files elsewhere: same identity.
    copy = tmp_path / "elsewhere" / "d"
    shutil.copytree(root, copy)
    assert load_task(copy).digest == first.digest
    assert load_task(copy).environment_digest == first.environment_digest

    # A test change moves the task digest but not the environment's.
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n")
    second = load_task(root)
    assert second.digest != first.digest
    assert second.environment_digest == first.environment_digest

    # An environment change moves both.
    (root / "environment" / "data.txt").write_text("x")
    third = load_task(root)
    assert third.environment_digest != second.environment_digest
    assert third.digest != second.digest

    # A renamed file with the same content is a different task.
    (root / "environment" / "data.txt").rename(root / "environment" / "data2.txt")
    assert load_task(root).digest != third.digest


def test_digest_ignores_caches_and_does_not_follow_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    (root / "a.txt").write_text("a")
    base = tree_digest(root)
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert tree_digest(root) == base

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big.txt").write_text("one")
    (root / "link").symlink_to(outside)
    with_link = tree_digest(root)
    assert with_link != base
    (outside / "big.txt").write_text("two")  # the link's target changes, the task does not
    assert tree_digest(root) == with_link


def test_bad_toml_reports_the_line(make_task: MakeTask) -> None:
    root = make_task(toml='schema_version = "1.1"\n[agent]\ntimeout_sec = \n')
    problem = only(validate_task(root), "invalid TOML")
    assert problem.path == root / "task.toml"
    assert problem.line == 3
    assert problem.severity == "error"


def test_duplicate_table_reports_the_line(make_task: MakeTask) -> None:
    root = make_task(toml="[agent]\ntimeout_sec = 1\n\n[agent]\nuser = 'x'\n")
    assert only(validate_task(root), "invalid TOML").line == 4


def test_every_problem_is_reported_at_once(make_task: MakeTask) -> None:
    root = make_task(
        toml="[environment]\nmemory_mb = 'lots'\ncpus = 'many'\n",
        files={"instruction.md": "  \n", "tests/test.sh": None, "solution/solve.sh": None},
    )
    problems = validate_task(root)
    messages = "\n".join(str(p) for p in problems)
    assert only(problems, "environment.memory_mb").line == 2
    assert only(problems, "environment.cpus").line == 3
    assert "instruction.md is empty" in messages
    assert "tests/test.sh is missing" in messages
    assert only(problems, "solve.sh is missing").severity == "warning"
    assert len(errors(problems)) == 4

    with pytest.raises(TaskInvalid) as info:
        load_task(root)
    assert info.value.kind is ErrorKind.task_invalid
    text = info.value.message
    for needle in ("environment.memory_mb", "environment.cpus", "instruction.md", "tests/test.sh"):
        assert needle in text
    assert "task.toml:2" in text


def test_missing_files(make_task: MakeTask, tmp_path: Path) -> None:
    root = make_task(toml=None, files={"instruction.md": None})
    problems = validate_task(root)
    assert only(problems, "task.toml is missing").path == root / "task.toml"
    assert only(problems, "instruction.md is missing").path == root / "instruction.md"

    assert only(validate_task(tmp_path / "nope"), "no such file").severity == "error"
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    assert only(validate_task(a_file), "directory").severity == "error"


def test_model_level_error_points_at_its_key(make_task: MakeTask) -> None:
    root = make_task(toml="schema_version = '1.1'\n\n[environment]\nmemory_mb = 512\ncpus = 0\n")
    problem = only(validate_task(root), "environment.cpus must be positive")
    assert problem.line == 5


def test_bad_section_type(make_task: MakeTask) -> None:
    root = make_task(toml="metadata = 3\n")
    problem = only(validate_task(root), "metadata")
    assert problem.line == 1 and problem.severity == "error"


def test_solution_missing_is_only_a_warning(make_task: MakeTask) -> None:
    root = make_task(files={"solution/solve.sh": None})
    check = check_task(root)
    assert check.valid and check.task is not None
    assert only(check.problems, "oracle").severity == "warning"


def test_environment_needs_dockerfile_or_image(make_task: MakeTask) -> None:
    root = make_task(files={"environment/Dockerfile": None})
    check = check_task(root)
    assert check.valid
    assert only(check.problems, "only the local provider").severity == "warning"
    assert check.task is not None and check.task.environment_digest is None
    assert check.task.workdir == "/app"  # the default

    with_image = make_task(
        "img",
        toml='[environment]\ndocker_image = "debian:bookworm-slim"\nnetwork_mode = "public"\n',
        files={"environment/Dockerfile": None},
    )
    assert validate_task(with_image) == []


def test_dockerfile_without_from_is_an_error(make_task: MakeTask) -> None:
    root = make_task(files={"environment/Dockerfile": "WORKDIR /app\n"})
    assert only(validate_task(root), "no FROM").severity == "error"


def test_deprecated_fields_are_migrated_with_warnings(make_task: MakeTask) -> None:
    root = make_task(
        toml=(
            'version = "1.0"\n'
            "[environment]\n"
            'memory = "2G"\n'
            'storage = "512M"\n'
            "allow_internet = true\n"
        )
    )
    check = check_task(root)
    assert check.valid and check.task is not None
    env = check.task.config.environment
    assert check.task.config.schema_version == "1.0"
    assert env.memory_mb == 2048
    assert env.storage_mb == 512
    assert env.resolved_network() is NetworkMode.public
    assert only(check.problems, "'version' is deprecated").line == 1
    assert only(check.problems, "environment.memory is deprecated").line == 3
    assert only(check.problems, "environment.storage is deprecated").line == 4
    assert only(check.problems, "allow_internet is deprecated").line == 5
    assert errors(check.problems) == []


def test_bad_deprecated_size_is_an_error(make_task: MakeTask) -> None:
    root = make_task(toml='[environment]\nmemory = "lots"\n')
    assert only(errors(validate_task(root)), "invalid size").line == 2


def test_unknown_keys_are_warnings_with_lines(make_task: MakeTask) -> None:
    root = make_task(toml=GOOD_TOML + "colour = 'red'\n\n[verifier.extra]\nx = 1\n", files={})
    # 'colour' lands in [environment] (the last table); [verifier.extra] is an unknown verifier key.
    check = check_task(root)
    assert check.valid
    first_new_line = GOOD_TOML.count("\n") + 1
    colour = only(check.problems, "environment.colour")
    assert colour.severity == "warning" and colour.line == first_new_line
    extra = only(check.problems, "verifier.extra")
    assert extra.severity == "warning" and extra.line == first_new_line + 2

    top = make_task("top", toml='bogus = 1\nschema_version = "1.1"\n')
    assert only(validate_task(top), "'bogus'").line == 1


def test_metadata_is_free_form(make_task: MakeTask) -> None:
    root = make_task(
        toml="[metadata]\nanything = 1\n[metadata.nested]\nok = true\n"
        '[environment]\nnetwork_mode = "no-network"\n'
    )
    assert validate_task(root) == []


@pytest.mark.parametrize(
    "toml",
    [
        "[verifier]\ntimeout_sec = 5\n\n[verifier.environment]\ndocker_image = 'x'\n",
        "[verifier]\nenvironment_mode = 'separate'\n",
        "[[verifier.collect]]\ncommand = 'true'\n",
        "[environment.healthcheck]\ncommand = 'true'\n",
        "artifacts = ['/app/out']\n",
    ],
)
def test_features_run_on_every_provider_warn_nothing(make_task: MakeTask, toml: str) -> None:
    # A separate verifier, collect hooks, healthchecks and artifacts run on local, docker, modal.
    assert validate_task(make_task(toml=toml)) == []


@pytest.mark.parametrize(
    ("toml", "field", "line"),
    [
        ("[environment]\nos = 'windows'\n", "environment.os", 2),
        ("[environment.tpu]\ntype = 'v6e'\ntopology = '2x2'\n", "environment.tpu", 1),
    ],
)
def test_features_not_run_yet_load_and_are_named(
    make_task: MakeTask, toml: str, field: str, line: int
) -> None:
    """The task loads (its fields are modelled); the warning names the field and the refusal."""
    root = make_task(toml=toml)
    check = check_task(root)
    assert check.valid, check.problems
    problem = only(check.problems, f"{field}:")
    assert problem.severity == "warning" and problem.line == line
    assert "refused as resources_unavailable" in problem.message


def test_shared_verifier_and_linux_are_fine(make_task: MakeTask) -> None:
    root = make_task(
        toml="[verifier]\nenvironment_mode = 'shared'\n[environment]\nos = 'linux'\n"
        "allow_internet = false\n"
    )
    assert [p.message for p in validate_task(root)] == [
        "environment.allow_internet is deprecated; use environment.network_mode (migrated)"
    ]
    assert load_task(root).config.environment.resolved_network() is NetworkMode.no_network


def test_unset_network_means_the_network_as_in_harbor(make_task: MakeTask) -> None:
    root = make_task(toml="[metadata]\nx = 1\n")
    check = check_task(root)
    assert check.valid and check.problems == []
    assert check.task is not None
    assert check.task.config.environment.resolved_network() is NetworkMode.public
    locked = check.task.without_network()
    assert locked.config.environment.resolved_network() is NetworkMode.no_network
    assert locked.digest == check.task.digest


def test_shared_mode_with_a_verifier_environment_is_an_error(make_task: MakeTask) -> None:
    root = make_task(
        toml="[verifier]\nenvironment_mode = 'shared'\n[verifier.environment]\ncpus = 1\n"
    )
    problem = only(errors(validate_task(root)), "conflicts with [verifier.environment]")
    assert problem.line == 2  # the environment_mode line


def test_docker_compose_environment_loads_and_is_named(make_task: MakeTask) -> None:
    root = make_task(files={"environment/docker-compose.yaml": "services: {}\n"})
    check = check_task(root)
    assert check.valid and check.task is not None
    assert not [p for p in check.problems if "compose" in p.message]  # docker runs it
    (use,) = feature_uses(check.task)
    assert use.feature.field == "environment/docker-compose.yaml"
    assert use.feature.supported_on == ("docker",)


def test_ignored_harbor_features_warn(make_task: MakeTask) -> None:
    root = make_task(toml="artifacts = ['/app/out']\n[environment]\nskills_dir = '/skills'\n")
    check = check_task(root)
    assert check.valid
    assert not [p for p in check.problems if "declared artifacts" in p.message]  # run now
    assert "ignored" in only(check.problems, "skills directories").message
    assert only(check.problems, "skills directories").line == 3


def test_relative_workdir_and_bad_timeouts(make_task: MakeTask) -> None:
    root = make_task(
        toml="[agent]\ntimeout_sec = -1\n[verifier]\ntimeout_sec = 0\n[environment]\nworkdir = 'app'\n"
    )
    problems = errors(validate_task(root))
    assert only(problems, "agent.timeout_sec").line == 2
    assert only(problems, "verifier.timeout_sec").line == 4
    assert only(problems, "absolute path").line == 6


def test_workdir_from_config_wins(make_task: MakeTask) -> None:
    root = make_task(toml="[environment]\nworkdir = '/srv'\n")
    task = load_task(root)
    assert task.dockerfile_workdir == "/app"
    assert task.workdir == "/srv"


@pytest.mark.parametrize(
    ("dockerfile", "expected"),
    [
        ("FROM debian\n", None),
        ("FROM debian\nWORKDIR /app\n", "/app"),
        ("FROM debian\nWORKDIR /a\nWORKDIR b\nWORKDIR ../c\n", "/a/c"),
        ("FROM x AS build\nWORKDIR /build\nFROM debian\nWORKDIR /srv\n", "/srv"),
        ("FROM x AS build\nWORKDIR /build\nFROM debian\nRUN true\n", None),
        ('from debian\nworkdir "/quoted dir"\n', "/quoted dir"),
        ('FROM debian\nWORKDIR ["/json"]\n', "/json"),
        ("FROM debian\nRUN echo a \\\n  WORKDIR /not\nWORKDIR /yes\n", "/yes"),
    ],
)
def test_dockerfile_workdir(dockerfile: str, expected: str | None) -> None:
    assert dockerfile_workdir(dockerfile) == expected


def test_problem_renders_file_and_line(tmp_path: Path) -> None:
    p = Problem(path=tmp_path / "task.toml", line=3, message="bad")
    assert str(p) == f"{tmp_path / 'task.toml'}:3: error: bad"
    assert Problem(path=Path("x"), message="m", severity="warning").location() == "x"
    assert Problem.model_validate_json(p.model_dump_json()) == p
