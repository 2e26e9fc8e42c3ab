"""Attack tests: a task file whose parsed shape takes the host down (tasks/shape.py).

A 1 KB compose file of YAML anchors, each a list of ten of the one before, expands to
millions of values: crucible walked each (interpolating every string) and `tasks check`
ran for minutes and gigabytes (10^7 values: over a minute and 1.4 GB; one more level, 10x
that). An anchor that holds itself, or a task.toml nested deeper than Python's stack,
raised RecursionError out of `tasks check`: one hostile task in a dataset stopped the check
of every other. Each is now an invalid task, named, beside an honest one that stays valid.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crucible.cli.main import app

runner = CliRunner()


def task(root: Path, *, toml_tail: str = "", compose: str | None = None) -> Path:
    root.mkdir(parents=True)
    (root / "task.toml").write_text(
        'schema_version = "1.1"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n'
        '[environment]\nnetwork_mode = "no-network"\n' + toml_tail
    )
    (root / "instruction.md").write_text("Make /app/ok.\n")
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (root / "environment").mkdir()
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    if compose is not None:
        (root / "environment" / "docker-compose.yaml").write_text(compose)
    return root


def alias_bomb(levels: int) -> str:
    lines = ['x-a0: &a0 ["${FOO:-' + "x" * 16 + '}", b, c, d, e, f, g, h, i, j]']
    lines += [f"x-a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + f"\nservices:\n  main:\n    x-bomb: *a{levels}\n"


HOSTILE = {
    # 10^6 strings from 700 bytes (before: walked and interpolated, one by one)
    "alias-bomb": {"compose": alias_bomb(5)},
    # an anchor inside itself (before: RecursionError out of tasks check)
    "alias-loop": {"compose": "services:\n  main:\n    x-r: &r [*r]\n"},
    # a compose file nested past the stack (before: RecursionError)
    "deep-yaml": {"compose": "services:\n  main:\n    x-d: " + "[" * 5000 + "]" * 5000 + "\n"},
    # a task.toml nested past the stack (before: RecursionError)
    "deep-toml": {"toml_tail": "[metadata]\nx = " + "[" * 5000 + "]" * 5000 + "\n"},
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_task_file_that_explodes_when_parsed_is_invalid_and_the_rest_are_checked(
    tmp_path: Path, name: str
) -> None:
    data = tmp_path / "data"
    task(data / "honest", compose="services:\n  main:\n    x-ok: &ok [a]\n    x-b: *ok\n")
    task(data / name, **HOSTILE[name])  # type: ignore[arg-type]
    res = runner.invoke(app, ["tasks", "check", str(data), "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    report = json.loads(res.stdout)
    by_name = {t["name"]: t for t in report["tasks"]}
    assert by_name["honest"]["valid"], by_name["honest"]
    assert not by_name[name]["valid"]
    said = " ".join(p["message"] for p in by_name[name]["problems"])
    assert "nested" in said or "values" in said, said


def test_a_huge_sparse_file_is_refused_before_it_is_hashed(tmp_path: Path) -> None:
    # 1 TB that takes no disk and no time to make: hashing it (the task's digest) took
    # hours, and the docker provider would have sent it to the engine in full.
    data = tmp_path / "data"
    task(data / "honest")
    hostile = task(data / "sparse")
    with (hostile / "environment" / "blob.bin").open("wb") as fh:
        fh.truncate(1 << 40)
    res = runner.invoke(app, ["tasks", "check", str(data), "--json"])
    by_name = {t["name"]: t for t in json.loads(res.stdout)["tasks"]}
    assert by_name["honest"]["valid"] and not by_name["sparse"]["valid"]
    said = " ".join(p["message"] for p in by_name["sparse"]["problems"])
    assert "bytes" in said, said


def test_a_task_of_too_many_files_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crucible.tasks import taskfs

    monkeypatch.setattr(taskfs, "MAX_TASK_ENTRIES", 500)  # the real cap is 200,000 entries
    data = tmp_path / "data"
    task(data / "honest")
    many = task(data / "many") / "environment" / "files"
    many.mkdir()
    for i in range(600):
        (many / str(i)).write_bytes(b"")
    res = runner.invoke(app, ["tasks", "check", str(data), "--json"])
    by_name = {t["name"]: t for t in json.loads(res.stdout)["tasks"]}
    assert by_name["honest"]["valid"] and not by_name["many"]["valid"]
    said = " ".join(p["message"] for p in by_name["many"]["problems"])
    assert "more than 500 files" in said, said
