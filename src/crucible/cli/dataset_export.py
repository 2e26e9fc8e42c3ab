"""`crucible dataset export` (also `crucible datasets export`): tasks as a trainer's prompt
set. The work is export/dataset.py's; this reads the options and reports."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path

import typer
from rich.markup import escape

from crucible.cli.common import EXIT_CODES_HELP, JsonOpt, console, err_console, fail, print_json
from crucible.cli.tasks import ExcludeOpt, IncludeOpt, PathsArg
from crucible.errors import ExitCode
from crucible.tasks.problems import Problem

FORMATS = ("jsonl", "parquet", "hf")
FormatOpt = typer.Option(
    "jsonl",
    "--format",
    "-f",
    help="jsonl (JSON Lines), parquet, or hf (a folder written by `datasets`' save_to_disk, "
    "read with load_from_disk).",
)
TemplateOpt = typer.Option(
    None,
    "--template",
    help="A file holding the user message's template: {instruction} (required), {task_id}, "
    "{category}, {difficulty}; {{ and }} are literal braces.",
)
LabelKeyOpt = typer.Option(
    "expected_answer",
    "--label-key",
    help='The task.toml \\[metadata] key whose value is a row\'s label ("" where a task has none).',
)


def _read(path: Path, what: str, as_json: bool) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(ExitCode.NOT_FOUND, "not_found", f"{what} {path}: no such file", as_json=as_json)
    except (OSError, UnicodeDecodeError) as exc:
        fail(ExitCode.USAGE, "usage", f"{what} {path}: cannot read it ({exc})", as_json=as_json)


def _invalid_printer(as_json: bool) -> Callable[[Path, list[Problem]], None]:
    def show(path: Path, problems: list[Problem]) -> None:
        if as_json:
            sys.stderr.write(json.dumps({"warning": "task_left_out", "path": str(path),
                                         "problems": [str(p) for p in problems]}) + "\n")  # fmt: skip
            return
        err_console.print(f"[red]invalid task[/] {escape(str(path))}", highlight=False)
        for p in problems:
            err_console.print(f"  {escape(str(p))}", highlight=False)

    return show


def export_cmd(
    paths: list[Path] = PathsArg,
    fmt: str = FormatOpt,
    output: Path = typer.Option(..., "--output", "-o", help="Where to write the prompt set."),
    system: str | None = typer.Option(None, "--system", help="A system message for every row."),
    system_file: Path | None = typer.Option(
        None, "--system-file", help="A file holding the system message."
    ),
    template: Path | None = TemplateOpt,
    label_key: str = LabelKeyOpt,
    include: list[str] = IncludeOpt,
    exclude: list[str] = ExcludeOpt,
    skip_invalid: bool = typer.Option(
        False, "--skip-invalid", help="Export the valid tasks even if some are invalid."
    ),
    force: bool = typer.Option(False, "--force", help="Replace an existing output."),
    as_json: bool = JsonOpt,
) -> None:
    """Write one row per task, as a trainer's prompt set: the prompt as chat messages (an
    optional system message, then the instruction), a label, the task's name and digest
    (the `task.id` and `task.hash` the grading service takes), and its category,
    difficulty and tags.

    Rows load with `datasets`: load_dataset("json"/"parquet", data_files=PATH) or
    load_from_disk(PATH) for --format hf; the `prompt` column is TRL's conversational one.
    """
    from crucible.export.dataset import ExportError, ExportFormat, load_rows, write_dataset

    if fmt not in FORMATS:
        fail(ExitCode.USAGE, "usage", f"unknown format {fmt!r}",
             hint=f"one of: {', '.join(FORMATS)}", as_json=as_json)  # fmt: skip
    if system is not None and system_file is not None:
        fail(ExitCode.USAGE, "usage", "give --system or --system-file, not both", as_json=as_json)
    if system_file is not None:
        system = _read(system_file, "system file", as_json).strip()
    text = _read(template, "template", as_json) if template is not None else None
    if importlib.util.find_spec("datasets") is None:
        fail(ExitCode.ERROR, "missing_dependency", "the export writes with the `datasets` "
             "library, which is not installed", hint="pip install 'crucible[trainers]'",
             as_json=as_json)  # fmt: skip
    try:
        rows = load_rows(paths, include=include, exclude=exclude, skip_invalid=skip_invalid,
                         system=system, template=text, label_key=label_key,
                         on_invalid=_invalid_printer(as_json))  # fmt: skip
        from datasets.utils.logging import disable_progress_bar

        disable_progress_bar()  # stdout is the report (JSON under --json)
        out = write_dataset(rows, ExportFormat(fmt), output, force=force)
    except ExportError as exc:
        fail(exc.code, exc.error, exc.message, hint=exc.hint, as_json=as_json)
    if as_json:
        print_json({"path": str(out), "format": fmt, "rows": len(rows),
                    "tasks": [{"task_id": r.task_id, "task_hash": r.task_hash} for r in rows]})  # fmt: skip
        return
    console.print(f"wrote {len(rows)} rows ({fmt}) to {escape(str(out))}", highlight=False)


def register(group: typer.Typer) -> None:
    group.command("export", epilog=EXIT_CODES_HELP)(export_cmd)
