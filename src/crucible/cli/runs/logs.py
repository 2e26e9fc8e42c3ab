"""`crucible runs logs`: a job's log lines, merged in time order, paged or followed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from crucible.cli.common import JsonOpt, err_console, fail, print_json, write_text
from crucible.cli.runs.common import (
    JobIdArg,
    JobsDirOpt,
    command,
    jobs_dir_of,
    open_jobs_dir,
    resolve,
    usage,
    when,
)
from crucible.errors import ExitCode

if TYPE_CHECKING:
    from crucible.store.queries import JobRecord

FOLLOW_GRACE_SEC = 5.0


@command("logs")
def logs_cmd(
    job_id: str = JobIdArg,
    jobs_dir: Path | None = JobsDirOpt,
    trial: list[str] = typer.Option(
        [], "--trial", "-t", help="Only this trial (name or prefix; repeatable). Hides job.log."
    ),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep printing new lines until the job stops running."
    ),
    search: str | None = typer.Option(
        None, "--search", "-s", help="Lines containing TEXT (any case)."
    ),
    tail: int | None = typer.Option(
        None, "--tail", "-n", min=0, help="Only the last N matching lines."
    ),
    since: str | None = typer.Option(
        None, "--since", help="Lines from then on: an age (10m) or ISO 8601."
    ),
    until: str | None = typer.Option(None, "--until", help="Lines up to then: an age or ISO 8601."),
    cursor: str | None = typer.Option(
        None, "--cursor", help="Continue after a previous page (its `cursor` field)."
    ),
    limit: int | None = typer.Option(
        None, "--limit", min=1, help="Lines per page. [default: 1000 with --json, else all]"
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Log lines of a job (job.log and every trial.log) with trial and timestamp, in time order.

    With --json: one page {"lines", "cursor", "has_more"}; pass --cursor to get
    the next one, with the same filters (the cursor stays valid while the job
    appends lines, and stays short however many trials the job has). With
    --follow --json: JSON lines, one per log line, then {"event": "end",
    "status", "cursor"} when the job has stopped.
    """
    from crucible.store.log_reader import BadCursor, LogFilter, read_page

    flt = LogFilter(
        trials=trial or None,
        search=search,
        since=when(since, "--since", as_json),
        until=when(until, "--until", as_json),
    )
    with open_jobs_dir(jobs_dir, as_json) as jd:
        rec = resolve(jd, job_id, as_json)
    root = jobs_dir_of(jobs_dir)
    if trial and not (follow and rec.running):  # a running job may start that trial later
        from crucible.store.log_reader import discover_sources

        if not any(flt.wants_source(s) for s in discover_sources(rec.path)):
            fail(
                ExitCode.NOT_FOUND,
                "not_found",
                f"no trial log matches {', '.join(trial)} in job {rec.job_id}",
                hint=f"`crucible runs get {rec.job_id} --verbose` lists its trials",
                as_json=as_json,
            )
    if limit is None and as_json and not follow:
        limit = 1000
    try:
        if follow:
            _follow(root, rec, flt, cursor=cursor, tail=tail, as_json=as_json)
            return
        page = read_page(rec.path, flt, cursor=cursor, limit=limit, tail=tail)
    except BadCursor as exc:
        usage(f"--cursor: {exc}", as_json)
    if as_json:
        print_json(
            {
                "job_id": rec.job_id,
                "status": rec.status,
                "lines": [e.to_json() for e in page.entries],
                "cursor": page.cursor,
                "has_more": page.has_more,
            }
        )
        return
    _write_lines(page.entries)
    if page.has_more:
        err_console.print(f"more lines: --cursor {page.cursor}", style="dim", highlight=False)
    elif not search:
        _write_verifier_tails(rec.path, trial)


def _write_verifier_tails(job_path: Path, trials: list[str]) -> None:
    """After the log: the verifier's last lines of each trial shown that errored or scored 0,
    where the reason (a missing test runner, a failed assertion) usually is."""
    from crucible.cli.common import warn_skipped
    from crucible.store.layout import iter_trial_results
    from crucible.store.log_reader import verifier_tail
    from crucible.store.trial_load import Skipped

    shown = 0
    skipped: list[Skipped] = []
    results = iter_trial_results(job_path, skipped)
    warn_skipped(skipped)
    for r in sorted(results, key=lambda r: r.trial_name):
        if trials and not any(r.trial_name.startswith(t) for t in trials):
            continue
        if r.graded and r.reward:
            continue
        tail = verifier_tail(job_path / r.trial_name)
        if not tail or shown >= 20:
            continue
        if not shown:
            write_text("--- verifier output (last lines) of trials that errored or scored 0 ---\n")
        shown += 1
        why = f"{r.outcome}" + (f": {r.error.message.splitlines()[0]}" if r.error else "")
        write_text(f"{r.trial_name} ({why})\n" + "".join(f"  | {ln}\n" for ln in tail))


def _write_lines(entries: list[Any]) -> None:
    write_text("".join(e.format() + "\n" for e in entries))


def _follow(
    root: Path, rec: JobRecord, flt: Any, *, cursor: str | None, tail: int | None, as_json: bool
) -> None:
    import asyncio
    import time

    from crucible.store.log_reader import CursorState, Entry, follow, read_page
    from crucible.store.procs import pid_alive
    from crucible.store.queries import current_status

    def emit(e: Entry) -> None:
        write_text((json.dumps(e.to_json()) if as_json else e.format()) + "\n")

    start: str | CursorState | None = cursor
    if tail is not None and cursor is None:
        first = read_page(rec.path, flt, tail=tail)
        for e in first.entries:
            emit(e)
        start = first.state

    last_status = {"status": rec.status}
    seen_running = [rec.running]
    stopped_at: list[float] = []

    def is_running() -> bool:
        now = current_status(root, rec.job_id)
        if now is None:
            return False
        last_status["status"] = now.status
        if now.running:
            seen_running[0] = True
            return True
        if not seen_running[0]:
            return False  # finished before we came: nothing more will be written
        # The runner records its final status, then writes its last log lines and
        # exits: while its process lingers (a few seconds at most), keep reading.
        stopped_at.append(time.monotonic())
        return bool(
            now.pid and pid_alive(now.pid) and time.monotonic() - stopped_at[0] < FOLLOW_GRACE_SEC
        )

    async def go() -> str:
        end_cursor = cursor or ""
        async for item in follow(rec.path, flt, is_running, cursor=start):
            if isinstance(item, str):
                end_cursor = item
            else:
                emit(item)
        return end_cursor

    try:
        end = asyncio.run(go())
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if as_json:
        write_text(
            json.dumps({"event": "end", "status": last_status["status"], "cursor": end}) + "\n"
        )
    else:
        err_console.print(f"job {last_status['status']}", style="dim")
