"""Tasks graded on a text answer, written into a test's tmp_path: the verifier compares
the answer file (`[metadata] answer_path`, default /logs/agent/answer.txt) with the task's
`expected_answer`, stripped, and writes 1 or 0.

    root = answer_task(tmp_path / "tasks", "add", "What is 2 + 3?", "5")
"""

from __future__ import annotations

from pathlib import Path

ANSWER_PATH = "/logs/agent/answer.txt"


def answer_task(
    parent: Path,
    name: str,
    question: str,
    answer: str,
    *,
    category: str = "arithmetic",
    difficulty: str = "easy",
    tags: tuple[str, ...] = ("math",),
    extra_toml: str = "",
    test: str | None = None,
    dockerfile: str = "FROM debian:bookworm-slim\nWORKDIR /app\n",
) -> Path:
    """The task folder `parent/name`; `test` replaces its verifier (the body of test.sh)."""
    root = parent / name
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    tag_list = ", ".join(f'"{t}"' for t in tags)
    (root / "task.toml").write_text(
        'schema_version = "1.1"\n[metadata]\n'
        f'category = "{category}"\ndifficulty = "{difficulty}"\ntags = [{tag_list}]\n'
        f'expected_answer = "{answer}"\n{extra_toml}'
        "[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 30.0\n"
        '[environment]\ncpus = 1\nmemory_mb = 256\nstorage_mb = 512\nnetwork_mode = "no-network"\n'
    )
    (root / "instruction.md").write_text(f"{question}\nWrite only the answer.\n")
    (root / "environment" / "Dockerfile").write_text(dockerfile)
    if test is None:
        test = (
            f'got=$(tr -d "[:space:]" < {ANSWER_PATH} 2>/dev/null || true)\n'
            f'if [ "$got" = "{answer}" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
        )
    (root / "tests" / "test.sh").write_text("#!/usr/bin/env bash\nmkdir -p /logs/verifier\n" + test)
    (root / "solution" / "solve.sh").write_text(
        f"#!/usr/bin/env bash\nmkdir -p /logs/agent\necho {answer} > {ANSWER_PATH}\n"
    )
    return root
