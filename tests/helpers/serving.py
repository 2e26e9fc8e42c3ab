"""The grading service's tests' parts: tasks written into tmp_path, grade items, and
`Served` (what tests/serve/conftest.py's `serving` fixture yields: the URL and token, an
httpx client with the token, the service, and `creates`, the sandboxes the real
provider was asked to make, through a thin counting wrapper around its `create`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from crucible.sandboxes.base import Sandbox, SandboxSpec
from crucible.serve.server import Running
from crucible.serve.service import GradeService

# What the examples' hello-file checks: /app/hello.txt holding exactly this line.
HELLO = "Hello, crucible!\n"
HELLO_TEST = (
    "mkdir -p /logs/verifier\n"
    "if [ -f /app/hello.txt ] && printf 'Hello, crucible!\\n' | cmp -s - /app/hello.txt; then\n"
    "  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n"
)


def write_task(
    root: Path, name: str, *, test: str = HELLO_TEST, toml: str = "", network: str = "no-network"
) -> Path:
    """A task folder `root/name` like examples/tasks/hello-file, with `test` as its test."""
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "environment").mkdir()
    (d / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n\nWORKDIR /app\n")
    (d / "instruction.md").write_text("Write /app/hello.txt.\n")
    (d / "tests" / "test.sh").write_text("#!/usr/bin/env bash\n" + test)
    (d / "task.toml").write_text(
        'schema_version = "1.1"\n[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n'
        f'[environment]\ncpus = 1\nmemory_mb = 256\nnetwork_mode = "{network}"\n' + toml
    )
    return d


def hello_item(grade_id: str, content: str = HELLO, task: str = "hello") -> dict[str, Any]:
    return {"id": grade_id, "task": {"id": task},
            "submission": {"type": "files", "files": {"/app/hello.txt": content}}}  # fmt: skip


@dataclass
class Served:
    url: str
    token: str
    service: GradeService
    http: httpx.AsyncClient
    running: Running
    creates: list[SandboxSpec] = field(default_factory=list)

    async def grade(self, *items: dict[str, Any], wait_s: float = 120.0) -> httpx.Response:
        return await self.http.post("/v1/grade", json={"items": list(items), "wait_s": wait_s})


def count_creates(service: GradeService, creates: list[SandboxSpec]) -> None:
    provider = service.provider
    real = provider.create

    async def counting(spec: SandboxSpec) -> Sandbox:
        creates.append(spec)
        return await real(spec)

    provider.create = counting  # type: ignore[method-assign]


Serving = Callable[..., Any]
