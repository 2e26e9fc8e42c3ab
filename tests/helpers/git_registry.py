"""A dataset registry and the git repository its tasks live in, made in a test's tmp_path.

The repository is real (git init, scaffolded tasks, a commit); the registry is a JSON
file in Harbor's format naming tasks in it by path and commit. Nothing leaves the machine.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from crucible.tasks.scaffold import scaffold_task

_IDENT = ("-c", "user.email=test@example.invalid", "-c", "user.name=test",
          "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main")  # fmt: skip


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", *_IDENT, "-C", str(repo), *args],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return proc.stdout.strip()


def commit_all(repo: Path, message: str = "tasks") -> str:
    """Commit everything in `repo` (made a repository if it is not one); the commit id."""
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def task_repo(repo: Path, names: list[str], under: str = "tasks") -> str:
    """A repository holding scaffolded tasks `under/<name>` (their oracles pass); the commit."""
    for name in names:
        scaffold_task(name, repo / under)
    return commit_all(repo)


def entry(name: str, git_url: str | None, commit: str | None, path: str) -> dict[str, Any]:
    return {"name": name, "git_url": git_url, "git_commit_id": commit, "path": path}


def dataset(
    name: str, version: str, tasks: list[dict[str, Any]], description: str = ""
) -> dict[str, Any]:
    return {
        "name": name,
        "version": version,
        "description": description,
        "tasks": tasks,
        "metrics": [],
    }


def write_registry(path: Path, datasets: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(datasets, indent=2))
    return path
