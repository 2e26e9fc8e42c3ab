"""`crucible adapt swebench|answers|with|list`: benchmarks and datasets from their
sources into Harbor task folders (crucible/adapt/), each folder checked as
`crucible tasks check` checks it before it is reported written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from crucible.cli.common import JsonOpt, console, fail, fail_from, print_json
from crucible.errors import CrucibleError, ExitCode

adapt_app = typer.Typer(
    name="adapt",
    help="Turn a benchmark's or a dataset's own data into task folders (SWE-bench, "
    "prompts with answers, or an installed adapter).",
    no_args_is_help=True,
)

SourceArg = typer.Argument(
    ...,
    help="A local JSONL (or JSON list) or Parquet file, or a dataset name OWNER/NAME "
    "loaded with the datasets library (needs a reachable hub).",
)
OutOpt = typer.Option(..., "--out", "-o", help="The folder the task folders are written into.")


def register(app: typer.Typer) -> None:
    app.add_typer(adapt_app, name="adapt")


def _run(name: str, source: str, out: Path, options: dict[str, Any], as_json: bool) -> None:
    from pydantic import ValidationError

    from crucible.adapt.base import write_tasks
    from crucible.adapt.registry import adapter_class

    try:
        cls = adapter_class(name)
        try:
            opts = cls.options_type.model_validate(options)
        except ValidationError as exc:
            why = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            fail(ExitCode.USAGE, "usage", f"adapter {name}: {why}", as_json=as_json)
        adapter = cls(opts)
        rows = adapter.rows(source)
        report = write_tasks(adapter, source, out, [adapter.task(r) for r in rows])
    except CrucibleError as exc:
        fail_from(exc, as_json=as_json)
    if as_json:
        print_json(report.model_dump())
    else:
        for t in report.tasks:
            mark = "[green]written[/]" if t.valid else "[red]invalid[/]"
            console.print(f"{mark} {escape(t.name)}  [dim]{escape(t.path)}[/]", highlight=False)
            for p in t.problems:
                console.print(f"    {escape(p)}", highlight=False)
        bad = len(report.invalid)
        console.print(
            f"{len(report.tasks) - bad} task(s) written to {escape(str(out))}, {bad} invalid"
        )
    if report.invalid:
        raise typer.Exit(ExitCode.ERROR)


@adapt_app.command("swebench")
def swebench(
    source: str = SourceArg,
    out: Path = OutOpt,
    ids: list[str] = typer.Option([], "--ids", help="Only these instance ids (repeatable)."),
    image_template: str = typer.Option(
        "{image}",
        "--image-template",
        help="The evaluation image of each task: {image} is the official name "
        "(swebench/sweb.eval.x86_64.<id>:latest), {id} the instance id lowercased with "
        "'__' as '_1776_', also {instance_id}, {repo}, {version}.",
    ),
    split: str = typer.Option("test", "--split", help="The split of a dataset given by name."),
    as_json: bool = JsonOpt,
) -> None:
    """SWE-bench-format instances -> tasks: the problem statement as instruction, the
    instance's evaluation image with workdir /testbed, the gold patch as the oracle's
    solution, and tests that run the official eval script (written now from the swebench
    package's spec). The log is graded on the host by the `swebench` stage with the
    official parser and resolution rule: grading needs no network. Exit 1 if any task
    is invalid or the source cannot be read."""
    opts = {"ids": ids, "image_template": image_template, "split": split}
    _run("swebench", source, out, opts, as_json)


@adapt_app.command("answers")
def answers(
    source: str = SourceArg,
    out: Path = OutOpt,
    prompt_field: str = typer.Option("prompt", "--prompt-field", help="The prompt's column."),
    answer_field: str = typer.Option("answer", "--answer-field", help="The answer's column."),
    id_field: str = typer.Option(None, "--id-field", help="A column naming each row."),
    reward: str = typer.Option(
        "exact", "--reward", help="exact, numeric, or module:function (answer, expected) -> [0, 1]."
    ),
    split: str = typer.Option("train", "--split", help="The split of a dataset given by name."),
    as_json: bool = JsonOpt,
) -> None:
    """Prompts and answers -> single-turn tasks for RL: the agent writes its answer to
    /logs/agent/answer.txt and the `answer` stage scores it on the host."""
    opts = {
        "prompt_field": prompt_field,
        "answer_field": answer_field,
        "id_field": id_field,
        "reward": reward,
        "split": split,
    }
    _run("answers", source, out, opts, as_json)


@adapt_app.command("with")
def with_adapter(
    name: str = typer.Argument(..., help="An adapter's name (see `crucible adapt list`)."),
    source: str = SourceArg,
    out: Path = OutOpt,
    option: list[str] = typer.Option([], "--set", help="An adapter option KEY=VALUE (repeatable)."),
    as_json: bool = JsonOpt,
) -> None:
    """Run any adapter by name, a built-in or one installed through the
    `crucible.adapters` entry points, with its options as KEY=VALUE."""
    opts: dict[str, Any] = {}
    for item in option:
        key, sep, value = item.partition("=")
        if not sep:
            fail(ExitCode.USAGE, "usage", f"--set {item!r}: not KEY=VALUE", as_json=as_json)
        opts[key] = value
    _run(name, source, out, opts, as_json)


@adapt_app.command("list")
def list_adapters(as_json: bool = JsonOpt) -> None:
    """The adapters there are: built-ins and installed entry points."""
    from crucible.adapt.registry import adapter_names

    names = adapter_names()
    if as_json:
        print_json({"adapters": names})
    else:
        for n in names:
            console.print(n, highlight=False)
