"""`crucible tasks check|list|init`: validate, list and scaffold Harbor-format tasks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from crucible.cli.common import JsonOpt, console, err_console, fail, print_json
from crucible.cli.task_env import TaskEnvFileOpt, TaskEnvOpt, host_env
from crucible.errors import ExitCode

if TYPE_CHECKING:
    from crucible.engine.task_check import TaskRunCheck
    from crucible.tasks.problems import Problem, TaskCheck

tasks_app = typer.Typer(
    name="tasks",
    help="Validate, list and scaffold tasks (Harbor format).",
    no_args_is_help=True,
)

PathsArg = typer.Argument(..., help="Task directories, or folders to search for tasks.")
IncludeOpt = typer.Option(
    [], "--include", "-i", help="Only task names matching this glob (repeatable)."
)
ExcludeOpt = typer.Option(
    [], "--exclude", "-x", help="Skip task names matching this glob (repeatable)."
)


def register(app: typer.Typer) -> None:
    app.add_typer(tasks_app, name="tasks")


def shown(path: Path) -> str:
    """A path as `tasks check` prints it, one way for all: relative to the working
    directory when it is under it, else absolute."""
    full = Path(os.path.abspath(path))
    try:
        return str(full.relative_to(Path.cwd())) or "."
    except ValueError:
        return str(full)


def _location(p: Problem) -> str:
    return f"{shown(p.path)}:{p.line}" if p.line is not None else shown(p.path)


def _problem_json(p: Problem) -> dict[str, Any]:
    return {"path": shown(p.path), "line": p.line, "message": p.message, "severity": p.severity}


def _check_json(c: TaskCheck) -> dict[str, Any]:
    from crucible.tasks.support import feature_uses

    return {
        "name": c.name,
        "path": shown(c.path),
        "valid": c.valid,
        "digest": c.task.digest if c.task else None,
        "problems": [_problem_json(p) for p in c.problems],
        # The host variables the task names, and what this run gives each (never a value).
        "host_env": [r.model_dump(mode="json") for r in c.host_reads],
        # The Harbor features the task uses that not every provider runs.
        "features": [
            {
                "field": u.feature.field,
                "what": u.feature.what,
                "supported_on": list(u.feature.supported_on),
                "effect": u.feature.effect,
            }
            for u in (feature_uses(c.task) if c.task else [])
        ],
    }


def _summary(checks: list[TaskCheck]) -> dict[str, int]:
    return {
        "tasks": len(checks),
        "valid": sum(c.valid for c in checks),
        "invalid": sum(not c.valid for c in checks),
        "errors": sum(len(c.errors) for c in checks),
        "warnings": sum(len(c.warnings) for c in checks),
    }


def _print_problems(c: TaskCheck) -> None:
    from crucible.tasks.support import feature_uses

    for p in c.problems:
        style = "red" if p.is_error else "yellow"
        console.print(
            f"    [{style}]{p.severity}[/] {escape(_location(p))}: {escape(p.message)}",
            highlight=False,
            soft_wrap=True,
        )
    for read in c.host_reads:
        console.print(f"    [cyan]host env[/] {escape(read.describe())}", highlight=False)
    # Features some providers run (those no provider runs yet are among the warnings).
    for use in feature_uses(c.task) if c.task else []:
        if use.supported:
            console.print(f"    [cyan]note[/] {escape(use.describe())}", highlight=False)


@tasks_app.command("check")
def check(
    paths: list[Path] = PathsArg,
    include: list[str] = IncludeOpt,
    exclude: list[str] = ExcludeOpt,
    run: bool = typer.Option(
        False, "--run", help="Also run oracle and nop on each valid task (in real sandboxes)."
    ),
    env: str = typer.Option("local", "--env", "-e", help="Provider for --run."),
    env_param: list[str] = typer.Option([], "--env-param", help="Provider parameter k=v."),
    concurrency: int = typer.Option(4, "--concurrency", "-c", help="Trials at once for --run."),
    keep_dir: Path = typer.Option(
        None,
        "--keep-dir",
        help="Where --run keeps a flagged task's trial folders (default: the temp dir).",
    ),
    task_env: list[str] = TaskEnvOpt,
    task_env_file: Path = TaskEnvFileOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Validate tasks and report every problem with its file, line and reason, and the
    host variables each task reads (only those given with --task-env are ever read).

    With --run, also run the oracle and nop on each valid task and flag a
    broken task (its verifier fails for the oracle, or the oracle scores below 1)
    or a free reward (nop scores above 0). A flagged task shows the verifier's
    last lines and keeps its trial folders (the path is printed). Exit 3 if a
    path names no task, 1 if any task is invalid or flagged; warnings alone exit 0.
    """
    from crucible.engine.checks import checked_tasks

    checks = checked_tasks(paths, include, exclude, host_env(task_env, task_env_file, as_json))
    summary = _summary(checks)
    runs = _run_checks(checks, env, env_param, concurrency, keep_dir, as_json) if run else None
    if as_json:
        out: dict[str, Any] = {"tasks": [_check_json(c) for c in checks], "summary": summary}
        if runs is not None:
            out["runs"] = [r.model_dump() | {"ok": r.ok} for r in runs]
            summary["flagged"] = sum(not r.ok for r in runs)
        print_json(out)
    else:
        for c in checks:
            _status(c.valid, "invalid", f"{escape(c.name)}  [dim]{escape(shown(c.path))}[/]")
            _print_problems(c)
        console.print(
            f"{summary['tasks']} task(s): {summary['valid']} valid, {summary['invalid']} invalid; "
            f"{summary['errors']} error(s), {summary['warnings']} warning(s)",
            highlight=False,
        )
        if runs is not None:
            _print_runs(runs, env)
    if any(c.not_found for c in checks):
        raise typer.Exit(ExitCode.NOT_FOUND)  # a path that names no task
    if summary["invalid"] or (runs is not None and any(not r.ok for r in runs)):
        raise typer.Exit(ExitCode.ERROR)


def _run_checks(
    checks: list[TaskCheck],
    env: str,
    pairs: list[str],
    concurrency: int,
    keep_dir: Path | None,
    as_json: bool,
) -> list[TaskRunCheck]:
    import asyncio

    from crucible.cli.sandboxes import parse_params, provider_or_fail
    from crucible.engine.task_check import run_checks
    from crucible.errors import CrucibleError

    params = parse_params(pairs, as_json)
    tasks = [c.task for c in checks if c.valid and c.task is not None]
    provider = provider_or_fail(env, params, as_json)

    async def go() -> list[TaskRunCheck]:
        try:
            return await run_checks(
                tasks, provider, concurrency=concurrency, env_params=params, keep_dir=keep_dir
            )
        finally:
            await provider.aclose()

    try:
        return asyncio.run(go())
    except CrucibleError as exc:
        from crucible.cli.common import fail_from

        fail_from(exc, as_json=as_json)
    except OSError as exc:  # --keep-dir cannot be made
        fail(ExitCode.ERROR, "io", f"cannot keep the trial folders: {exc}", as_json=as_json)


def _status(ok: bool, bad: str, text: str) -> None:
    mark = "[green]ok[/]     " if ok else f"[red]{bad}[/]"
    console.print(f"{mark} {text}", highlight=False, soft_wrap=True)


def _print_runs(runs: list[TaskRunCheck], env: str) -> None:
    def show(o: Any) -> str:
        return f"{o.reward:g}" if o.reward is not None else o.outcome

    for r in runs:
        _status(r.ok, "flagged", f"{escape(r.name)}  oracle {show(r.oracle)}, nop {show(r.nop)}")
        for msg in r.problems:
            console.print(f"    [red]error[/] {escape(msg)}", highlight=False, soft_wrap=True)
        for msg in r.warnings:
            console.print(f"    [yellow]warning[/] {escape(msg)}", highlight=False, soft_wrap=True)
        for o in (r.oracle, r.nop):
            if o.verifier_tail:
                console.print(f"    [dim]{o.agent}'s verifier output, last lines:[/]")
                for line in o.verifier_tail:
                    console.print(f"      {escape(printable(line))}", highlight=False)
        if r.trials_dir:
            console.print(
                f"    trial folders kept in {escape(r.trials_dir)} "
                "(oracle's __0, nop's __1: trial.log, verifier/test-stdout.txt)",
                highlight=False,
                soft_wrap=True,
            )
    flagged = sum(not r.ok for r in runs)
    console.print(
        f"ran oracle and nop on {len(runs)} task(s) with --env {env}: {flagged} flagged",
        highlight=False,
    )


def printable(line: str) -> str:
    """A line of a task's output, its control characters (terminal escapes) shown as ?."""
    return "".join(ch if ch.isprintable() or ch == "\t" else "?" for ch in line)


@tasks_app.command("list")
def list_tasks(
    paths: list[Path] = PathsArg,
    include: list[str] = IncludeOpt,
    exclude: list[str] = ExcludeOpt,
    task_env: list[str] = TaskEnvOpt,
    task_env_file: Path = TaskEnvFileOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List tasks: name, digest, resources, network, image. Exit 1 if any is invalid,
    3 if a path names no task."""
    from rich.table import Table

    from crucible.tasks.dataset import check_tasks

    checks = check_tasks(paths, include, exclude, host_env(task_env, task_env_file, as_json))
    valid = [c.task for c in checks if c.valid and c.task is not None]
    invalid = [c for c in checks if not c.valid]
    if as_json:
        print_json(
            {
                "tasks": [
                    {
                        "name": t.name,
                        "path": str(t.path),
                        "digest": t.digest,
                        "cpus": t.config.environment.cpus,
                        "memory_mb": t.config.environment.memory_mb,
                        "storage_mb": t.config.environment.storage_mb,
                        "gpus": t.config.environment.gpus,
                        "network": str(t.config.environment.resolved_network()),
                        "image": t.config.environment.docker_image,
                        "dockerfile": t.dockerfile.is_file(),
                        "workdir": t.workdir,
                        "agent_timeout_sec": t.agent_timeout_sec,
                        "verifier_timeout_sec": t.verifier_timeout_sec,
                    }
                    for t in valid
                ],
                "invalid": [_check_json(c) for c in invalid],
            }
        )
    else:
        table = Table(title=f"{len(valid)} task(s)")
        table.add_column("name", no_wrap=True)
        table.add_column("digest", no_wrap=True)
        table.add_column("resources", no_wrap=True)
        table.add_column("network", no_wrap=True)
        table.add_column("environment")
        table.add_column("timeouts", no_wrap=True)
        for t in valid:
            env = t.config.environment
            resources = f"{env.cpus:g} cpu, {env.memory_mb}M" + (
                f", {env.gpus} gpu" if env.gpus else ""
            )
            table.add_row(
                escape(t.name),
                t.digest[:10],
                resources,
                str(env.resolved_network()),
                escape(env.docker_image or ("Dockerfile" if t.dockerfile.is_file() else "-")),
                f"{t.agent_timeout_sec:g}s/{t.verifier_timeout_sec:g}s",
            )
        console.print(table)
        for c in invalid:
            err_console.print(
                f"[red]invalid[/] {c.name}  [dim]{c.path}[/]", highlight=False, soft_wrap=True
            )
            for p in c.errors:
                err_console.print(
                    f"    {p.location()}: {p.message}", highlight=False, soft_wrap=True
                )
    if any(c.not_found for c in invalid):
        raise typer.Exit(ExitCode.NOT_FOUND)  # a path that names no task
    if invalid:
        raise typer.Exit(ExitCode.ERROR)


@tasks_app.command("init")
def init(
    name: str = typer.Argument(..., help="Task name (also its directory name)."),
    directory: Path = typer.Option(Path("."), "--dir", "-d", help="Parent folder of the new task."),
    as_json: bool = JsonOpt,
) -> None:
    """Scaffold a task that passes its own oracle (reward 1) and fails nop (reward 0)."""
    from crucible.tasks.loader import check_task
    from crucible.tasks.scaffold import scaffold_task

    try:
        root = scaffold_task(name, directory)
    except ValueError as exc:
        fail(ExitCode.USAGE, "usage", str(exc), as_json=as_json)
    except FileExistsError as exc:
        fail(
            ExitCode.ERROR, "exists", str(exc), hint="choose another name or --dir", as_json=as_json
        )
    except OSError as exc:
        fail(ExitCode.ERROR, "io", f"cannot write the task: {exc}", as_json=as_json)
    result = check_task(root)
    if as_json:
        print_json({"name": name, "path": str(root), "valid": result.valid})
    else:
        console.print(
            f"created task [bold]{escape(name)}[/] in {escape(str(root))}", highlight=False
        )
        console.print(
            "  edit instruction.md, environment/Dockerfile, solution/solve.sh and tests/test.sh;\n"
            f"  then: crucible tasks check {root}",
            highlight=False,
        )
