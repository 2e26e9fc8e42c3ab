"""`crucible datasets list|pull`, and the `-d NAME@VERSION` of `crucible run`.

Datasets come from a registry in Harbor's format (src/crucible/tasks/registry/);
their tasks are fetched with git into the datasets folder once per repository and
commit, then loaded like any task folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table

from crucible.cli.common import EXIT_CODES_HELP, JsonOpt, console, err_console, fail, print_json
from crucible.errors import ExitCode
from crucible.tasks.registry.names import DATASETS_DIR_ENV, DEFAULT_REGISTRY_URL, REGISTRY_ENV

if TYPE_CHECKING:
    from crucible.tasks.registry.pull import PulledTask
    from crucible.tasks.registry.source import Registry

REGISTRY_HELP = (
    "Dataset registry (Harbor's registry.json format): a file, a folder of .json files, "
    f"or an https URL. [default: ${REGISTRY_ENV}, else Harbor's public registry]"
)
DATASETS_DIR_HELP = (
    "Where pulled datasets are kept (one git checkout per repository and commit). "
    f"[default: ${DATASETS_DIR_ENV}, else ~/.cache/crucible/datasets]"
)
RegistryOpt = typer.Option(None, "--registry", help=REGISTRY_HELP)
DatasetsDirOpt = typer.Option(None, "--datasets-dir", help=DATASETS_DIR_HELP)
DatasetOpt = typer.Option(
    [],
    "--dataset",
    "-d",
    help="Run the tasks of dataset NAME@VERSION from the registry (repeatable; "
    "pulled first, once). See `crucible datasets list`.",
)

datasets_app = typer.Typer(
    name="datasets",
    help="Datasets by name from a registry in Harbor's format: list them, pull their tasks "
    "(`crucible run -d NAME@VERSION` runs one); tasks exported as a trainer's prompt set "
    "(`export`); leak-free train/val splits and weighted mixes of task folders (`split`, "
    "`mix`). `crucible dataset` is the same group.\n\nHarbor's public registry, the "
    "default:\n\n" + DEFAULT_REGISTRY_URL + "\n\n" + EXIT_CODES_HELP,
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    from crucible.cli.dataset_curate import register as register_curate
    from crucible.cli.dataset_export import register as register_export

    register_export(datasets_app)
    register_curate(datasets_app)
    app.add_typer(datasets_app, name="datasets")
    # `crucible dataset export ...`, as the prompt-set export is usually written.
    app.add_typer(datasets_app, name="dataset", hidden=True)


def _open(registry: str | None, datasets_dir: Path | None, as_json: bool) -> tuple[Registry, Path]:
    from crucible.tasks.registry.errors import DatasetError
    from crucible.tasks.registry.source import default_datasets_dir, load_registry

    where = datasets_dir or default_datasets_dir()
    try:
        reg = load_registry(registry, where)
    except DatasetError as exc:
        fail(exc.code, "dataset", exc.message, hint=exc.hint, as_json=as_json)
    for warning in reg.warnings:
        err_console.print(f"[yellow]warning[/]: {escape(warning)}", highlight=False)
    return reg, where


def pull_refs(
    refs: list[str], registry: str | None, datasets_dir: Path | None, *, as_json: bool
) -> list[tuple[str, list[PulledTask]]]:
    """Each dataset `refs` names, pulled: (NAME@VERSION, its tasks). Fails the command
    (exit 2, 3 or 1) when a dataset is unknown or cannot be pulled."""
    from crucible.tasks.registry.errors import DatasetError
    from crucible.tasks.registry.pull import pull_dataset

    reg, where = _open(registry, datasets_dir, as_json)

    def fetching(url: str, commit: str) -> None:
        if not as_json:
            err_console.print(f"[dim]fetching {escape(url)} at {commit[:12]}[/]", highlight=False)

    out: list[tuple[str, list[PulledTask]]] = []
    try:
        for ref in refs:
            spec = reg.find(ref)
            out.append((spec.ref, pull_dataset(reg, spec, where, on_fetch=fetching)))
    except DatasetError as exc:
        fail(exc.code, "dataset", exc.message, hint=exc.hint, as_json=as_json)
    return out


def dataset_paths(
    refs: list[str], registry: str | None, datasets_dir: Path | None, *, as_json: bool
) -> list[Path]:
    """The task folders of the datasets `refs` names, for `crucible run -d`."""
    if not refs:
        if registry is not None or datasets_dir is not None:
            fail(ExitCode.USAGE, "usage", "--registry and --datasets-dir apply to datasets: "
                 "name one with -d NAME@VERSION", as_json=as_json)  # fmt: skip
        return []
    return [
        t.path
        for _, tasks in pull_refs(refs, registry, datasets_dir, as_json=as_json)
        for t in tasks
    ]


@datasets_app.command("list", epilog=EXIT_CODES_HELP)
def list_cmd(
    registry: str = RegistryOpt,
    datasets_dir: Path = DatasetsDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The datasets of the registry: name, version, number of tasks, description.

    The registry is --registry, else $CRUCIBLE_REGISTRY, else Harbor's public one,
    fetched and kept under the datasets folder for use without network.
    """
    reg, _ = _open(registry, datasets_dir, as_json)
    rows = sorted(reg.datasets, key=lambda d: (d.name, d.version))
    if as_json:
        print_json({"registry": reg.origin, "datasets": [
            {"name": d.name, "version": d.version, "description": d.description,
             "n_tasks": len(d.tasks)} for d in rows]})  # fmt: skip
        return
    table = Table("dataset", "tasks", "description", title=f"registry {escape(reg.origin)}")
    for d in rows:
        table.add_row(
            escape(d.ref),
            str(len(d.tasks)),
            escape(d.description.splitlines()[0] if d.description else ""),
        )
    console.print(table)


@datasets_app.command("pull", epilog=EXIT_CODES_HELP)
def pull_cmd(
    datasets: list[str] = typer.Argument(
        ..., help="Datasets as NAME@VERSION (NAME alone when it has one version)."
    ),
    registry: str = RegistryOpt,
    datasets_dir: Path = DatasetsDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Fetch the tasks of datasets into the datasets folder and print where they are.

    Each repository is fetched once per commit, only the task folders asked
    for; a later pull or run at that commit reads the checkout already there.
    HEAD (or a missing git_commit_id) is resolved to a commit at pull time.
    """
    pulled = pull_refs(datasets, registry, datasets_dir, as_json=as_json)
    if as_json:
        data: list[dict[str, Any]] = [
            {"dataset": ref, "tasks": [
                {"name": t.name, "path": str(t.path), "git_url": t.git_url,
                 "git_commit_id": t.git_commit_id, "source_path": t.source_path} for t in tasks]}
            for ref, tasks in pulled
        ]  # fmt: skip
        print_json({"datasets": data})
        return
    for ref, tasks in pulled:
        console.print(f"[bold]{escape(ref)}[/]: {len(tasks)} tasks", highlight=False)
        for t in tasks:
            console.print(
                f"  {escape(t.name)}  {escape(str(t.path))}", highlight=False, soft_wrap=True
            )
