"""Loading one task directory: every problem found, with its file and line, or a `Task`.

`check_task` never raises: it returns the loaded task (when there are no
errors) with every problem it found, warnings included, so `tasks check` can
report them all at once. `load_task` raises `TaskInvalid` listing the errors.
Features of Harbor's format that crucible cannot run yet (multi-step tasks,
a separate verifier environment, ...) are errors, so a task is never mis-run.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from crucible.errors import TaskInvalid
from crucible.tasks.models import Task, TaskConfig

Severity = Literal["error", "warning"]
_Report = Callable[..., None]  # (loc, message, severity="error")

TASK_TOML = "task.toml"
INSTRUCTION = "instruction.md"
TEST_SCRIPT = "tests/test.sh"
SOLVE_SCRIPT = "solution/solve.sh"
DOCKERFILE = "environment/Dockerfile"

# Never part of a task's identity: VCS data and caches change without the task changing.
_DIGEST_SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache"}
)
_DIGEST_SKIP_FILES = frozenset({".DS_Store"})


class Problem(BaseModel):
    """One thing wrong with a task: where, why, and whether it stops the task from running."""

    path: Path
    line: int | None = None
    message: str
    severity: Severity = "error"

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def location(self) -> str:
        return f"{self.path}:{self.line}" if self.line is not None else str(self.path)

    def __str__(self) -> str:
        return f"{self.location()}: {self.severity}: {self.message}"


@dataclass
class TaskCheck:
    """What checking one task directory found."""

    path: Path
    name: str
    task: Task | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.is_error]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if not p.is_error]

    @property
    def valid(self) -> bool:
        return self.task is not None and not self.errors


def load_task(path: Path) -> Task:
    """Load and validate the task at `path`; `TaskInvalid` lists every error."""
    check = check_task(path)
    if check.task is None or check.errors:
        raise TaskInvalid(
            format_invalid(check), hint="run `crucible tasks check` on it for details"
        )
    return check.task


def validate_task(path: Path) -> list[Problem]:
    """Every problem of the task at `path` (errors and warnings); empty when it is clean."""
    return check_task(path).problems


def format_invalid(check: TaskCheck) -> str:
    lines = [f"task {check.name!r} ({check.path}) is invalid:"]
    lines += [f"  {p.location()}: {p.message}" for p in check.errors]
    return "\n".join(lines)


def check_task(path: Path) -> TaskCheck:
    """Check the task directory at `path`, collecting every problem rather than stopping at one."""
    path = Path(path)
    check = TaskCheck(path=path, name=path.resolve().name)
    if not path.exists():
        check.problems.append(Problem(path=path, message="no such file or directory"))
        return check
    if not path.is_dir():
        check.problems.append(Problem(path=path, message="a task is a directory holding task.toml"))
        return check

    config = _check_config(path, check)
    if config is not None and config.task is not None and config.task.name:
        check.name = config.task.name
    instruction = _check_instruction(path, check)
    _check_scripts(path, check)
    workdir = _check_environment(path, config, check)

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
        digest=tree_digest(path),
        environment_digest=tree_digest(env_dir) if env_dir.is_dir() else None,
        dockerfile_workdir=workdir,
    )
    return check


# --- task.toml -------------------------------------------------------------------------------

_TOML_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")

# Harbor fields crucible knows but does not act on: running the task without them is safe.
_IGNORED_HARBOR_FIELDS: dict[tuple[str, ...], str] = {
    ("artifacts",): "artifact collection is not supported yet; the listed paths are not collected",
    ("environment", "mcp_servers"): "MCP servers are not supported yet; the agent gets none",
    ("environment", "skills_dir"): "skills directories are not supported yet; ignored",
    ("environment", "healthcheck"): (
        "healthchecks are not supported yet; the agent starts without waiting for one"
    ),
    ("task", "version"): "",
    ("environment", "os"): "",  # 'linux' is what crucible runs; others are refused
    ("verifier", "environment_mode"): "",  # 'shared' is what crucible does; others are refused
}

# Harbor features that change what a trial means: running without them would mis-run the task.
_UNSUPPORTED_HARBOR_FIELDS: dict[tuple[str, ...], str] = {
    ("steps",): "multi-step tasks ([[steps]]) are not supported yet",
    ("multi_step_reward_strategy",): (
        "multi-step tasks (multi_step_reward_strategy) are not supported yet"
    ),
    ("verifier", "environment"): (
        "a separate verifier environment ([verifier.environment]) is not supported yet; "
        "the verifier runs in the agent's sandbox"
    ),
    ("verifier", "docker_image"): (
        "a separate verifier image (verifier.docker_image) is not supported yet; "
        "the verifier runs in the agent's sandbox"
    ),
    ("verifier", "collect"): "verifier collect hooks ([[verifier.collect]]) are not supported yet",
    ("environment", "tpu"): "TPUs (environment.tpu) are not supported yet",
}


def _check_config(task_dir: Path, check: TaskCheck) -> TaskConfig | None:
    toml_path = task_dir / TASK_TOML
    if not toml_path.is_file():
        check.problems.append(Problem(path=toml_path, message="task.toml is missing"))
        return None
    try:
        text = toml_path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        check.problems.append(Problem(path=toml_path, message=f"not UTF-8 text: {exc}"))
        return None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = _TOML_POSITION.search(str(exc))
        line = int(match.group(1)) if match else None
        if line is None and "end of document" in str(exc):
            line = max(len(text.splitlines()), 1)
        check.problems.append(Problem(path=toml_path, line=line, message=f"invalid TOML: {exc}"))
        return None

    lines = _TomlLines(text)

    def problem(loc: tuple[str, ...], message: str, severity: Severity = "error") -> None:
        check.problems.append(
            Problem(path=toml_path, line=lines.find(loc), message=message, severity=severity)
        )

    _check_unsupported(raw, problem)
    _check_deprecated(raw, problem)

    try:
        config = TaskConfig.model_validate(raw)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(str(p) for p in err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            where = _dotted(err["loc"])
            text_msg = msg if not where or msg.startswith(where) else f"{where}: {msg}"
            line = lines.find(_mentioned_key(msg, lines) or loc)
            check.problems.append(Problem(path=toml_path, line=line, message=text_msg))
        return None

    for loc in _unknown_keys(config):
        if loc in _IGNORED_HARBOR_FIELDS or loc in _UNSUPPORTED_HARBOR_FIELDS:
            continue
        problem(loc, f"unknown key {'.'.join(loc)!r} (ignored)", "warning")

    env = config.environment
    if env.workdir is not None and not env.workdir.startswith("/"):
        problem(
            ("environment", "workdir"),
            f"environment.workdir must be an absolute path, not {env.workdir!r}",
        )
    if config.agent.timeout_sec is not None and config.agent.timeout_sec <= 0:
        problem(("agent", "timeout_sec"), "agent.timeout_sec must be positive")
    if config.verifier.timeout_sec <= 0:
        problem(("verifier", "timeout_sec"), "verifier.timeout_sec must be positive")
    if env.build_timeout_sec <= 0:
        problem(
            ("environment", "build_timeout_sec"), "environment.build_timeout_sec must be positive"
        )
    if env.storage_mb <= 0:
        problem(("environment", "storage_mb"), "environment.storage_mb must be positive")
    return config


def _check_unsupported(raw: dict[str, Any], problem: _Report) -> None:
    for loc, message in _UNSUPPORTED_HARBOR_FIELDS.items():
        if _lookup(raw, loc) is not None:
            problem(loc, message)
    mode = _lookup(raw, ("verifier", "environment_mode"))
    if mode is not None and mode != "shared":
        problem(
            ("verifier", "environment_mode"),
            f"verifier.environment_mode = {mode!r} is not supported yet; only 'shared' "
            "(the verifier runs in the agent's sandbox)",
        )
    os_name = _lookup(raw, ("environment", "os"))
    if os_name is not None and str(os_name).lower() != "linux":
        problem(
            ("environment", "os"), f"environment.os = {os_name!r} is not supported; only 'linux'"
        )
    for loc, message in _IGNORED_HARBOR_FIELDS.items():
        if message and _lookup(raw, loc) not in (None, [], {}):
            problem(loc, f"{'.'.join(loc)}: {message}", "warning")


def _check_deprecated(raw: dict[str, Any], problem: _Report) -> None:
    # Harbor migrates these itself; the warning tells authors what to write instead.
    if "version" in raw:
        problem(("version",), "'version' is deprecated; use schema_version (migrated)", "warning")
    env = raw.get("environment")
    if not isinstance(env, dict):
        return
    for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
        if old in env:
            problem(
                ("environment", old),
                f"environment.{old} is deprecated; use environment.{new} (migrated)",
                "warning",
            )
    if "allow_internet" in env and "network_mode" not in env:
        problem(
            ("environment", "allow_internet"),
            "environment.allow_internet is deprecated; use environment.network_mode (migrated)",
            "warning",
        )


def _lookup(raw: dict[str, Any], loc: tuple[str, ...]) -> Any:
    node: Any = raw
    for part in loc:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _mentioned_key(message: str, lines: _TomlLines) -> tuple[str, ...] | None:
    """A model-level error names its key in the text ('environment.cpus must ...'): find that line."""
    for match in re.finditer(r"\b([A-Za-z_][\w-]*)\.([A-Za-z_][\w-]*)\b", message):
        loc = (match.group(1), match.group(2))
        if loc in lines.keys:
            return loc
    return None


def _unknown_keys(config: TaskConfig) -> Iterator[tuple[str, ...]]:
    for key in config.model_extra or {}:
        yield (key,)
    for section_name in ("task", "verifier", "agent", "environment", "solution"):
        section = getattr(config, section_name)
        if isinstance(section, BaseModel):
            for key in section.model_extra or {}:
                yield (section_name, key)


class _TomlLines:
    """Line numbers of the tables and keys of a TOML text, for pointing at a problem.

    A light scan, not a parser: it understands [tables], [[arrays]], dotted and
    quoted keys, and skips multi-line strings; good enough to name a line.
    """

    _HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    _KEY = re.compile(
        r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*="""
    )

    def __init__(self, text: str) -> None:
        self.keys: dict[tuple[str, ...], int] = {}
        table: tuple[str, ...] = ()
        in_multiline: str | None = None
        for number, line in enumerate(text.splitlines(), start=1):
            if in_multiline is not None:
                if line.count(in_multiline) % 2 == 1:
                    in_multiline = None
                continue
            header = self._HEADER.match(line)
            if header:
                table = _split_key(header.group(1))
                self.keys.setdefault(table, number)
                continue
            key = self._KEY.match(line)
            if key:
                self.keys.setdefault(table + _split_key(key.group(1)), number)
                rest = line[key.end() :]
                for quote in ('"""', "'''"):
                    if rest.count(quote) % 2 == 1:
                        in_multiline = quote
                        break

    def find(self, loc: tuple[str, ...]) -> int | None:
        """The line of `loc`, else of its nearest enclosing table that is written out."""
        parts = tuple(p for p in loc if not p.isdigit())
        while parts:
            if parts in self.keys:
                return self.keys[parts]
            parts = parts[:-1]
        return None


def _split_key(key: str) -> tuple[str, ...]:
    parts = re.findall(r'"[^"]*"|\'[^\']*\'|[^.]+', key)
    return tuple(p.strip().strip("\"'") for p in parts if p.strip())


# --- the other files -------------------------------------------------------------------------


def _check_instruction(task_dir: Path, check: TaskCheck) -> str | None:
    path = task_dir / INSTRUCTION
    if not path.is_file():
        check.problems.append(Problem(path=path, message="instruction.md is missing"))
        return None
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        check.problems.append(Problem(path=path, message=f"not UTF-8 text: {exc}"))
        return None
    if not text.strip():
        check.problems.append(Problem(path=path, message="instruction.md is empty"))
        return None
    return text


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
    env_dir = task_dir / "environment"
    if config is not None:
        env = config.environment
        if env.network_mode is None and env.allow_internet is None:
            check.problems.append(
                Problem(
                    path=task_dir / TASK_TOML,
                    message=(
                        "environment.network_mode is not set: crucible runs this task without "
                        'network (Harbor\'s default would allow it); set network_mode = "public" '
                        'if the task needs the network, or "no-network" to say it does not'
                    ),
                    severity="warning",
                )
            )
    for compose in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"):
        if (env_dir / compose).is_file():
            check.problems.append(
                Problem(
                    path=env_dir / compose,
                    message="multi-container environments (docker compose) are not supported yet",
                )
            )
    dockerfile = task_dir / DOCKERFILE
    if dockerfile.is_file():
        try:
            text = dockerfile.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            check.problems.append(Problem(path=dockerfile, message=f"not UTF-8 text: {exc}"))
            return None
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
        digest.update(b"F" + str(full.stat().st_size).encode() + b"\0")
        with full.open("rb") as fh:
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
