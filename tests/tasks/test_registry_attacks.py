"""Attacks through a dataset registry and the repositories it names: both are untrusted.

A registry entry that climbs out of the repository, a task folder that is a link out of
the checkout (or lies under one), and hooks that would run on checkout: none gets the
host to read or run anything of theirs.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tests.helpers.git_registry import commit_all, dataset, entry, task_repo, write_registry

from crucible.tasks.dataset import discover_tasks
from crucible.tasks.registry.errors import DatasetError
from crucible.tasks.registry.pull import checkout_dir, pull_dataset
from crucible.tasks.registry.source import load_registry
from crucible.tasks.scaffold import scaffold_task


def test_a_task_path_that_climbs_out_of_the_repository_is_refused_before_any_fetch(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    sha = task_repo(repo, ["alpha"])
    reg_file = write_registry(tmp_path / "registry.json", [
        dataset("evil", "1", [entry("etc", str(repo), sha, "../../etc")])])  # fmt: skip
    with pytest.raises(DatasetError) as err:
        load_registry(reg_file, tmp_path / "cache")
    assert "datasets[0] (evil@1).tasks[0].path" in err.value.message
    assert "climbs out of the repository" in err.value.message
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("through", ["folder", "parent"])
def test_a_task_folder_that_is_a_link_out_of_the_repository_is_refused(
    tmp_path: Path, through: str
) -> None:
    # A valid task outside the repository, which the loader would read through a link.
    outside = tmp_path / "outside"
    scaffold_task("stolen", outside)
    repo = tmp_path / "repo"
    task_repo(repo, ["alpha"])
    if through == "folder":
        (repo / "tasks" / "evil").symlink_to(outside / "stolen")
        path = "tasks/evil"
    else:
        (repo / "linked").symlink_to(outside)
        path = "linked/stolen"
    sha = commit_all(repo, "link")
    reg_file = write_registry(tmp_path / "registry.json", [
        dataset("evil", "1", [entry("stolen", str(repo), sha, path)])])  # fmt: skip
    cache = tmp_path / "cache"
    reg = load_registry(reg_file, cache)
    with pytest.raises(DatasetError, match="goes through a link") as err:
        pull_dataset(reg, reg.find("evil@1"), cache)
    assert "task 'stolen'" in err.value.message
    # The attack is real: the checkout holds the link, and the loader follows a task root.
    checked_out = checkout_dir(cache, str(repo), sha) / path
    assert checked_out.is_symlink() or checked_out.parent.is_symlink()
    tasks, _ = discover_tasks([checked_out])
    assert [t.name for t in tasks] == ["stolen"]


def _canary_hook(path: Path, canary: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho ran >> '{canary}'\n")
    path.chmod(0o755)


def test_no_hook_runs_on_a_pull(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hooks of the repository (git never copies them, so a naive copy of a local
    repository would be the way in) and hooks the operator's own git would install or
    point at (a template, core.hooksPath, an fsmonitor command): none runs."""
    canary = tmp_path / "canary"
    repo = tmp_path / "repo"
    task_repo(repo, ["alpha", "beta"])
    _canary_hook(repo / ".git" / "hooks" / "post-checkout", canary)
    hooks = tmp_path / "operator-hooks"
    for name in ("post-checkout", "reference-transaction", "post-index-change", "fsmonitor"):
        _canary_hook(hooks / name, canary)
    _canary_hook(tmp_path / "template" / "hooks" / "post-checkout", canary)
    config = tmp_path / "gitconfig"
    config.write_text(f"[core]\n\thooksPath = {hooks}\n\tfsmonitor = {hooks / 'fsmonitor'}\n"
                      f"[init]\n\ttemplateDir = {tmp_path / 'template'}\n")  # fmt: skip
    sha = commit_all(repo, "hooked")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    assert not canary.exists()

    # The set-up bites: a plain clone with this config runs the hooks.
    subprocess.run(["git", "clone", "-q", str(repo), str(tmp_path / "plain")], check=True,
                   env=os.environ | {"GIT_CONFIG_GLOBAL": str(config)})  # fmt: skip
    assert canary.exists()
    canary.unlink()

    reg_file = write_registry(tmp_path / "registry.json", [
        dataset("one", "1", [entry("alpha", str(repo), sha, "tasks/alpha")]),
        dataset("two", "1", [entry("beta", str(repo), None, "tasks/beta")]),
    ])  # fmt: skip
    cache = tmp_path / "cache"
    reg = load_registry(reg_file, cache)
    [alpha] = pull_dataset(reg, reg.find("one@1"), cache)
    [beta] = pull_dataset(reg, reg.find("two@1"), cache)  # widens the same checkout
    assert alpha.path.parent == beta.path.parent and (beta.path / "task.toml").is_file()
    assert not canary.exists(), canary.read_text()
    assert not (checkout_dir(cache, str(repo), sha) / ".git" / "hooks").exists()
