"""`crucible run` with several agents or models: the sweep's arms as sibling jobs, one budget."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from crucible.cli.common import console, err_console, fail, fail_from, print_json, read_toml
from crucible.errors import ExitCode

if TYPE_CHECKING:
    from crucible.engine.job import JobRunner
    from crucible.engine.request import RunRequest
    from crucible.records.job import JobSummary
    from crucible.records.sweep import SweepArm, SweepRecord


def sweep_arms(
    request: RunRequest,
    agents: list[str],
    models: list[str],
    sweep_file: Path | None,
    baseline: str | None,
    *,
    as_json: bool,
) -> tuple[SweepRecord, bool] | None:
    """The sweep this command asks for (and whether it resumes a recorded one), or None
    for a plain run: one agent, one model, no sweep file, no sweep id to resume."""
    from crucible.engine.plan import new_job_id
    from crucible.engine.sweep import SweepError, plan_arms, read_sweep
    from crucible.errors import UnknownKey
    from crucible.records.sweep import SweepRecord
    from crucible.store.layout import default_jobs_dir

    jobs_dir = request.jobs_dir or default_jobs_dir()
    if request.resume:
        recorded = read_sweep(jobs_dir, request.resume)
        return None if recorded is None else (recorded, True)
    if len(agents) <= 1 and len(models) <= 1 and sweep_file is None:
        if baseline is not None:
            fail(ExitCode.USAGE, "usage", "--baseline needs a sweep", as_json=as_json)
        return None
    sweep_id = request.job_name or f"sweep-{new_job_id()}"
    recorded = read_sweep(jobs_dir, sweep_id)
    if recorded is not None:  # the same command again: its arms resume
        return recorded, True
    try:
        arms, file_baseline = plan_arms(
            agents, models, read_toml(sweep_file, "sweep file", as_json)
        )
    except (SweepError, UnknownKey) as exc:
        fail(ExitCode.USAGE, "usage", str(exc), as_json=as_json)
    if not arms:
        fail(ExitCode.USAGE, "usage", "the sweep has no arms: give --agent values", as_json=as_json)
    chosen = baseline or file_baseline or arms[0].label
    if chosen not in {a.label for a in arms}:
        known = ", ".join(a.label for a in arms)
        fail(ExitCode.USAGE, "usage", f"--baseline {chosen!r} is not an arm; arms: {known}",
             as_json=as_json)  # fmt: skip
    from crucible.engine.sweep import slug

    for arm in arms:
        arm.job_id = f"{sweep_id}.{slug(arm.label)}"
    # The budget is settled once the first arm's provider is known (prepare_launch).
    return SweepRecord(sweep_id=sweep_id, concurrency=0, baseline=chosen, arms=arms), False


async def run_sweep(
    request: RunRequest, sweep: SweepRecord, resumed: bool, *, quiet: bool, as_json: bool
) -> int:
    """Plan every arm (each checked before any starts), record the sweep, run the arms
    together, print one row per arm. `resumed`: the sweep was recorded by an earlier run."""
    from crucible.cli.run_output import print_invalid as _print_invalid
    from crucible.cli.run_output import print_unsupported as _print_unsupported
    from crucible.cli.run_output import print_warnings as _print_warnings
    from crucible.engine.launch import LaunchRefused, prepare_launch
    from crucible.engine.sweep import arm_request, record_sweep, sibling_runners
    from crucible.errors import CrucibleError
    from crucible.store.layout import default_jobs_dir

    jobs_dir = request.jobs_dir or default_jobs_dir()
    plans = []
    try:
        for i, arm in enumerate(sweep.arms):
            # A job of that id resumes (a sweep run again, or --resume SWEEP), else starts.
            req = arm_request(request, arm, arm.job_id)
            if (jobs_dir / arm.job_id / "job.json").is_file() and not request.agent_kwargs:
                # `--resume SWEEP`: each arm as recorded (agent, model, endpoint, options)
                req = request.model_copy(update={"job_name": arm.job_id, "resume": None})
            if sweep.concurrency:
                req = req.model_copy(update={"concurrency": sweep.concurrency})
            plans.append(
                await prepare_launch(
                    req,
                    # the tasks are the same for every arm: said once
                    on_invalid=_print_invalid if i == 0 else None,
                    on_warnings=_print_warnings if i == 0 else None,
                    on_unsupported=_print_unsupported if i == 0 else None,
                )
            )
            if not sweep.concurrency:
                sweep.concurrency = plans[0].cfg.concurrency
    except LaunchRefused as exc:
        await _close(plans)
        fail(exc.code, exc.error, f"sweep arm {arm.label!r}: {exc.message}", hint=exc.hint,
             as_json=as_json)  # fmt: skip
    except CrucibleError as exc:
        await _close(plans)
        fail_from(exc, as_json=as_json)
    if resumed and not as_json:
        err_console.print(f"resuming sweep {escape(sweep.sweep_id)}: {len(plans)} arms")
    record_sweep(jobs_dir, sweep)
    runners = sibling_runners(plans, sweep.concurrency)
    _cancel_all_on_signal(runners)
    try:
        if not quiet and not as_json and sys.stderr.isatty():
            from crucible.cli.progress import with_progress_many

            summaries = await with_progress_many(
                [(arm.label, r) for arm, r in zip(sweep.arms, runners, strict=True)]
            )
        else:
            summaries = list(await asyncio.gather(*(r.run() for r in runners)))
    except CrucibleError as exc:
        fail_from(exc, as_json=as_json)
    finally:
        await _close(plans)
    _print(sweep, summaries, jobs_dir, as_json=as_json)
    if any(s.status == "cancelled" for s in summaries):
        return 130
    if all(s.n_done and not s.outcomes.get("graded") for s in summaries):
        return int(ExitCode.ERROR)
    return 0


async def _close(plans: list[Any]) -> None:
    for plan in plans:
        await plan.provider.aclose()


def _cancel_all_on_signal(runners: list[JobRunner]) -> None:
    loop = asyncio.get_running_loop()

    def cancel() -> None:
        err_console.print("[yellow]cancelling every arm of the sweep (resumable)[/]")
        for r in runners:
            r.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, cancel)
        except (NotImplementedError, RuntimeError):
            pass


def _print(
    sweep: SweepRecord, summaries: list[JobSummary], jobs_dir: Path, *, as_json: bool
) -> None:
    rows = [
        (arm, s) for arm, s in zip(sweep.arms, summaries, strict=True)
    ]  # the arms in the sweep's order
    if as_json:
        print_json(
            {
                "sweep_id": sweep.sweep_id,
                "baseline": sweep.baseline,
                "concurrency": sweep.concurrency,
                "jobs_dir": str(jobs_dir),
                "arms": [
                    _arm_json(arm) | {"summary": s.model_dump(mode="json")} for arm, s in rows
                ],
            }
        )
        return
    table = Table(title=f"sweep {escape(sweep.sweep_id)} (concurrency {sweep.concurrency})")
    for col in ("arm", "job", "trials", "graded", "mean reward", "status"):
        table.add_column(col)
    for arm, s in rows:
        mean = f"{s.mean_reward:.3f}" if s.mean_reward is not None else "-"
        table.add_row(
            escape(arm.label) + (" (baseline)" if arm.label == sweep.baseline else ""),
            escape(arm.job_id),
            f"{s.n_done}/{s.n_trials}",
            str(s.outcomes.get("graded", 0)),
            mean,
            s.status,
        )
    console.print(table)
    cmd = f"crucible report {sweep.sweep_id}"
    if jobs_dir.resolve() != _default().resolve():
        cmd += f" --jobs-dir {jobs_dir}"
    console.print(f"compare the arms: [bold]{escape(cmd)}[/]", highlight=False, soft_wrap=True)


def _arm_json(arm: SweepArm) -> dict[str, Any]:
    return arm.model_dump(mode="json", exclude={"agent_kwargs"}) | {
        "agent_kwargs": {k: v for k, v in arm.agent_kwargs.items() if "key" not in k.lower()}
    }


def _default() -> Path:
    from crucible.store.layout import default_jobs_dir

    return default_jobs_dir()
