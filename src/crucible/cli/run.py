"""`crucible run`: plan a job over tasks, run it with a live progress bar, print the summary."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from crucible.cli.common import (
    ENV_PARAM_HELP,
    CreateRateOpt,
    ExecutorOpt,
    JobsDirOpt,
    MaxBuildsOpt,
    MaxStartingOpt,
    RayAddressOpt,
    SharedStoreOpt,
    err_console,
    fail,
    fail_from,
    parse_params,
    print_json,
    read_toml,
)
from crucible.cli.datasets import DatasetOpt, DatasetsDirOpt, RegistryOpt, dataset_paths
from crucible.cli.run_output import print_invalid as _print_invalid
from crucible.cli.run_output import print_unsupported as _print_unsupported
from crucible.cli.run_output import print_warnings as _print_warnings
from crucible.cli.task_env import TaskEnvFileOpt, TaskEnvOpt, task_env_names
from crucible.errors import ExitCode
from crucible.records.defaults import (
    DEFAULT_AGENT,
    DEFAULT_ATTEMPTS,
    DEFAULT_CONCURRENCY,
    DEFAULT_ENV,
    DEFAULT_GPU_CONCURRENCY,
    DEFAULT_MAX_RETRIES,
)

if TYPE_CHECKING:
    from crucible.engine.job import JobRunner
    from crucible.engine.request import RunRequest
    from crucible.records.job import JobSummary


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(
        paths: list[Path] = typer.Argument(None, help="Task directories, or folders of tasks."),
        dataset: list[str] = DatasetOpt,
        registry: str = RegistryOpt,
        datasets_dir: Path = DatasetsDirOpt,
        agent: list[str] = typer.Option(
            [],
            "--agent",
            "-a",
            help="oracle, nop, terminal, command, or a plugin; repeat it (or --model) for a "
            f"sweep: every agent x model as sibling jobs. [default: {DEFAULT_AGENT}]",
        ),
        attempts: int = typer.Option(
            None,
            "--attempts",
            "-k",
            help=f"Attempts per task (pass@k up to k). [default: {DEFAULT_ATTEMPTS}]",
        ),
        concurrency: int = typer.Option(
            None,
            "--concurrency",
            "-c",
            help=f"Trials running at once. [default: {DEFAULT_CONCURRENCY}]",
        ),
        env: str = typer.Option(
            None,
            "--env",
            "-e",
            help=f"Sandbox provider: local, docker, modal, simulated. [default: {DEFAULT_ENV}]",
        ),
        env_param: list[str] = typer.Option([], "--env-param", help=ENV_PARAM_HELP),
        jobs_dir: Path = JobsDirOpt,
        job_name: str = typer.Option(
            None, "--job-name", help="Job id; an existing job of that name is resumed."
        ),
        resume: str = typer.Option(
            None, "--resume", help="Resume job ID: run only trials without a final record."
        ),
        retry_errors: bool = typer.Option(
            False,
            "--retry-errors",
            help="On resume, also rerun trials whose error left them out of means "
            "(infrastructure, model); never those counted 0 (verifier_failed).",
        ),
        include: list[str] = typer.Option(
            [], "--include", "-i", help="Only tasks whose name matches this glob."
        ),
        exclude: list[str] = typer.Option(
            [], "--exclude", "-x", help="Skip tasks whose name matches this glob."
        ),
        skip_invalid: bool = typer.Option(
            False, "--skip-invalid", help="Run the valid tasks even if some are invalid."
        ),
        max_retries: int = typer.Option(
            None,
            "--max-retries",
            help=f"Retries of a trial after sandbox/model failures. [default: {DEFAULT_MAX_RETRIES}]",
        ),
        trial_timeout: float = typer.Option(
            None,
            "--trial-timeout",
            help="Wall limit of one trial in seconds: inside the task's own timeouts it counts "
            "against the attempt (0); past them it is a hang (sandbox failure, retried).",
        ),
        job_timeout: float = typer.Option(
            None,
            "--job-timeout",
            help="Wall limit of the job in seconds; then it is cancelled (resumable).",
        ),
        create_rate: float = CreateRateOpt,
        max_starting: int = MaxStartingOpt,
        max_builds: int = MaxBuildsOpt,
        executor: str = ExecutorOpt,
        ray_address: str = RayAddressOpt,
        shared_store: str = SharedStoreOpt,
        gpu_concurrency: int = typer.Option(
            None,
            "--gpu-concurrency",
            help=f"GPU trials running at once (their own pool). [default: {DEFAULT_GPU_CONCURRENCY}]",
        ),
        no_network: bool = typer.Option(
            None,
            "--no-network",
            help="Run every task without network, whatever its task.toml allows.",
        ),
        task_env: list[str] = TaskEnvOpt,
        task_env_file: Path = TaskEnvFileOpt,
        tampered: str = typer.Option(
            None,
            "--tampered",
            help="flag: record changes to the image's code grading runs (the default); "
            "zero: also count such a trial 0, reason tampered (docs/concepts/trust.md).",
        ),
        model: list[str] = typer.Option(
            [], "--model", "-m", help="Model name for LLM agents (repeatable: a sweep)."
        ),
        sweep: Path = typer.Option(
            None,
            "--sweep",
            help="TOML sweep file: agents and models to cross, extra arms, the baseline "
            "(docs/sweeps.md). Runs them as sibling jobs under one -c budget.",
        ),
        baseline: str = typer.Option(
            None, "--baseline", help="The sweep arm (label) the report compares the others with."
        ),
        model_base_url: str = typer.Option(
            None,
            "--model-base-url",
            help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1.",
        ),
        model_api_key_env: str = typer.Option(
            None,
            "--model-api-key-env",
            help="Env var holding the API key. [default: OPENAI_API_KEY]",
        ),
        context_window: int = typer.Option(
            None, "--context-window", help="Model context window in tokens."
        ),
        max_output_tokens: int = typer.Option(
            None, "--max-output-tokens", help="Max output tokens per turn."
        ),
        temperature: float = typer.Option(None, "--temperature", help="Sampling temperature."),
        max_turns: int = typer.Option(
            None, "--max-turns", help="Turn limit of the terminal agent."
        ),
        docs_index: Path = typer.Option(
            None, "--docs-index", help="Docs index for the terminal agent's docs tool."
        ),
        price_table: Path = typer.Option(
            None,
            "--price-table",
            help="TOML/JSON prices (USD per 1M tokens) extending the built-in table.",
        ),
        agent_kwarg: list[str] = typer.Option(
            [], "--agent-kwarg", help="Extra agent parameter key=value (repeatable)."
        ),
        config: Path = typer.Option(
            None, "--config", help="TOML file with any of these options (CLI wins)."
        ),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
        as_json: bool = typer.Option(
            False, "--json", help="Print the job summary as JSON on stdout."
        ),
    ) -> None:
        """Run an agent on tasks: one sandboxed trial per task and attempt, graded by the task's tests.

        Tasks are PATHS, and those of each -d NAME@VERSION dataset of the
        registry (fetched once into the datasets folder: `crucible datasets`).

        Results go to JOBS_DIR/JOB_ID/<trial>/result.json and an SQLite index. The model
        endpoint and the provider are checked before any sandbox starts. Exit code 0 when at
        least one trial was graded (whatever the rewards), 1 when every trial ended in an
        error, 130 when cancelled. Ctrl-C once winds the job down (resumable); twice forces.
        """
        from pydantic import ValidationError

        from crucible.engine.request import RunRequest

        paths = [*(paths or []), *dataset_paths(dataset, registry, datasets_dir, as_json=as_json)]
        cli: dict[str, Any] = {
            "paths": paths, "agent": agent[0] if len(agent) == 1 else None, "attempts": attempts, "concurrency": concurrency,
            "env": env, "jobs_dir": jobs_dir, "job_name": job_name, "resume": resume,
            "retry_errors": retry_errors, "include": include, "exclude": exclude,
            "skip_invalid": skip_invalid, "max_retries": max_retries,
            "trial_timeout": trial_timeout, "job_timeout": job_timeout,
            "create_rate": create_rate, "max_starting": max_starting, "max_builds": max_builds,
            "executor": executor, "ray_address": ray_address, "shared_store": shared_store,
            "gpu_concurrency": gpu_concurrency, "no_network": no_network, "tampered": tampered,
            "task_env": task_env_names(task_env, task_env_file, as_json),
            "model": model[0] if len(model) == 1 else None, "model_base_url": model_base_url,
            "model_api_key_env": model_api_key_env, "context_window": context_window,
            "max_output_tokens": max_output_tokens, "temperature": temperature,
            "max_turns": max_turns, "docs_index": str(docs_index) if docs_index else None,
            "price_table": str(price_table) if price_table else None,
        }  # fmt: skip
        try:
            request = RunRequest.from_sources(
                cli,
                read_toml(config, "config file", as_json),
                env_params=parse_params(env_param, "--env-param", as_json),
                agent_kwargs=parse_params(agent_kwarg, "--agent-kwarg", as_json),
            )
        except ValidationError as exc:
            fail(ExitCode.USAGE, "usage", f"run options: {exc}", as_json=as_json)
        except ValueError as exc:  # a config key no option reads
            fail(ExitCode.USAGE, "usage", f"config file {config}: {exc}", as_json=as_json)
        from crucible.cli.run_sweep import sweep_arms

        arms = sweep_arms(request, agent, model, sweep, baseline, as_json=as_json)
        if arms is not None:
            from crucible.cli.run_sweep import run_sweep

            raise typer.Exit(asyncio.run(run_sweep(request, *arms, quiet=quiet, as_json=as_json)))
        raise typer.Exit(asyncio.run(_run_job(request, quiet=quiet, as_json=as_json)))


async def _run_job(request: RunRequest, *, quiet: bool, as_json: bool) -> int:
    from crucible.cli.progress import with_progress
    from crucible.cli.run_output import print_summary
    from crucible.engine.launch import LaunchRefused, prepare_launch
    from crucible.errors import CrucibleError

    interactive = not quiet and not as_json and sys.stderr.isatty()
    # A provider or endpoint that does not answer takes seconds to say so: show what is awaited.
    status = err_console.status(
        f"checking the {request.env or 'default'} provider"
        + (" and the model endpoint" if request.agent_kwargs.get("model") else "")
        + " before any sandbox starts"
    )
    try:
        if interactive:
            status.start()
        try:
            plan = await prepare_launch(
                request,
                on_invalid=_print_invalid,
                on_warnings=_print_warnings,
                on_unsupported=_print_unsupported,
            )
        finally:
            status.stop()
    except LaunchRefused as exc:
        fail(exc.code, exc.error, exc.message, hint=exc.hint, as_json=as_json)
    except CrucibleError as exc:
        fail_from(exc, as_json=as_json)
    runner = plan.runner()
    already: list[int] = []
    runner.events.on_start = lambda total, done: already.append(done)
    show_progress = interactive
    _install_signal_handlers(runner)
    try:
        if show_progress:
            summary = await with_progress(runner)
        else:
            summary = await runner.run()
    except CrucibleError as exc:
        fail_from(exc, as_json=as_json)
    finally:
        await plan.provider.aclose()
    rerun = plan.resumed and bool(already) and already[0] >= runner.n_total
    if rerun:
        err_console.print(
            f"[yellow]note[/]: job {escape(runner.cfg.job_id)} had already finished all "
            f"{runner.n_total} trials; nothing was run. Pass another --job-name (or none) for "
            "a new run, or --retry-errors to rerun its errors.",
            highlight=False,
        )
    if as_json:
        print_json(summary.model_dump(mode="json") | {"jobs_dir": str(plan.jobs_dir)})
    else:
        print_summary(runner, summary, plan.jobs_dir, rerun=rerun)
    return _exit_code(summary, runner, as_json=as_json)


def _exit_code(summary: JobSummary, runner: JobRunner, *, as_json: bool) -> int:
    job = runner.cfg.job_id
    if summary.status == "cancelled":
        if not as_json:
            cmd = f"crucible run --resume {job}"
            if _custom_dir(runner):
                cmd += f" --jobs-dir {runner.jobs_dir}"
            err_console.print(
                f"cancelled: {summary.n_done} of {summary.n_trials} trials finished. Resume with:",
                highlight=False,
            )
            # Never wrapped: it is meant to be copied.
            err_console.print(f"  {escape(cmd)}", highlight=False, soft_wrap=True)
        return 130
    graded = summary.outcomes.get("graded", 0)
    if summary.n_done and not graded:
        errors = ", ".join(f"{k} {v}" for k, v in sorted(summary.outcomes.items()))
        msg = f"no trial was graded: {summary.n_done} of {summary.n_trials} ended in an error ({errors})"
        if as_json:
            sys.stderr.write(json.dumps({"error": "nothing_graded", "message": msg}) + "\n")
        else:
            err_console.print(f"[bold red]error[/]: {escape(msg)}", highlight=False)
        return int(ExitCode.ERROR)
    return 0


def _custom_dir(runner: JobRunner) -> bool:
    from crucible.store.layout import default_jobs_dir

    return runner.jobs_dir.resolve() != default_jobs_dir().resolve()


def _install_signal_handlers(runner: JobRunner) -> None:
    loop = asyncio.get_running_loop()
    presses = 0

    def on_sigint() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            err_console.print("[yellow]cancelling: winding down running trials "
                              "(Ctrl-C again to force)[/]")  # fmt: skip
            runner.cancel()
        else:
            _force_exit(runner)

    default_handler = loop.get_exception_handler()

    def on_loop_error(lp: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        # Once cancelled, a sandbox start that fails as it is torn down leaves a future
        # nobody awaits: the trial is already recorded `cancelled`, so asyncio's
        # "Future exception was never retrieved" and its traceback are noise. Keep it
        # in the job log, off the user's terminal.
        if presses and isinstance(context.get("exception"), Exception):
            runner.log.warning(f"after cancel: {context.get('message')}: {context['exception']!r}")
            return
        if default_handler is not None:
            default_handler(lp, context)
        else:
            lp.default_exception_handler(context)

    loop.set_exception_handler(on_loop_error)
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_sigint)
        except (NotImplementedError, RuntimeError):
            pass


def _force_exit(runner: JobRunner) -> None:
    """Second Ctrl-C: mark the job cancelled (resumable) and leave at once."""
    from crucible.store.index import Index

    try:
        idx = Index(runner.jobs_dir)
        idx.set_job_status(runner.cfg.job_id, "cancelled")
        idx.close()
    finally:
        err_console.print("[red]forced exit[/]; resume with "
                          f"`crucible run --resume {runner.cfg.job_id}`")  # fmt: skip
        os._exit(130)
