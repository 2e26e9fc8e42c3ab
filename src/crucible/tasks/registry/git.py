"""git, run on repositories nobody vetted: nothing of theirs may run on the host.

A fresh checkout holds no hooks (`init --template=` copies none) and each command is
run with `core.hooksPath=/dev/null`, so neither a hook the operator's own git set up
nor one planted in the checkout runs. System config is not read (GIT_CONFIG_NOSYSTEM);
the operator's global config is, for credentials and LFS. The transports are only those
the caller allows (GIT_ALLOW_PROTOCOL also holds for redirects and submodules), submodules
are never fetched, fsmonitor is off, and git is always pointed at the checkout's own
`.git`, never left to discover a repository (a bare one a repo committed, say) from a
working directory. The URL always follows `--`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from crucible.tasks.registry.errors import DatasetError

# Environment a caller may have set that changes which repository or config git uses.
_KEEP_GIT_ENV = frozenset(
    {"GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSH_VARIANT", "GIT_ASKPASS", "GIT_CONFIG_GLOBAL"}
)
_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
    "safe.bareRepository=explicit",
    "advice.detachedHead=false",
    "init.defaultBranch=main",
)
FETCH_TIMEOUT = 3600.0
SHORT_TIMEOUT = 120.0


def git_binary() -> str:
    found = shutil.which("git")
    if found is None:
        raise DatasetError("git is not installed: datasets are fetched with git",
                           hint="install git (e.g. apt-get install git)")  # fmt: skip
    return os.path.realpath(found)


def git_env(protocols: Iterable[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _KEEP_GIT_ENV}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_ALLOW_PROTOCOL=":".join(sorted(protocols)),
    )
    return env


def run_git(
    args: Sequence[str],
    *,
    repo: Path | None,
    protocols: Iterable[str],
    what: str,
    timeout: float = SHORT_TIMEOUT,
) -> str:
    """Run `git args` on the checkout at `repo` (or none); its stdout, or DatasetError."""
    cmd = [git_binary()]
    for item in _CONFIG:
        cmd += ["-c", item]
    if repo is not None:
        cmd += [f"--git-dir={repo / '.git'}", f"--work-tree={repo}"]
    cmd += list(args)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                              env=git_env(protocols), timeout=timeout, stdin=subprocess.DEVNULL,
                              cwd=repo if repo is not None else "/")  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise DatasetError(f"{what}: git did not finish in {timeout:.0f} s") from exc
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
        raise DatasetError(f"{what}: git {args[0]} failed (exit {proc.returncode}): {tail}")
    return proc.stdout


def resolve_head(url: str, protocols: Iterable[str]) -> str:
    """The commit the default branch of `url` points at now."""
    out = run_git(["ls-remote", "--", url, "HEAD"], repo=None, protocols=protocols,
                  what=f"resolving HEAD of {url}")  # fmt: skip
    for line in out.splitlines():
        sha, _, ref = line.partition("\t")
        if ref == "HEAD" and sha:
            return sha.strip().lower()
    raise DatasetError(f"resolving HEAD of {url}: the repository has no HEAD")


def new_checkout(
    dest: Path, url: str, commit: str, paths: Sequence[str], protocols: Iterable[str]
) -> None:
    """Fetch `commit` of `url` (one commit deep, blobs of `paths` only) into a new `dest`."""
    protocols = list(protocols)
    what = f"fetching {url} at {commit}"
    run_git(
        ["init", "-q", "--template=", "--", str(dest)], repo=None, protocols=protocols, what=what
    )
    run_git(["remote", "add", "--", "origin", url], repo=dest, protocols=protocols, what=what)
    run_git(["fetch", "-q", "--depth=1", "--filter=blob:none", "--no-tags",
             "--no-recurse-submodules", "origin", commit],
            repo=dest, protocols=protocols, what=what, timeout=FETCH_TIMEOUT)  # fmt: skip
    got = run_git(["rev-parse", "--verify", "FETCH_HEAD^{commit}"], repo=dest,
                  protocols=protocols, what=what).strip().lower()  # fmt: skip
    if got != commit:
        raise DatasetError(f"{what}: the server sent commit {got}, not {commit}")
    run_git(["sparse-checkout", "set", "--cone", "--", *paths], repo=dest, protocols=protocols,
            what=what, timeout=FETCH_TIMEOUT)  # fmt: skip
    run_git(["checkout", "-q", "--no-recurse-submodules", commit], repo=dest,
            protocols=protocols, what=what, timeout=FETCH_TIMEOUT)  # fmt: skip


def add_paths(dest: Path, paths: Sequence[str], protocols: Iterable[str], what: str) -> None:
    """Widen an existing checkout to `paths` as well."""
    run_git(["sparse-checkout", "add", "--", *paths], repo=dest, protocols=protocols,
            what=what, timeout=FETCH_TIMEOUT)  # fmt: skip
