"""Fixtures for the task tests: small task directories written on the fly."""

from __future__ import annotations

from pathlib import Path

import pytest
from task_factory import GOOD_TOML, MakeTask


@pytest.fixture
def make_task(tmp_path: Path) -> MakeTask:
    """make_task(name, toml=..., files={rel: text or None}) writes a task; None deletes a default file."""

    def make(
        name: str = "demo",
        toml: str | None = GOOD_TOML,
        files: dict[str, str | None] | None = None,
        parent: Path | None = None,
    ) -> Path:
        root = (parent or tmp_path) / name
        defaults: dict[str, str | None] = {
            "task.toml": toml,
            "instruction.md": "Write hello to /app/out.txt.\n",
            "environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
            "solution/solve.sh": "#!/bin/bash\necho hello > /app/out.txt\n",
            "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        }
        defaults.update(files or {})
        root.mkdir(parents=True, exist_ok=True)
        for rel, text in defaults.items():
            if text is None:
                continue
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return root

    return make
