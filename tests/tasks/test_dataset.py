"""Dataset discovery: which task directories, in which order, and what is invalid."""

from __future__ import annotations

from pathlib import Path

from task_factory import GOOD_TOML, MakeTask

from crucible.tasks.dataset import check_tasks, discover_tasks, find_task_dirs, selected


def names(tasks: list) -> list[str]:
    return [t.name for t in tasks]


def test_folder_is_searched_recursively_in_name_order(make_task: MakeTask, tmp_path: Path) -> None:
    root = tmp_path / "suite"
    make_task("zeta", parent=root)
    make_task("alpha", parent=root / "group" / "deep")
    make_task("mid", parent=root / "group")
    make_task("hidden", parent=root / ".cache")  # hidden folders are not searched
    (root / "notes").mkdir()
    (root / "notes" / "README.md").write_text("not a task")

    tasks, invalid = discover_tasks([root])
    assert names(tasks) == ["alpha", "mid", "zeta"]
    assert invalid == []
    # Deterministic: the same answer twice.
    assert names(discover_tasks([root])[0]) == names(tasks)


def test_tasks_do_not_nest(make_task: MakeTask, tmp_path: Path) -> None:
    outer = make_task("outer", parent=tmp_path / "s")
    make_task("inner", parent=outer / "environment")  # files of a task, not a task
    tasks, invalid = discover_tasks([tmp_path / "s"])
    assert names(tasks) == ["outer"] and invalid == []


def test_a_task_path_is_a_task_and_is_not_listed_twice(make_task: MakeTask, tmp_path: Path) -> None:
    a = make_task("a", parent=tmp_path / "s")
    make_task("b", parent=tmp_path / "s")
    tasks, invalid = discover_tasks([a, tmp_path / "s", a])
    assert names(tasks) == ["a", "b"] and invalid == []


def test_invalid_tasks_are_returned_not_skipped(make_task: MakeTask, tmp_path: Path) -> None:
    make_task("good", parent=tmp_path / "s")
    bad = make_task("bad", parent=tmp_path / "s", toml="[agent\n")
    tasks, invalid = discover_tasks([tmp_path / "s"])
    assert names(tasks) == ["good"]
    assert len(invalid) == 1
    path, problems = invalid[0]
    assert path == bad
    assert problems and problems[0].line == 1 and "invalid TOML" in problems[0].message


def test_missing_and_empty_paths_are_reported(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    tasks, invalid = discover_tasks([tmp_path / "nope", tmp_path / "empty"])
    assert tasks == []
    messages = {path.name: problems[0].message for path, problems in invalid}
    assert messages == {
        "nope": "no such file or directory",
        "empty": "no task directories (holding task.toml) below",
    }
    dirs, empty = find_task_dirs([tmp_path / "empty"])
    assert dirs == [] and len(empty) == 1


def test_duplicate_names_are_an_error(make_task: MakeTask, tmp_path: Path) -> None:
    toml = '[task]\nname = "org/same"\n' + GOOD_TOML.split("\n", 1)[1]
    one = make_task("one", parent=tmp_path / "s", toml=toml)
    two = make_task("two", parent=tmp_path / "s", toml=toml)
    make_task("other", parent=tmp_path / "s")
    tasks, invalid = discover_tasks([tmp_path / "s"])
    assert names(tasks) == ["other"]
    assert sorted(path for path, _ in invalid) == [one, two]
    for path, problems in invalid:
        other = two if path == one else one
        assert any(
            "duplicate task name 'org/same'" in p.message and str(other) in p.message
            for p in problems
        )


def test_include_and_exclude_globs(make_task: MakeTask, tmp_path: Path) -> None:
    for name in ("web-a", "web-b", "cli-a", "cli-b"):
        make_task(name, parent=tmp_path / "s")
    s = tmp_path / "s"
    assert names(discover_tasks([s], include=["web-*"])[0]) == ["web-a", "web-b"]
    assert names(discover_tasks([s], exclude=["*-b"])[0]) == ["cli-a", "web-a"]
    assert names(discover_tasks([s], include=["web-*", "cli-a"], exclude=["web-b"])[0]) == [
        "cli-a",
        "web-a",
    ]
    assert discover_tasks([s], include=["nothing*"]) == ([], [])


def test_filters_also_apply_to_invalid_tasks(make_task: MakeTask, tmp_path: Path) -> None:
    make_task("good", parent=tmp_path / "s")
    make_task("broken", parent=tmp_path / "s", toml="x = \n")
    tasks, invalid = discover_tasks([tmp_path / "s"], exclude=["broken"])
    assert names(tasks) == ["good"] and invalid == []


def test_check_tasks_keeps_warnings_and_orders_valid_first(
    make_task: MakeTask, tmp_path: Path
) -> None:
    make_task("b-warn", parent=tmp_path / "s", files={"solution/solve.sh": None})
    make_task("a-bad", parent=tmp_path / "s", files={"tests/test.sh": None})
    make_task("c-ok", parent=tmp_path / "s")
    checks = check_tasks([tmp_path / "s"])
    assert [(c.name, c.valid) for c in checks] == [
        ("b-warn", True),
        ("c-ok", True),
        ("a-bad", False),
    ]
    assert [p.severity for p in checks[0].problems] == ["warning"]


def test_selected() -> None:
    assert selected("x")
    assert selected("web-1", ["web-*"]) and not selected("cli-1", ["web-*"])
    assert not selected("web-1", [], ["web-?"])
    assert not selected("Web-1", ["web-*"])  # case-sensitive, like task names
