"""`crucible generate -o DIR` (the self-play loop) and `crucible generate report DIR`."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import typer

from crucible.cli.common import (
    ExecutorOpt,
    JobsDirOpt,
    RayAddressOpt,
    SharedStoreOpt,
    fail,
    print_json,
    write_text,
)
from crucible.errors import ExitCode

gen_app = typer.Typer(
    help="Grow a proven curriculum of tasks with a setter and a solver model (docs/generate.md).",
    invoke_without_command=True,
    no_args_is_help=False,
)


def _band(text: str, as_json: bool) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        fail(ExitCode.USAGE, "usage", f"--band {text!r} is not LO,HI", as_json=as_json)
    if not 0.0 <= lo <= hi <= 1.0:
        fail(ExitCode.USAGE, "usage", "--band needs 0 <= LO <= HI <= 1", as_json=as_json)
    return lo, hi


def _categories(path: Path | None, as_json: bool) -> list[str]:
    from crucible.contracts.model import MODERN_IDS

    if path is None:
        return list(MODERN_IDS)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        fail(ExitCode.NOT_FOUND, "not_found", f"--categories {path}: {exc}", as_json=as_json)
    cats = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    if not cats:
        fail(ExitCode.USAGE, "usage", f"--categories {path} names no category", as_json=as_json)
    return list(dict.fromkeys(cats))


def _solver_kwargs(model: str | None, base_url: str | None, key_env: str | None) -> dict[str, Any]:
    kw = {"model": model, "model_base_url": base_url, "model_api_key_env": key_env}
    return {k: v for k, v in kw.items() if v is not None}


@gen_app.callback()
def generate(
    ctx: typer.Context,
    out: Path = typer.Option(None, "--out", "-o", help="Output folder (an existing one resumes)."),
    setter_model: str = typer.Option(None, "--setter-model", help="The setter's model."),
    setter_base_url: str = typer.Option(
        None, "--setter-base-url", help="The setter's OpenAI-compatible endpoint."
    ),
    setter_api_key_env: str = typer.Option(
        "OPENAI_API_KEY", "--setter-api-key-env", help="Env var holding the setter's key."
    ),
    solver_agent: str = typer.Option("terminal", "--solver-agent", help="The solver: any agent."),
    solver_model: str = typer.Option(None, "--solver-model", help="The solver's model."),
    solver_base_url: str = typer.Option(None, "--solver-base-url", help="The solver's endpoint."),
    solver_api_key_env: str = typer.Option(
        None, "--solver-api-key-env", help="Env var holding the solver's key."
    ),
    strong_solver_agent: str = typer.Option(
        None, "--strong-solver", help="Agent that retries never-solved tasks (frontier/suspect)."
    ),
    strong_solver_model: str = typer.Option(None, "--strong-solver-model"),
    strong_solver_base_url: str = typer.Option(None, "--strong-solver-base-url"),
    strong_solver_api_key_env: str = typer.Option(None, "--strong-solver-api-key-env"),
    categories: Path = typer.Option(
        None, "--categories", help="One category id a line. [default: the 25 Modal contract ids]"
    ),
    mode: str = typer.Option("selfplay", "--mode", help="selfplay, mine or issues."),
    source: Path = typer.Option(None, "--source", help="mine: a source folder; issues: a JSONL."),
    domain: str = typer.Option(None, "--domain", help="issues (and mine): the domain."),
    max_tasks: int = typer.Option(10, "--max-tasks", min=1, help="Stop at this many accepted."),
    max_proposals: int = typer.Option(
        None,
        "--max-proposals",
        min=1,
        help="Stop after this many proposals. [default: 3 x max-tasks]",
    ),
    max_tokens: int = typer.Option(None, "--max-tokens", help="Stop past this many tokens."),
    max_cost: float = typer.Option(None, "--max-cost", help="Stop past this many USD."),
    band: str = typer.Option("0.2,0.7", "--band", help="The solver's target pass rate LO,HI."),
    k: int = typer.Option(4, "-k", min=1, help="Solver attempts per task (8 near band edges)."),
    env: str = typer.Option("local", "--env", "-e", help="Sandbox provider."),
    executor: str = ExecutorOpt,
    ray_address: str = RayAddressOpt,
    shared_store: str = SharedStoreOpt,
    concurrency: int = typer.Option(
        1, "--concurrency", "-c", min=1, help="Proposals proven and rated at once."
    ),
    jobs_dir: Path = JobsDirOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the final report as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live progress."),
) -> None:
    """Run the self-play loop: the setter proposes tasks (`propose_task`), crucible proves
    them (oracle 1.0 three times, nop below the band, every failure case below 1, under the
    untrusted-task rules), the solver rates them by pass@k, too-easy tasks are hardened.
    Accepted tasks land in DIR/tasks/, rejections with evidence in DIR/rejected/. Resumable:
    run the same command again. Exit 0 when the run finished."""
    if ctx.invoked_subcommand is not None:
        return
    if out is None or setter_model is None:
        fail(ExitCode.USAGE, "usage", "give -o DIR and --setter-model", as_json=as_json)
    if mode not in ("selfplay", "mine", "issues"):
        fail(ExitCode.USAGE, "usage", f"--mode {mode!r}: selfplay, mine or issues", as_json=as_json)
    if mode != "selfplay" and source is None:
        fail(ExitCode.USAGE, "usage", f"--mode {mode} needs --source PATH", as_json=as_json)
    from crucible.generate.loop import GenConfig, Generator
    from crucible.generate.setter import SetterSpec
    from crucible.generate.solver import SolverSpec
    from crucible.llm.client import resolve_base_url

    try:
        base = resolve_base_url(setter_base_url)
    except ValueError as exc:
        fail(ExitCode.USAGE, "usage", str(exc), as_json=as_json)
    strong = None
    if strong_solver_agent:
        strong = SolverSpec(strong_solver_agent, _solver_kwargs(
            strong_solver_model, strong_solver_base_url, strong_solver_api_key_env))  # fmt: skip
    cfg = GenConfig(
        out=out, setter=SetterSpec(setter_model, base, setter_api_key_env),
        solver=SolverSpec(solver_agent, _solver_kwargs(solver_model, solver_base_url,
                                                       solver_api_key_env)),
        strong=strong, mode=mode, categories=_categories(categories, as_json),
        max_tasks=max_tasks, max_proposals=max_proposals, max_tokens=max_tokens,
        max_cost=max_cost, band=_band(band, as_json), k=k, env=env, source=source,
        executor=executor, ray_address=ray_address, shared_store=shared_store,
        domain=domain, jobs_dir=jobs_dir, concurrency=concurrency,
    )  # fmt: skip
    from crucible.agents.registry import get_agent

    for spec in (cfg.solver, *([cfg.strong] if cfg.strong else [])):
        try:  # before the setter is paid for anything: the solver must be one that runs
            get_agent(spec.agent, **spec.kwargs)
        except (KeyError, TypeError, ValueError) as exc:
            fail(ExitCode.USAGE, "usage", f"solver {spec.agent!r}: {exc}", as_json=as_json)
    from crucible.cli.generate_progress import run_with_progress
    from crucible.engine.launch import LaunchRefused

    live = not quiet and not as_json and sys.stderr.isatty()
    try:
        report = asyncio.run(run_with_progress(Generator(cfg), live=live, quiet=quiet or as_json))
    except LaunchRefused as exc:  # a check's job could not start (the run is resumable)
        fail(exc.code, exc.error, exc.message, hint=exc.hint, as_json=as_json)
    except Exception as exc:
        from crucible.errors import CrucibleError

        if isinstance(exc, CrucibleError):
            from crucible.cli.common import fail_from

            fail_from(exc, as_json=as_json)
        raise
    if as_json:
        print_json(report)
    else:
        from crucible.generate.report import render_text

        write_text(render_text(report))


@gen_app.command("report")
def report_cmd(
    out: Path = typer.Argument(..., help="A generation run's output folder."),
    as_json: bool = typer.Option(False, "--json", help="The figures as JSON."),
    as_html: bool = typer.Option(False, "--html", help="An HTML page on stdout."),
    price_model: str = typer.Option(
        None, "--price-model", help="Also price the recorded tokens at this model's list price."
    ),
    min_in_band: int = typer.Option(
        1, "--min-in-band", "-m", help="In-band tasks a category needs."
    ),
) -> None:
    """The funnel, rejections by reason, coverage, contracts per task, pass@k, hardening by
    operator, tokens and cost per accepted task, and the collapse alarm."""
    from crucible.generate.report import build, render_html, render_text
    from crucible.generate.state import load_state

    try:
        state = load_state(out)
    except ValueError as exc:
        fail(ExitCode.ERROR, "invalid_state", f"{out}/state.json: {exc}", as_json=as_json)
    if state is None:
        fail(ExitCode.NOT_FOUND, "not_found", f"no generation run in {out}", as_json=as_json)
    r = build(state, price_model=price_model, min_in_band=min_in_band)
    if as_json:
        print_json(r)
    elif as_html:
        write_text(render_html(r))
    else:
        write_text(render_text(r))


def register(app: typer.Typer) -> None:
    app.add_typer(gen_app, name="generate")
