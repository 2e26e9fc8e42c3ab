"""`crucible dataset export`: tasks written as a prompt set in each format and loaded back
with `datasets` as a trainer loads it; rows match the tasks, and their ids and hashes are
the tasks' names and digests (what the grading service takes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.answer_tasks import answer_task

from crucible.export.dataset import (
    ExportError,
    ExportFormat,
    check_template,
    load_rows,
    render,
    write_dataset,
)
from crucible.tasks.loader import load_task
from crucible.trainers.common import find_task

datasets = pytest.importorskip("datasets")

REPO = Path(__file__).resolve().parents[2]


def crucible(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crucible.cli.main", *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env=os.environ | {"NO_COLOR": "1"})  # fmt: skip


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    parent = tmp_path / "tasks"
    answer_task(parent, "add", "What is 2 + 3?", "5")
    answer_task(parent, "mul", "What is 6 * 7?", "42", category="times", difficulty="medium",
                tags=("math", "product"))  # fmt: skip
    return parent


def load(fmt: str, path: Path, cache: Path) -> datasets.Dataset:
    if fmt == "hf":
        return datasets.load_from_disk(str(path))
    builder = "json" if fmt == "jsonl" else "parquet"
    return datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=str(cache))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "hf"])
def test_each_format_loads_back_with_datasets(tmp_path: Path, tasks: Path, fmt: str) -> None:
    out = tmp_path / "out" / f"prompts.{fmt}"
    res = crucible("dataset", "export", str(tasks), "--format", fmt, "-o", str(out),
                   "--system", "Answer briefly.", "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["rows"] == 2 and report["format"] == fmt

    data = load(fmt, out, tmp_path / "cache")
    assert data.column_names == ["prompt", "label", "task_id", "task_hash", "metadata"]
    by_id = {row["task_id"]: row for row in data}
    assert sorted(by_id) == ["add", "mul"]
    for name, answer in (("add", "5"), ("mul", "42")):
        task = load_task(tasks / name)
        row = by_id[name]
        # The ids and hashes round-trip to the tasks the service grades.
        assert row["task_hash"] == task.digest
        assert row["prompt"] == [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": task.instruction},
        ]
        assert row["label"] == answer
        # The other adapters find the task in a row's metadata alone (slime, verl).
        ref = find_task(row["metadata"])
        assert (ref.id, ref.hash) == (name, task.digest)
    assert by_id["mul"]["metadata"] == {
        "category": "times", "difficulty": "medium", "tags": ["math", "product"],
        "task_id": "mul", "task_hash": load_task(tasks / "mul").digest,
    }  # fmt: skip
    assert report["tasks"] == [{"task_id": r["task_id"], "task_hash": r["task_hash"]} for r in
                               sorted(by_id.values(), key=lambda r: r["task_id"])]  # fmt: skip


def test_rows_are_trls_conversational_prompts(tmp_path: Path, tasks: Path) -> None:
    from trl.data_utils import is_conversational

    rows = load_rows([tasks], system="Be exact.")
    out = write_dataset(rows, ExportFormat.parquet, tmp_path / "p.parquet")
    data = load("parquet", out, tmp_path / "cache")
    assert all(is_conversational(row) for row in data)


def test_the_template_wraps_the_instruction_and_keeps_other_braces(
    tmp_path: Path, tasks: Path
) -> None:
    template = tmp_path / "t.txt"
    template.write_text(
        '[{task_id}, {difficulty}] {instruction}\nReply as {{"answer": ...}} or {"x": 1}'
    )
    system = tmp_path / "s.txt"
    system.write_text("From a file.\n")
    out = tmp_path / "t.jsonl"
    res = crucible("datasets", "export", str(tasks), "-i", "add", "-o", str(out),
                   "--template", str(template), "--system-file", str(system))  # fmt: skip
    assert res.returncode == 0, res.stderr
    (row,) = load("jsonl", out, tmp_path / "cache")
    task = load_task(tasks / "add")
    assert row["prompt"][0] == {"role": "system", "content": "From a file."}
    assert row["prompt"][1]["content"] == (
        f'[add, easy] {task.instruction}\nReply as {{"answer": ...}} or {{"x": 1}}'
    )


def test_placeholders_in_an_instruction_are_not_expanded() -> None:
    # A task's text is data: braces in it are never read as the template's placeholders.
    assert render("Q: {instruction}", {"instruction": "say {task_id} {{", "task_id": "t"}) == (
        "Q: say {task_id} {{"
    )


def test_a_template_with_an_unknown_placeholder_or_no_instruction_is_refused() -> None:
    with pytest.raises(ExportError, match=r"\{instrution\}"):
        check_template("{instrution}")
    with pytest.raises(ExportError, match=r"no \{instruction\}"):
        check_template("{task_id} only")


def test_a_task_without_a_label_or_metadata_gets_empty_ones(tmp_path: Path) -> None:
    rows = load_rows([REPO / "examples" / "tasks" / "hello-file"])
    assert rows[0].label == "" and rows[0].prompt[0].role == "user" and len(rows[0].prompt) == 1
    custom = load_rows([REPO / "examples" / "tasks" / "hello-file"], label_key="category")
    assert custom[0].label == "example"


def test_errors_exit_with_clear_codes(tmp_path: Path, tasks: Path) -> None:
    out = tmp_path / "x.jsonl"
    missing = crucible("dataset", "export", str(tmp_path / "nowhere"), "-o", str(out), "--json")
    assert missing.returncode == 3
    assert json.loads(missing.stderr.splitlines()[-1])["error"] == "not_found"
    assert not out.exists()

    unknown = crucible("dataset", "export", str(tasks), "-f", "csv", "-o", str(out))
    assert unknown.returncode == 2 and "unknown format 'csv'" in unknown.stderr

    both = crucible("dataset", "export", str(tasks), "-o", str(out), "--system", "a",
                    "--system-file", str(tmp_path / "s"))  # fmt: skip
    assert both.returncode == 2 and "not both" in both.stderr

    no_template = crucible("dataset", "export", str(tasks), "-o", str(out), "--template",
                           str(tmp_path / "none.txt"))  # fmt: skip
    assert no_template.returncode == 3

    broken = answer_task(tmp_path / "more", "broken", "Q?", "1")
    (broken / "task.toml").write_text("not toml [")
    invalid = crucible("dataset", "export", str(tmp_path / "more"), str(tasks), "-o", str(out))
    assert invalid.returncode == 1 and "invalid task" in invalid.stderr and not out.exists()
    skipped = crucible("dataset", "export", str(tmp_path / "more"), str(tasks), "-o", str(out),
                       "--skip-invalid", "--json")  # fmt: skip
    assert skipped.returncode == 0 and json.loads(skipped.stdout)["rows"] == 2


def test_an_existing_output_is_replaced_only_with_force(tmp_path: Path, tasks: Path) -> None:
    rows = load_rows([tasks])
    out = tmp_path / "p.jsonl"
    out.write_text("keep me\n")
    with pytest.raises(ExportError, match="exists") as exc:
        write_dataset(rows, ExportFormat.jsonl, out)
    assert exc.value.code == 2 and out.read_text() == "keep me\n"
    write_dataset(rows, ExportFormat.jsonl, out, force=True)
    assert len(out.read_text().splitlines()) == 2

    saved = write_dataset(rows, ExportFormat.hf, tmp_path / "saved")
    write_dataset(rows[:1], ExportFormat.hf, saved, force=True)
    assert len(datasets.load_from_disk(str(saved))) == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no leftovers


def test_force_never_replaces_a_folder_it_did_not_write(tmp_path: Path, tasks: Path) -> None:
    # Attack: `-o ~ --force` (or any folder of someone's) must not be removed.
    rows = load_rows([tasks])
    home = tmp_path / "home"
    (home / "notes").mkdir(parents=True)
    (home / "notes" / "a.txt").write_text("mine")
    with pytest.raises(ExportError, match="not a dataset folder"):
        write_dataset(rows, ExportFormat.hf, home, force=True)
    with pytest.raises(ExportError, match="not a file"):
        write_dataset(rows, ExportFormat.parquet, home, force=True)
    link = tmp_path / "link.jsonl"
    link.symlink_to(home / "notes" / "a.txt")
    with pytest.raises(ExportError, match="symbolic link"):
        write_dataset(rows, ExportFormat.jsonl, link, force=True)
    assert (home / "notes" / "a.txt").read_text() == "mine"


def test_a_multi_step_task_is_refused_with_its_reason(tmp_path: Path, tasks: Path) -> None:
    steps = answer_task(
        tmp_path / "multi", "steps", "Q?", "1", extra_toml='[[steps]]\nname = "one"\n'
    )
    (steps / "steps" / "one").mkdir(parents=True)
    (steps / "steps" / "one" / "instruction.md").write_text("Step one.\n")
    with pytest.raises(ExportError, match="has steps"):
        load_rows([steps])
    assert [r.task_id for r in load_rows([steps, tasks], skip_invalid=True)] == ["add", "mul"]
