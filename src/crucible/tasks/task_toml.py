"""Checking task.toml: TOML syntax, the schema (every Harbor 0.25 field), deprecated and
unknown keys, each problem with its line. What a provider cannot run is tasks/support.py's."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from crucible.tasks.models import TaskConfig
from crucible.tasks.problems import Problem, Report, Severity, TaskCheck
from crucible.tasks.shape import parse_refused, shape_problem
from crucible.tasks.taskfs import read_task_text

TASK_TOML = "task.toml"

_TOML_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")


def check_config(task_dir: Path, check: TaskCheck) -> TaskConfig | None:
    toml_path = task_dir / TASK_TOML
    text = read_task_text(task_dir, TASK_TOML, check, missing="task.toml is missing")
    if text is None:
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
    except RecursionError as exc:
        check.problems.append(Problem(path=toml_path, message=parse_refused(exc)))
        return None
    if (why := shape_problem(raw)) is not None:
        check.problems.append(Problem(path=toml_path, message=why))
        return None

    lines = _TomlLines(text)

    def problem(loc: tuple[str, ...], message: str, severity: Severity = "error") -> None:
        check.problems.append(
            Problem(path=toml_path, line=lines.find(loc), message=message, severity=severity)
        )

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

    for key in _unknown_keys(config, ()):
        problem(tuple(map(str, key)), f"unknown key {_dotted(key)!r} (ignored)", "warning")

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


def _check_deprecated(raw: dict[str, Any], problem: Report) -> None:
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


def _unknown_keys(
    model: BaseModel, where: tuple[str | int, ...]
) -> Iterator[tuple[str | int, ...]]:
    """Every key no model declares, at any depth ([[steps]], [verifier.environment], ...)."""
    for key in model.model_extra or {}:
        yield (*where, key)
    for name in type(model).model_fields:
        value = getattr(model, name)
        items = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for index, item in items:
            if isinstance(item, BaseModel):
                yield from _unknown_keys(item, (*where, name, *(() if index is None else (index,))))


def field_line(text: str, loc: tuple[str, ...]) -> int | None:
    """The line of task.toml (its `text`) that sets `loc`, or of its nearest table."""
    return _TomlLines(text).find(loc)


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
