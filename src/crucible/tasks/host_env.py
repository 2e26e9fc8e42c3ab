"""`${VAR}` and `${VAR:-default}` in a task's env tables, resolved from the allowed host.

Harbor's rule: a value that is wholly one template takes the host variable's
value, else the default; with neither, the task cannot run (crucible names the
variable, the table and the line, as a task_invalid problem). Any other value is
literal. Unlike Harbor, only the variables the operator allows are read
(tasks/hostvars.py): a name outside the allow-list takes its default, the host
never being read, and without a default the task is task_invalid.
The tables: [environment], [verifier], [solution], a [verifier.environment]
and each step's [steps.verifier] (Harbor 0.25's [agent] has no env table).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crucible.tasks.hostvars import HostScope
from crucible.tasks.models import TaskConfig
from crucible.tasks.task_toml import field_line

_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")

Unresolved = tuple[tuple[str, ...], str]  # (where in task.toml, message)


class _Tables:
    """Resolves each table of one task.toml against one task's host scope."""

    def __init__(self, scope: HostScope, toml_path: Path, text: str) -> None:
        self.scope, self.path, self.text = scope, toml_path, text
        self.missing: list[Unresolved] = []

    def env(self, table: Mapping[str, str], where: tuple[str, ...]) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, value in table.items():
            match = _TEMPLATE.fullmatch(value)
            if match is None:
                out[key] = value
                continue
            name, default = match.group(1), match.group(2)
            loc = (*where, key)
            host = self.scope.read(
                name,
                self.path,
                ".".join(loc),
                default=default is not None,
                line=field_line(self.text, loc),
            )
            if host is not None:
                out[key] = host
            elif default is not None:
                out[key] = default
            else:
                why = self.scope.why_not(name)
                self.missing.append((loc, f"{'.'.join(loc)} = {value!r}: {why}"))
        return out

    def section(self, section: Any, where: tuple[str, ...]) -> Any:
        return section.model_copy(update={"env": self.env(section.env, where)})

    def verifier(self, section: Any, where: tuple[str, ...]) -> Any:
        resolved = self.section(section, (*where, "env"))
        if section.environment is not None:
            env = self.section(section.environment, (*where, "environment", "env"))
            resolved = resolved.model_copy(update={"environment": env})
        return resolved


def resolve_task_env(
    config: TaskConfig, scope: HostScope, toml_path: Path, text: str
) -> tuple[TaskConfig, list[Unresolved]]:
    """`config` with every env table resolved, and what could not be (`text`: task.toml's)."""
    tables = _Tables(scope, toml_path, text)
    update: dict[str, Any] = {
        "environment": tables.section(config.environment, ("environment", "env")),
        "solution": tables.section(config.solution, ("solution", "env")),
        "verifier": tables.verifier(config.verifier, ("verifier",)),
    }
    if config.steps is not None:
        update["steps"] = [
            step.model_copy(
                update={"verifier": tables.verifier(step.verifier, ("steps", str(i), "verifier"))}
            )
            for i, step in enumerate(config.steps)
        ]
    return config.model_copy(update=update), tables.missing
