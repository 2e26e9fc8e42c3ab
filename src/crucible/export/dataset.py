"""Exporting tasks as a trainer's prompt set (`crucible dataset export`): one row per task,
written with the `datasets` library as JSON Lines, Parquet or a saved dataset folder.

A row (records/prompt_row.py) holds the prompt as chat messages (an optional system
message, then the task's instruction as the user's, through an optional template), a
label, the task's name and digest, and its category, difficulty and tags. The name and
digest are what `POST /v1/grade` takes as `task.id` and `task.hash`, so a completion for a
row goes back to exactly the task it was made from (trainers/trl.py reads those columns).

Templates are plain text with placeholders: `{instruction}` (required), `{task_id}`,
`{category}` and `{difficulty}`; `{{` and `}}` are literal braces, and any other
`{name}` is an error (a typo would otherwise go into every prompt). Other braces are kept
as written, so a template may show JSON.

Output is written next to its destination and moved into place, so a failed export
leaves no half-written file. An existing output is replaced only with `force`, and only
when it is what this writes (a file for jsonl and parquet, a folder saved by `datasets`
for hf): `-o ~ --force` never removes a folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crucible.errors import ExitCode
from crucible.records.prompt_row import COLUMNS, Message, PromptRow, RowMetadata
from crucible.tasks.models import Task
from crucible.tasks.problems import Problem

# Called once per task left out (its path and its problems), as `crucible run` reports them.
OnInvalid = Callable[[Path, list[Problem]], None]

if TYPE_CHECKING:
    from datasets import Dataset, Features

DEFAULT_LABEL_KEY = "expected_answer"
PLACEHOLDERS = ("instruction", "task_id", "category", "difficulty")
# What a folder written by Dataset.save_to_disk holds (so --force may replace it).
_SAVED_MARKERS = ("dataset_info.json", "state.json")
_FIELD = re.compile(r"\{\{|\}\}|\{(\w+)\}")


class ExportFormat(StrEnum):
    jsonl = "jsonl"
    parquet = "parquet"
    hf = "hf"  # a folder: Dataset.save_to_disk / datasets.load_from_disk


class ExportError(Exception):
    """The export cannot be done as asked; `code` is the exit code the CLI uses, `error`
    its stable name (`usage`, `not_found`, `task_invalid`, `export`)."""

    def __init__(
        self, code: int, message: str, *, hint: str | None = None, error: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.error = error or {ExitCode.USAGE: "usage", ExitCode.NOT_FOUND: "not_found"}.get(
            code, "export"
        )
        self.message = message
        self.hint = hint


def check_template(template: str) -> str:
    """The template, if every placeholder in it is known and `{instruction}` is one."""
    names = [m.group(1) for m in _FIELD.finditer(template) if m.group(1) is not None]
    unknown = sorted({n for n in names if n not in PLACEHOLDERS})
    if unknown:
        raise ExportError(
            ExitCode.USAGE,
            f"the template names unknown placeholders: {', '.join('{' + n + '}' for n in unknown)}",
            hint=f"known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}; "
            "write {{ and }} for literal braces",
        )
    if "instruction" not in names:
        raise ExportError(ExitCode.USAGE, "the template has no {instruction} placeholder")
    return template


def render(template: str, values: dict[str, str]) -> str:
    """`template` with its placeholders replaced (values are inserted as they are:
    braces in an instruction are never read as placeholders)."""

    def one(m: re.Match[str]) -> str:
        token = m.group(0)
        if token in ("{{", "}}"):
            return token[0]
        return values[m.group(1)]

    return _FIELD.sub(one, template)


def _text(value: object) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def task_row(
    task: Task,
    *,
    system: str | None = None,
    template: str | None = None,
    label_key: str = DEFAULT_LABEL_KEY,
) -> PromptRow:
    """The prompt-set row of one (single-step) task."""
    if task.steps:
        raise ExportError(
            ExitCode.USAGE,
            f"task {task.name!r} has steps: each step has its own instruction, and one "
            "prompt cannot hold them",
            hint="export single-step tasks (--exclude the multi-step ones)",
        )
    meta = task.metadata
    tags = meta.get("tags")
    row_meta = RowMetadata(
        category=_text(meta.get("category")),
        difficulty=_text(meta.get("difficulty")),
        tags=[_text(t) for t in tags] if isinstance(tags, list) else [],
        task_id=task.name,
        task_hash=task.digest,
    )
    values = {"instruction": task.instruction, "task_id": task.name,
              "category": row_meta.category, "difficulty": row_meta.difficulty}  # fmt: skip
    user = render(template, values) if template is not None else task.instruction
    prompt = [Message(role="system", content=system)] if system else []
    prompt.append(Message(role="user", content=user))
    return PromptRow(prompt=prompt, label=_text(meta.get(label_key)), task_id=task.name,
                     task_hash=task.digest, metadata=row_meta)  # fmt: skip


def load_rows(
    paths: Sequence[Path],
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    skip_invalid: bool = False,
    system: str | None = None,
    template: str | None = None,
    label_key: str = DEFAULT_LABEL_KEY,
    on_invalid: OnInvalid | None = None,
) -> list[PromptRow]:
    """The rows of the tasks at or below `paths`, found and checked as `crucible run` and
    `crucible serve` find them (so every row names a task the service can grade)."""
    from crucible.engine.launch import LaunchRefused, load_tasks
    from crucible.engine.request import RunRequest

    if template is not None:
        check_template(template)
    req = RunRequest(paths=list(paths), include=list(include), exclude=list(exclude),
                     skip_invalid=skip_invalid)  # fmt: skip
    try:
        tasks = load_tasks(req, req.paths, on_invalid)
    except LaunchRefused as exc:
        raise ExportError(exc.code, exc.message, hint=exc.hint, error=exc.error) from exc
    rows: list[PromptRow] = []
    refused: list[ExportError] = []
    for task in tasks:
        try:
            rows.append(task_row(task, system=system, template=template, label_key=label_key))
        except ExportError as exc:
            refused.append(exc)
            if on_invalid is not None:
                on_invalid(task.path, [Problem(path=task.path / "task.toml", message=exc.message)])
    if refused and not skip_invalid:
        if len(refused) == 1:
            raise refused[0]
        raise ExportError(ExitCode.USAGE, f"{len(refused)} tasks cannot be exported (listed above)",
                          hint="--skip-invalid exports the rest")  # fmt: skip
    if not rows:
        raise ExportError(ExitCode.NOT_FOUND, "no tasks to export")
    return rows


def features() -> Features:
    """The prompt set's schema, fixed so every format holds the same column types
    (an export where no task has a category still has a string column)."""
    from datasets import Features, List, Value

    string = Value("string")
    return Features(
        {
            "prompt": List({"role": string, "content": string}),
            "label": string,
            "task_id": string,
            "task_hash": string,
            "metadata": {
                "category": string,
                "difficulty": string,
                "tags": List(string),
                "task_id": string,
                "task_hash": string,
            },
        }
    )


def to_dataset(rows: Sequence[PromptRow]) -> Dataset:
    from datasets import Dataset

    records: list[dict[str, Any]] = [r.model_dump(mode="json") for r in rows]
    columns = {name: [rec[name] for rec in records] for name in COLUMNS}
    return Dataset.from_dict(columns, features=features())


def _check_out(out: Path, fmt: ExportFormat, force: bool) -> None:
    if not (out.exists() or out.is_symlink()):
        return
    if not force:
        raise ExportError(
            ExitCode.USAGE, f"{out} exists", hint="pass --force to replace it, or another -o"
        )
    if out.is_symlink():
        raise ExportError(ExitCode.USAGE, f"{out} is a symbolic link: not replaced")
    if fmt is ExportFormat.hf:
        if not out.is_dir() or not all((out / m).is_file() for m in _SAVED_MARKERS):
            raise ExportError(
                ExitCode.USAGE,
                f"{out} is not a dataset folder written by `datasets` (no "
                f"{' and '.join(_SAVED_MARKERS)}): not replaced",
            )
    elif not out.is_file():
        raise ExportError(ExitCode.USAGE, f"{out} is not a file: not replaced")


def write_dataset(
    rows: Sequence[PromptRow], fmt: ExportFormat, out: Path, *, force: bool = False
) -> Path:
    """Write `rows` to `out` in `fmt`; returns `out`. Nothing is left at `out`'s place
    but the finished export."""
    if not rows:
        raise ExportError(ExitCode.NOT_FOUND, "no tasks to export")
    _check_out(out, fmt, force)
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(ExitCode.ERROR, f"cannot make {parent}: {exc.strerror}") from exc
    data = to_dataset(rows)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    try:
        staged = tmp / out.name
        if fmt is ExportFormat.jsonl:
            data.to_json(str(staged), lines=True, force_ascii=False)
        elif fmt is ExportFormat.parquet:
            data.to_parquet(str(staged))
        else:
            data.save_to_disk(str(staged))
        if fmt is ExportFormat.hf and out.is_dir():
            old = tmp / ".replaced"
            os.replace(out, old)  # a folder cannot be replaced by rename in one step
            try:
                os.replace(staged, out)
            except OSError:
                os.replace(old, out)
                raise
        else:
            os.replace(staged, out)
    except OSError as exc:
        raise ExportError(ExitCode.ERROR, f"cannot write {out}: {exc.strerror or exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
