"""The io stage's cases (command-line and web), how they are loaded from the task, and
the per-process cache of the reference's outputs.

A command-line case: `{"args": [...], "stdin": "...", "inputs": {"fn": N}}` (`inputs`:
function `fn` must have received at least N inputs in a container). A web case:
`{"endpoint": "lookup", "requests": [{"method": "GET", "path": "/?key=a"},
{"method": "POST", "path": "/", "json": {...}}], "inputs": {...}}`.

The reference's output depends on the task (its digest), the reference file, the case,
the seed and the mode, never on the attempt: it is computed once per process and key.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from crucible.errors import TaskInvalid
from crucible.tasks.taskfs import TaskFileRefused, task_entry

MAX_CASES = 200
MAX_REQUESTS = 100
CACHE_SIZE = 2048


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    path: str = Field(pattern=r"^/", max_length=2000)
    json_body: Any = Field(default=None, alias="json")
    headers: dict[str, str] = Field(default_factory=dict)

    def wire(self) -> dict[str, Any]:
        """As the driver sends it (`json` only when the case has one)."""
        out: dict[str, Any] = {"method": self.method, "path": self.path, "headers": self.headers}
        if "json_body" in self.model_fields_set:
            out["json"] = self.json_body
        return out


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid")

    args: list[str] = Field(default_factory=list)
    stdin: str = ""
    inputs: dict[str, int] = Field(default_factory=dict)  # function -> least remote inputs
    endpoint: str | None = None  # web mode
    requests: list[Request] = Field(default_factory=list, max_length=MAX_REQUESTS)

    def key(self) -> str:
        return self.model_dump_json(by_alias=True)


def task_file(task_dir: Path, rel: str, what: str) -> Path:
    """`rel` inside the task folder (no escaping it, no link), or TaskInvalid."""
    root = task_dir.resolve()
    path = (root / rel).resolve()
    if root not in path.parents or not path.is_file():
        raise TaskInvalid(f"io stage: {what} {rel!r} is not a file inside the task folder")
    try:  # as every task file: no link on the way, even one that stays inside (tasks/taskfs.py)
        kind = task_entry(root, rel)
    except TaskFileRefused:
        kind = "outside"
    if kind != "file":
        raise TaskInvalid(
            f"io stage: {what} {rel!r} is not a plain file of the task folder "
            "(task files are never read through a link, nor named with '..')"
        )
    return path


def load_cases(task_dir: Path, inline: list[Case], cases_file: str | None, web: bool) -> list[Case]:
    cases = list(inline)
    if cases_file:
        path = task_file(task_dir, cases_file, "cases_file")
        try:
            raw = json.loads(path.read_text())
            cases += [Case.model_validate(c) for c in raw]
        except (ValueError, TypeError) as exc:
            raise TaskInvalid(f"io stage: {cases_file}: {exc}"[:500]) from exc
    if not cases or len(cases) > MAX_CASES:
        raise TaskInvalid(f"io stage: 1 to {MAX_CASES} cases are needed, got {len(cases)}")
    for i, c in enumerate(cases):
        if web and (not c.endpoint or not c.requests):
            raise TaskInvalid(f"io stage: web case {i} needs an endpoint and requests")
        if not web and (c.endpoint or c.requests):
            raise TaskInvalid(f"io stage: case {i} has requests, but the stage's mode is cli")
    return cases


class ReferenceCache:
    """Reference stdout per (task digest, reference, case, seed, mode), in this process."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._data: OrderedDict[tuple[str, ...], str] = OrderedDict()

    def get(self, key: tuple[str, ...]) -> str | None:
        if key in self._data:
            self._data.move_to_end(key)
            return self._data[key]
        return None

    def put(self, key: tuple[str, ...], stdout: str) -> None:
        self._data[key] = stdout
        self._data.move_to_end(key)
        while len(self._data) > self.size:
            self._data.popitem(last=False)

    def clear(self) -> None:
        self._data.clear()


REFERENCE_OUTPUTS = ReferenceCache()
