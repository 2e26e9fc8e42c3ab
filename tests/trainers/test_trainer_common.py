"""What the adapters share (crucible.trainers.common): which task a row names, the
submission a completion becomes, and the ids that make retries free."""

from __future__ import annotations

import json

import pytest

from crucible.records.serve import GradeItem, GradeResult, GradeStatus, TaskRef
from crucible.trainers.common import find_task, grade_id, prepare, to_submission


@pytest.mark.parametrize(
    "sources",
    [
        ({"task_id": "t", "task_hash": "h"},),
        ({"metadata": {"task_id": "t", "task_hash": "h"}},),
        ({"crucible": json.dumps({"task": {"id": "t", "hash": "h"}})},),
        (json.dumps({"task_id": "t", "task_hash": "h"}),),
        (None, {"index": 3}, {"task_id": "t", "task_hash": "h"}, "not-this"),
    ],
)
def test_find_task_reads_exported_rows(sources: tuple[object, ...]) -> None:
    assert find_task(*sources) == TaskRef(id="t", hash="h")


def test_a_bare_label_is_a_task_name_and_nothing_is_an_error() -> None:
    assert find_task({"index": 1}, " hello-file ") == TaskRef(id="hello-file")
    with pytest.raises(ValueError, match="no crucible task named"):
        find_task(None, {"index": 1}, "{not json", "")


def test_submission_modes() -> None:
    assert to_submission("42").model_dump() == {"type": "text", "text": "42"}
    files = to_submission('Here:\n```json\n{"/app/a.txt": "line\none"}\n```', "files")
    assert files.model_dump() == {"type": "files", "files": {"/app/a.txt": "line\none"}}
    diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    assert to_submission(f"I changed it:\n```diff\n{diff}```\nDone.", "patch").model_dump() == {
        "type": "patch", "patch": diff}  # fmt: skip
    for bad in ('{"relative/path": "x"}', '["/app/a"]', "{}", '{"/app/../etc/x": "x"}'):
        with pytest.raises(ValueError):
            to_submission(bad, "files")
    with pytest.raises(ValueError):
        to_submission("```diff\n```", "patch")


def test_ids_are_stable_and_distinct() -> None:
    task = TaskRef(id="t", hash="h")
    a, b = to_submission("x"), to_submission("y")
    assert grade_id(task, a) == grade_id(TaskRef(id="t", hash="h"), to_submission("x"))
    assert len({grade_id(task, a), grade_id(task, b), grade_id(task, a, "step-2"),
                grade_id(TaskRef(id="t"), a)}) == 4  # fmt: skip


def test_prepare_judges_an_unparsable_completion_here() -> None:
    got = prepare(TaskRef(id="t"), "no json", "files")
    assert isinstance(got, GradeResult) and got.status == GradeStatus.invalid
    assert got.reward == 0.0 and got.id == prepare(TaskRef(id="t"), "no json", "files").id
    item = prepare(TaskRef(id="t"), '{"/a": "b"}', "files", group_id="g")
    assert isinstance(item, GradeItem) and item.group_id == "g"
