"""A real `crucible serve` for the adapter tests: the CLI in a subprocess on a free
loopback port, local (bubblewrap) sandboxes, a jobs folder of the test module's own.

It serves examples/tasks/hello-file (a right file scores 1, a wrong one 0) and
`broken-build`, hello-file with a Dockerfile step that fails: its grades are
`unscorable` (task_invalid), the status every adapter must map its trainer's way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from crucible.trainers import common

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "examples" / "tasks" / "hello-file"
RIGHT = "Hello, crucible!\n"
RIGHT_FILES = json.dumps({"/app/hello.txt": RIGHT})
WRONG_FILES = json.dumps({"/app/hello.txt": "Goodbye\n"})


@dataclass
class Service:
    url: str
    token: str
    job_dir: Path
    tasks: dict[str, Path]

    def trials(self) -> list[Path]:
        """The grades' trial folders so far (one per sandbox started)."""
        return sorted(p for p in self.job_dir.glob("grade__*") if p.is_dir())


def broken_task(parent: Path) -> Path:
    task = parent / "broken-build"
    shutil.copytree(HELLO, task)
    (task / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nWORKDIR /app\nRUN exit 3\n"
    )
    return task


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, buildah: None) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("serve")
    tasks = {"hello-file": HELLO, "broken-build": broken_task(root)}
    jobs = root / "jobs"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for name in ("CRUCIBLE_SERVE_URL", "CRUCIBLE_SERVE_TOKEN", "CRUCIBLE_SERVE_TOKEN_FILE"):
        env.pop(name, None)
    cmd = [sys.executable, "-m", "crucible.cli.main", "serve", *map(str, tasks.values()),
           "--env", "local", "--port", "0", "--jobs-dir", str(jobs), "--max-retries", "0",
           "--json"]  # fmt: skip
    with (root / "serve.log").open("w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the ready line: the service is bound
        if not line:
            proc.wait()
            pytest.fail(f"crucible serve did not start:\n{(root / 'serve.log').read_text()}")
        ready = json.loads(line)
        yield Service(ready["url"], ready["token"], jobs / ready["job_id"], tasks)
    finally:
        proc.terminate()
        proc.wait(timeout=120)


@pytest.fixture
def served(service: Service, monkeypatch: pytest.MonkeyPatch) -> Service:
    """The service named by CRUCIBLE_SERVE_URL/TOKEN, as a trainer's workers see it."""
    monkeypatch.setenv("CRUCIBLE_SERVE_URL", service.url)
    monkeypatch.setenv("CRUCIBLE_SERVE_TOKEN", service.token)
    monkeypatch.delenv("CRUCIBLE_SERVE_TOKEN_FILE", raising=False)
    return service


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    """Each test's adapters make their own clients (an async one lives on its loop)."""
    yield
    for client in common._sync.values():
        client.close()
    common._sync.clear()
