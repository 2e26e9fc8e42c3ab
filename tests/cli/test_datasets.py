"""Datasets by name through the real CLI: `crucible run -d NAME@VERSION` runs the tasks of a
local test registry end to end (oracle agent, local provider), `datasets list` and `pull`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.git_registry import dataset, entry, task_repo, write_registry

REPO = Path(__file__).resolve().parents[2]


def crucible(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crucible.cli.main", *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env=os.environ | (env or {}))  # fmt: skip


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    repo = tmp_path / "bench"
    sha = task_repo(repo, ["alpha", "beta"])
    return write_registry(tmp_path / "registry.json", [
        dataset("demo", "1.0", [entry("alpha", str(repo), sha, "tasks/alpha"),
                                entry("beta", str(repo), "HEAD", "tasks/beta")],
                description="Two greetings\nand more text"),
        dataset("demo", "0.9", [entry("alpha", str(repo), sha, "tasks/alpha")]),
        dataset("bad", "1", [entry("beta", str(repo), sha, "tasks/missing")]),
    ])  # fmt: skip


def test_run_a_dataset_by_name_end_to_end(tmp_path: Path, registry: Path) -> None:
    cache, jobs = tmp_path / "cache", tmp_path / "jobs"
    res = crucible("run", "-d", "demo@1.0", "--registry", str(registry), "--datasets-dir", str(cache),
                   "--jobs-dir", str(jobs), "--job-name", "by-name", "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["status"] == "completed" and summary["n_trials"] == 2
    assert summary["outcomes"] == {"graded": 2} and summary["mean_reward"] == 1.0
    for name in ("alpha", "beta"):
        result = json.loads((jobs / "by-name" / f"{name}__0" / "result.json").read_text())
        assert result["task_name"] == name and result["verifier_result"]["rewards"]["reward"] == 1.0
    assert list((cache / "git").glob("bench-*/*/tasks/alpha/task.toml"))

    # Again from the environment's registry and datasets folder, filtered, with a task path
    # beside it: the checkout is read as it is, nothing is fetched.
    env = {"CRUCIBLE_REGISTRY": str(registry), "CRUCIBLE_DATASETS_DIR": str(cache)}
    extra = tmp_path / "extra"
    task_repo(extra, ["gamma"])
    again = crucible("run", str(extra / "tasks" / "gamma"), "--dataset", "demo@1.0", "-i", "alpha",
                     "-i", "gamma", "-q", "--jobs-dir", str(jobs), "--job-name", "again", env=env)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "fetching" not in again.stderr and "alpha" in again.stdout and "gamma" in again.stdout
    assert "beta" not in again.stdout


def test_datasets_list_and_pull(tmp_path: Path, registry: Path) -> None:
    cache = tmp_path / "cache"
    listed = crucible("datasets", "list", "--registry", str(registry), "--json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert data["registry"] == str(registry)
    assert [(d["name"], d["version"], d["n_tasks"]) for d in data["datasets"]] == [
        ("bad", "1", 1), ("demo", "0.9", 1), ("demo", "1.0", 2)]  # fmt: skip
    table = crucible("datasets", "list", "--registry", str(registry))
    assert "demo@1.0" in table.stdout and "Two greetings" in table.stdout

    pulled = crucible("datasets", "pull", "demo@1.0", "demo@0.9", "--registry", str(registry),
                      "--datasets-dir", str(cache), "--json")  # fmt: skip
    assert pulled.returncode == 0, pulled.stderr
    out = json.loads(pulled.stdout)["datasets"]
    assert [d["dataset"] for d in out] == ["demo@1.0", "demo@0.9"]
    alpha, beta = out[0]["tasks"]
    assert alpha["git_commit_id"] == beta["git_commit_id"], "HEAD resolved to the pinned commit"
    assert Path(alpha["path"], "task.toml").is_file() and Path(beta["path"], "task.toml").is_file()
    assert out[1]["tasks"][0]["path"] == alpha["path"], "one checkout per repository and commit"
    plain = crucible(
        "datasets", "pull", "demo@1.0", "--registry", str(registry), "--datasets-dir", str(cache)
    )
    assert (
        plain.returncode == 0 and "fetching" not in plain.stderr and alpha["path"] in plain.stdout
    )


def test_errors_name_the_problem_and_exit_with_its_code(tmp_path: Path, registry: Path) -> None:
    common = ("--registry", str(registry), "--datasets-dir", str(tmp_path / "cache"), "--json")
    for args, code, says in [
        (("run", "-d", "nope@1", *common), 3, "not in the registry"),
        (("run", "-d", "demo", *common), 2, "versions 0.9, 1.0"),
        (("datasets", "pull", "bad@1", *common), 1, "'tasks/missing' does not exist"),
        (("datasets", "list", "--registry", str(tmp_path / "none.json"), "--json"), 3, "does not exist"),
        (("run", str(tmp_path), *common), 2, "name one with -d NAME@VERSION"),
    ]:  # fmt: skip
        res = crucible(*args)
        assert res.returncode == code, (args, res.stderr)
        err = json.loads(res.stderr.strip().splitlines()[-1])
        assert err["error"] in ("dataset", "usage") and says in err["message"], err
    evil = write_registry(
        tmp_path / "evil.json",
        [dataset("evil", "1", [entry("e", "https://h/r", None, "../../etc")])],
    )
    res = crucible("datasets", "list", "--registry", str(evil), "--json")
    assert res.returncode == 1
    assert "datasets[0] (evil@1).tasks[0].path" in json.loads(res.stderr)["message"]


def test_help_texts() -> None:
    run_help = crucible("run", "--help")
    assert "--dataset" in run_help.stdout and "--registry" in run_help.stdout
    assert "--datasets-dir" in run_help.stdout
    top = crucible("datasets", "--help")
    assert top.returncode == 0 and "list" in top.stdout and "pull" in top.stdout
    assert (
        "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json" in top.stdout
    )
    pull = crucible("datasets", "pull", "--help")
    assert "NAME@VERSION" in pull.stdout and "$CRUCIBLE_DATASETS_DIR" in pull.stdout
