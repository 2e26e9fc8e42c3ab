"""Diffs made by the real tools in a test's folder: `git diff` between two trees (a
commit and an index) and `diff -ruN a b`, for the patch parser's and the submission
agent's tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

Tree = dict[str, str]
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@e",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@e",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
    "PATH": os.environ["PATH"],
}


def write_tree(root: Path, tree: Tree) -> None:
    for rel, text in tree.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(text.encode())


def git(repo: Path, *args: str) -> str:
    res = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, env=GIT_ENV, check=True
    )
    return res.stdout.decode()


def git_diff(tmp_path: Path, before: Tree, after: Tree, *flags: str, prep: str = "") -> str:
    """`git diff --cached` from a commit of `before` to the index of `after`."""
    repo = tmp_path / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    write_tree(repo, before)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "before")
    for rel in before:
        if rel not in after:
            (repo / rel).unlink()
    write_tree(repo, after)
    if prep:
        subprocess.run(prep, shell=True, cwd=repo, check=True)
    git(repo, "add", "-A")
    return git(repo, "diff", "--cached", *flags)


def plain_diff(tmp_path: Path, before: Tree, after: Tree, *flags: str) -> str:
    """`diff -ruN a b` (exit 1: they differ)."""
    write_tree(tmp_path / "a", before)
    write_tree(tmp_path / "b", after)
    (tmp_path / "a").mkdir(exist_ok=True)
    (tmp_path / "b").mkdir(exist_ok=True)
    res = subprocess.run(
        ["diff", "-ruN", *flags, "a", "b"], cwd=tmp_path, capture_output=True, check=False
    )
    assert res.returncode == 1, res.stderr
    return res.stdout.decode()


LONG = "".join(f"line {n}\n" for n in range(1, 60))
