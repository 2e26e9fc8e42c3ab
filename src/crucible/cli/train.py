"""`crucible train smoke|launch CONFIG`: training runs from a config module (train/).

CONFIG is a plain Python file that defines `config = TrainConfig(...)`. `smoke` runs one
step of it on a tiny local model (random weights, a tokenizer trained on the dataset: no
download, no GPU) and prints the sampled responses with their rewards; `launch` starts the
run (detached: it outlives this command; `crucible runs get ID` follows it) or, with
`--dry-run`, prints the recipe's launch plan and starts nothing. Both share one path
(train/config.py `launch`), so what the smoke run checks is what the launch runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from crucible.cli.common import (
    EXIT_CODES_HELP,
    JobsDirOpt,
    JsonOpt,
    JsonUsageCommand,
    console,
    fail,
    print_json,
)
from crucible.errors import ExitCode

if TYPE_CHECKING:
    from crucible.train.config import TrainConfig

train_app = typer.Typer(
    name="train",
    help="Training runs on existing trainers (TRL here; slime/verl on Modal): smoke, launch.\n\n"
    + EXIT_CODES_HELP,
    no_args_is_help=True,
)
ConfigArg = typer.Argument(..., help="A Python file that defines `config = TrainConfig(...)`.")
SHOWN_CHARS = 400  # of each sampled response, in the human output


def _load(path: Path, jobs_dir: Path | None, as_json: bool) -> TrainConfig:
    from crucible.train.config import load_config

    try:
        config = load_config(path)
    except FileNotFoundError as exc:
        fail(ExitCode.NOT_FOUND, "not_found", str(exc), as_json=as_json)
    except Exception as exc:  # the user's module: any error it raises is a usage error here
        fail(ExitCode.USAGE, "bad_config", f"{path}: {type(exc).__name__}: {exc}",
             hint="CONFIG defines `config = TrainConfig(model=..., dataset=..., recipe=..., "
             "reward=...)`", as_json=as_json)  # fmt: skip
    if jobs_dir is not None:
        config.jobs_dir = jobs_dir
    return config


def _result(jobs_dir: Path, run_id: str) -> dict[str, Any]:
    from crucible.store.train_runs import read_metrics, read_run, read_samples

    folder = jobs_dir / run_id
    run, (metrics, _), (samples, _) = read_run(folder), read_metrics(folder), read_samples(folder)
    return {"run_id": run.id, "state": run.state, "step": run.step, "error": run.error,
            "path": str(folder), "reward_per_step": [m.model_dump(mode="json") for m in metrics],
            "samples": [s.model_dump(mode="json") for s in samples]}  # fmt: skip


@train_app.command("smoke", cls=JsonUsageCommand, epilog=EXIT_CODES_HELP)
def smoke_cmd(config_path: Path = ConfigArg, jobs_dir: Path | None = JobsDirOpt,
              as_json: bool = JsonOpt) -> None:  # fmt: skip
    """One step on a tiny local model: catch dataset and reward bugs before any GPU time.

    The run is recorded like any other (`crucible runs get ID`); exit 1 when it fails.
    """
    from crucible.train.config import jobs_dir_of, launch

    config = _load(config_path, jobs_dir, as_json)
    root = jobs_dir_of(config, None)
    run_id = launch(config, detach=False, smoke=True)
    res = _result(root, run_id)
    if as_json:
        print_json(res)
    else:
        console.print(f"smoke run {run_id}: {res['state']}", highlight=False)
        for s in res["samples"]:
            comps = " ".join(f"{k}={v:.3f}" for k, v in s["components"].items())
            console.print(f"[bold]step {s['step']} #{s['index']}[/] reward {s['reward']:.3f}"
                          f" {escape(comps)}", highlight=False)  # fmt: skip
            console.print(f"  prompt:   {escape(s['prompt'][:SHOWN_CHARS])!r}", highlight=False)
            console.print(f"  response: {escape(s['response'][:SHOWN_CHARS])!r}",
                          highlight=False)  # fmt: skip
        if res["error"]:
            console.print(escape(res["error"]), style="red", highlight=False)
    if res["state"] != "completed":
        raise typer.Exit(ExitCode.ERROR)


@train_app.command("launch", cls=JsonUsageCommand, epilog=EXIT_CODES_HELP)
def launch_cmd(
    config_path: Path = ConfigArg,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the launch plan; start nothing."),
    foreground: bool = typer.Option(
        False, "--foreground", help="Run in this process and return when it ends."
    ),
    jobs_dir: Path | None = JobsDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Start the training run of CONFIG; print its id. Detached unless --foreground.

    --dry-run prints the recipe's plan: trainer, image, GPUs, volumes, command,
    environment variable names, estimated cost per hour, and the knobs as the trainer
    gets them.
    """
    from crucible.train.config import jobs_dir_of, launch

    config = _load(config_path, jobs_dir, as_json)
    if dry_run:
        plan = config.recipe.plan(config)
        if as_json:
            print_json(plan.model_dump(mode="json"))
            return
        _print_plan(plan.model_dump(mode="json"))
        return
    root = jobs_dir_of(config, None)
    run_id = launch(config, detach=not foreground)
    if foreground:
        res = _result(root, run_id)
        res.pop("samples")
        if as_json:
            print_json(res)
        else:
            console.print(f"run {run_id}: {res['state']}", highlight=False)
        if res["state"] != "completed":
            raise typer.Exit(ExitCode.ERROR)
        return
    if as_json:
        print_json({"run_id": run_id, "path": str(root / run_id), "detached": True})
        return
    console.print(f"launched {run_id}; follow it with `crucible runs get {run_id}"
                  f" --jobs-dir {root}`", highlight=False)  # fmt: skip


def _print_plan(p: dict[str, Any]) -> None:
    gpus = p["gpus"]
    cost = p["cost_per_hour_usd"]
    console.print(f"[bold]{escape(p['recipe'])}[/]  trainer {escape(p['trainer'])}  "
                  f"where {p['where']}", highlight=False)  # fmt: skip
    console.print(f"  image   {escape(p['image'] or '(this environment)')}", highlight=False)
    console.print(f"  gpus    {gpus['count']} x {escape(gpus['type'])}", highlight=False)
    for v in p["volumes"]:
        console.print(f"  volume  {escape(v['name'])} at {escape(v['mount'])} "
                      f"{escape(v['purpose'])}", highlight=False)  # fmt: skip
    console.print("  command " + escape(" ".join(p["command"])), highlight=False)
    console.print("  env     " + (", ".join(p["env"]) or "-"), highlight=False)
    console.print(f"  cost    {'-' if cost is None else f'${cost:.2f}/hour'}", highlight=False)
    for k, v in p["knobs"].items():
        console.print(f"  knob    {escape(str(k))} = {escape(repr(v))}", highlight=False)
    for n in p["notes"]:
        console.print(f"  note    {escape(n)}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(train_app, name="train")
