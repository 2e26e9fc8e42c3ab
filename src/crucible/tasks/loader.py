"""Loading one task directory: every problem found, with its file and line, or a `Task`.

`check_task` never raises: it returns the loaded task (when there are no
errors) with every problem it found, warnings included, so `tasks check` can
report them all at once. `load_task` raises `TaskInvalid` listing the errors.
Every Harbor 0.25 field loads; the features crucible cannot run yet (multi-step
tasks, a separate verifier environment, ...) are warnings here, and the launch
refuses them (tasks/support.py), so a task is never mis-run.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from crucible.errors import TaskInvalid
from crucible.records.text import storable_text
from crucible.tasks.compose import check_compose
from crucible.tasks.host_env import resolve_task_env
from crucible.tasks.hostvars import NO_HOST, HostEnv, HostScope
from crucible.tasks.models import Task, TaskConfig
from crucible.tasks.problems import Problem, TaskCheck
from crucible.tasks.steps import check_steps, read_instruction, refuse_links
from crucible.tasks.support import compose_file, feature_uses
from crucible.tasks.task_toml import TASK_TOML, check_config, field_line
from crucible.tasks.taskfs import (
    context_problems,
    read_task_bytes,
    read_task_text,
    task_entry,
    tree_problem,
)

INSTRUCTION = "instruction.md"
TEST_SCRIPT = "tests/test.sh"
SOLVE_SCRIPT = "solution/solve.sh"
DOCKERFILE = "environment/Dockerfile"

# Never part of a task's identity: VCS data and caches change without the task changing.
_DIGEST_SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache"}
)
_DIGEST_SKIP_FILES = frozenset({".DS_Store"})


def load_task(path: Path, host: HostEnv = NO_HOST) -> Task:
    """Load and validate the task at `path`; `TaskInvalid` lists every error."""
    check = check_task(path, host)
    if check.task is None or check.errors:
        raise TaskInvalid(
            format_invalid(check), hint="run `crucible tasks check` on it for details"
        )
    return check.task


def validate_task(path: Path, host: HostEnv = NO_HOST) -> list[Problem]:
    """Every problem of the task at `path` (errors and warnings); empty when it is clean."""
    return check_task(path, host).problems


def format_invalid(check: TaskCheck) -> str:
    lines = [f"task {check.name!r} ({check.path}) is invalid:"]
    lines += [f"  {p.location()}: {p.message}" for p in check.errors]
    return "\n".join(lines)


def check_task(path: Path, host: HostEnv = NO_HOST) -> TaskCheck:
    """Check the task directory at `path`, collecting every problem rather than stopping at one.

    `${VAR}` reads only the host variables `host` allows (none by default); no file of the
    task is read through a link (tasks/taskfs.py)."""
    path = Path(path)
    check = TaskCheck(path=path, name=storable_text(path.resolve().name))  # a folder's bytes
    scope = host.scope()
    check.host_reads = scope.reads
    if not path.exists():
        check.problems.append(Problem(path=path, message="no such file or directory"))
        check.not_found = True
        return check
    if not path.is_dir():
        check.problems.append(Problem(path=path, message="a task is a directory holding task.toml"))
        return check
    if (too_big := tree_problem(path)) is not None:
        # Before anything reads it: the digest alone would read every byte.
        check.problems.append(Problem(path=path, message=f"the task folder is refused: {too_big}"))
        return check

    config = check_config(path, check)
    if config is not None and config.task is not None and config.task.name:
        check.name = config.task.name
    if config is not None:
        config = _resolve_env(path, config, check, scope)
    refuse_links(path, ["environment", "tests", "solution", "steps"], check)
    step_instructions: dict[str, str] = {}
    instruction: str | None
    if config is not None and config.steps:
        # Harbor's layout for steps: steps/NAME/{instruction.md,tests/,solution/,workdir/}.
        step_instructions = check_steps(path, config, check)
        instruction = ""
    else:
        instruction = read_instruction(path, INSTRUCTION, check)
        _check_scripts(path, check)
    workdir = _check_environment(path, config, check)
    _check_bundled(path, config, check)

    # task.toml's problems first, in line order; then the other files'.
    check.problems.sort(key=lambda p: (p.path.name != TASK_TOML, str(p.path), p.line or 0))
    if config is None or instruction is None or check.errors:
        return check
    env_dir = path / "environment"
    check.task = Task(
        name=check.name,
        path=path.resolve(),
        config=config,
        instruction=instruction,
        step_instructions=step_instructions,
        digest=tree_digest(path),
        environment_digest=tree_digest(env_dir) if env_dir.is_dir() else None,
        dockerfile_workdir=workdir,
        host_env=scope.used(),
    )
    _report_features(check.task, check)
    if (compose := compose_file(check.task)) is not None:
        if (wrong := check_compose(compose, config.environment, scope)) is not None:
            failed = [r for r in scope.reads if r.file == compose and r.name in wrong]
            line = failed[-1].line if failed else None
            check.problems.append(Problem(path=compose, line=line, message=wrong))
        for read in scope.reads:  # `${NAME}` without a default: Compose's empty string
            if read.empty and read.file == compose:
                check.problems.append(
                    Problem(
                        path=compose,
                        line=read.line,
                        severity="warning",
                        message=f"{read.where}: ${{{read.name}}} has no value here "
                        f"({scope.why_not(read.name)}): Harbor's docker compose runs it with "
                        "an empty string, and so does crucible",
                    )
                )
        # What the compose file read of the host goes with the task (the docker provider
        # reads the file again, with these values and no others).
        check.task = check.task.model_copy(update={"host_env": scope.used()})
    check.problems.sort(key=lambda p: (p.path.name != TASK_TOML, str(p.path), p.line or 0))
    return check


def _toml_text(task_dir: Path) -> str:
    """task.toml's text, to point at lines (check_config has read it already)."""
    try:
        return read_task_bytes(task_dir, TASK_TOML).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _resolve_env(
    task_dir: Path, config: TaskConfig, check: TaskCheck, scope: HostScope
) -> TaskConfig:
    toml_path = task_dir / TASK_TOML
    text = _toml_text(task_dir)
    resolved, missing = resolve_task_env(config, scope, toml_path, text)
    for loc, message in missing:
        check.problems.append(Problem(path=toml_path, line=field_line(text, loc), message=message))
    return resolved


def _report_features(task: Task, check: TaskCheck) -> None:
    """A warning for each Harbor feature used that no provider runs yet (the launch refuses
    those, or runs without the ignored ones)."""
    toml_path = task.path / TASK_TOML
    text = _toml_text(task.path)
    for use in feature_uses(task):
        if use.supported:
            continue
        loc = tuple(use.feature.field.split(" ")[0].split("."))
        line = field_line(text, loc) if "/" not in use.feature.field else None
        check.problems.append(
            Problem(path=toml_path, line=line, message=use.describe(), severity="warning")
        )


# --- the other files -------------------------------------------------------------------------


def _check_scripts(task_dir: Path, check: TaskCheck) -> None:
    test = task_dir / TEST_SCRIPT
    if not test.is_file():
        check.problems.append(
            Problem(path=test, message="tests/test.sh is missing: the verifier has nothing to run")
        )
    solve = task_dir / SOLVE_SCRIPT
    if not solve.is_file():
        check.problems.append(
            Problem(
                path=solve,
                message="solution/solve.sh is missing: the oracle agent cannot run this task",
                severity="warning",
            )
        )


def _check_environment(task_dir: Path, config: TaskConfig | None, check: TaskCheck) -> str | None:
    dockerfile = task_dir / DOCKERFILE
    if task_entry(task_dir, "environment") == "link":
        return None  # refused as a link already
    if dockerfile.is_file() or dockerfile.is_symlink():
        text = read_task_text(
            task_dir, DOCKERFILE, check, missing="environment/Dockerfile is missing"
        )
        if text is None:
            return None
        # environment/ is the build context: no link in it may lead a builder out of it.
        for entry, why in context_problems(task_dir / "environment"):
            check.problems.append(Problem(path=entry, message=why))
        if not re.search(r"^\s*FROM\s", text, re.IGNORECASE | re.MULTILINE):
            check.problems.append(
                Problem(path=dockerfile, message="the Dockerfile has no FROM line")
            )
        return dockerfile_workdir(text)
    if config is not None and not config.environment.docker_image:
        check.problems.append(
            Problem(
                path=dockerfile,
                message=(
                    "neither environment/Dockerfile nor environment.docker_image: "
                    "only the local provider can run this task"
                ),
                severity="warning",
            )
        )
    return None


def _check_bundled(task_dir: Path, config: TaskConfig | None, check: TaskCheck) -> None:
    """A tests/ folder holding a Dockerfile is a build context (a separate verifier's)."""
    steps = (config.steps or []) if config is not None else []
    rels = ["tests", *(f"steps/{s.name}/tests" for s in steps)]
    for rel in rels:
        tests = task_dir / rel
        if task_entry(task_dir, rel) != "dir" or not os.path.lexists(tests / "Dockerfile"):
            continue
        if read_task_text(task_dir, f"{rel}/Dockerfile", check, missing="no Dockerfile") is None:
            continue  # said already
        for entry, why in context_problems(tests):
            check.problems.append(Problem(path=entry, message=why))


def dockerfile_workdir(text: str) -> str | None:
    """The WORKDIR commands run in at the end of the Dockerfile's last stage (None: the base's)."""
    workdir: str | None = None
    logical = re.sub(r"\\\r?\n", " ", text)  # join continuation lines
    for line in logical.splitlines():
        words = line.strip().split(None, 1)
        if not words:
            continue
        instruction = words[0].upper()
        if instruction == "FROM":
            workdir = None  # a new stage starts from its base image's WORKDIR
        elif instruction == "WORKDIR" and len(words) == 2:
            value = words[1].strip().strip("\"'")
            if value.startswith("[") and value.endswith("]"):  # JSON form
                value = value[1:-1].strip().strip("\"'")
            workdir = posixpath.normpath(posixpath.join(workdir or "/", value))
    return workdir


# --- identity --------------------------------------------------------------------------------


def tree_digest(root: Path) -> str:
    """sha256 over every file below `root`: relative path and content, in sorted order.

    Symlinks are hashed by their target, not followed, so a link out of the
    task cannot make its identity depend on files elsewhere.
    """
    digest = hashlib.sha256()
    for rel, full in sorted(_walk_files(root)):
        digest.update(rel.encode("utf-8") + b"\0")
        if full.is_symlink():
            target = os.readlink(full).encode("utf-8", "surrogateescape")
            digest.update(b"L" + str(len(target)).encode() + b"\0" + target)
            continue
        # A fifo or a device is hashed as what it is, never opened (it would hang the
        # loader or read a device); a file is checked again on its fd (O_NOFOLLOW).
        kind = stat.S_IFMT(full.lstat().st_mode)
        fd = -1
        if kind == stat.S_IFREG:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            if fd >= 0:
                os.close(fd)
            digest.update(b"S" + str(kind).encode() + b"\0")
            continue
        with os.fdopen(fd, "rb") as fh:
            digest.update(b"F" + str(os.fstat(fd).st_size).encode() + b"\0")
            while chunk := fh.read(1 << 16):
                digest.update(chunk)
    return digest.hexdigest()


def _walk_files(root: Path) -> Iterator[tuple[str, Path]]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _DIGEST_SKIP_DIRS]
        base = Path(dirpath)
        # os.walk lists symlinked directories among dirnames without entering them.
        links = [d for d in dirnames if (base / d).is_symlink()]
        for name in [*filenames, *links]:
            if name in _DIGEST_SKIP_FILES or name.endswith(".pyc"):
                continue
            full = base / name
            yield full.relative_to(root).as_posix(), full
