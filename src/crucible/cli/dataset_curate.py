"""`crucible dataset split` and `crucible dataset mix`: plain folders of Harbor tasks with a
manifest, for training and validation. The work is tasks/splits.py's and tasks/mix.py's."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from crucible.cli.common import EXIT_CODES_HELP, JsonOpt, console, fail, print_json

SeedOpt = typer.Option(
    0, "--seed", help="Seeds the draw: the same inputs and seed give the same output."
)
ForceOpt = typer.Option(
    False, "--force", help="Replace OUT when it is a dataset folder this wrote."
)
LinkOpt = typer.Option(
    False, "--link", help="Hard-link the task files instead of copying them (same file system)."
)
OutOpt = typer.Option(
    ..., "--output", "-o", help="The folder to write (it must not exist, or --force)."
)
REFUSED_HELP = (
    "\n\nA refused split or mix exits 1 with error `split_refused` or `mix_refused` (and "
    "writes nothing)."
)


def split_cmd(
    path: Path = typer.Argument(
        ..., help="A folder of tasks (e.g. a `crucible generate` output's tasks/)."
    ),
    val: float = typer.Option(0.1, "--val", help="The share of tasks for validation, 0 < F < 1."),
    output: Path = OutOpt,
    seed: int = SeedOpt,
    val_include: list[str] = typer.Option(
        [],
        "--val-include",
        help="Put the tasks whose names match this glob in validation "
        "(repeatable); refused if that would separate them from their group.",
    ),
    near_dup: float = typer.Option(
        0.8,
        "--near-dup",
        help="Jaccard similarity (word shingles of instruction and normalised "
        "solution) from which two tasks are near-duplicates and stay together.",
    ),
    force: bool = ForceOpt,
    link: bool = LinkOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Split tasks into OUT/train/ and OUT/val/, with OUT/crucible-dataset.json.

    Tasks of one lineage (task.toml \\[metadata] `root`, `parent`), of one source workflow
    (`source`) and near-duplicates move together, so no validation task is a hardened version
    of a training task nor shares a workflow with one. After the split the rules are checked
    again, with a cross-split near-duplicate check; a split that would break them is refused.
    The manifest lists every task with its part, digest and lineage: name it where a task
    folder goes (`crucible run|serve|dataset export OUT/crucible-dataset.json`).
    """
    from crucible.tasks.curate import CurateError
    from crucible.tasks.splits import split_dataset

    try:
        m = split_dataset(path, val, output, seed=seed, val_include=val_include,
                          threshold=near_dup, force=force, link=link)  # fmt: skip
    except CurateError as exc:
        fail(exc.code, exc.error, exc.message, hint=exc.hint, as_json=as_json)
    train, valid = m.part("train"), m.part("val")
    check = m.near_duplicates
    if as_json:
        print_json({"path": str(output), "train": len(train), "val": len(valid),
                    "groups": len({t.group for t in m.tasks}),
                    "near_duplicate_pairs_checked": check.pairs_checked if check else 0,
                    "tasks": [t.model_dump(mode="json") for t in m.tasks]})  # fmt: skip
        return
    console.print(f"wrote {len(train)} train and {len(valid)} val tasks to {escape(str(output))} "
                  f"(leakage check passed: {check.pairs_checked if check else 0} cross-split pairs)",
                  highlight=False)  # fmt: skip


def mix_cmd(
    sources: list[str] = typer.Argument(
        ...,
        help="Sources as NAME=DIR:WEIGHT, e.g. didactic=mined/:45 selfplay=gen/tasks:45 "
        "issues=iss/tasks:10.",
    ),
    output: Path = OutOpt,
    total: int | None = typer.Option(
        None,
        "--total",
        help="Tasks in the mix [default: the most that keeps the weights "
        "without repeating a task].",
    ),
    seed: int = SeedOpt,
    force: bool = ForceOpt,
    link: bool = LinkOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Build a curriculum from named sources by weight: OUT/<NAME>/<task>/ and
    OUT/crucible-dataset.json (each source's weight, tasks available and drawn)."""
    from crucible.tasks.curate import CurateError
    from crucible.tasks.mix import mix_datasets, parse_source

    try:
        specs = [parse_source(s) for s in sources]
        m = mix_datasets(specs, output, total=total, seed=seed, force=force, link=link)
    except CurateError as exc:
        fail(exc.code, exc.error, exc.message, hint=exc.hint, as_json=as_json)
    if as_json:
        print_json({"path": str(output), "total": len(m.tasks),
                    "sources": [s.model_dump(mode="json") for s in m.sources],
                    "tasks": [{"name": t.name, "part": t.part, "digest": t.digest}
                              for t in m.tasks]})  # fmt: skip
        return
    shares = ", ".join(f"{s.name} {s.count}/{s.available}" for s in m.sources)
    console.print(f"wrote {len(m.tasks)} tasks to {escape(str(output))}: {escape(shares)}",
                  highlight=False)  # fmt: skip


def register(group: typer.Typer) -> None:
    group.command("split", epilog=EXIT_CODES_HELP + REFUSED_HELP)(split_cmd)
    group.command("mix", epilog=EXIT_CODES_HELP + REFUSED_HELP)(mix_cmd)
