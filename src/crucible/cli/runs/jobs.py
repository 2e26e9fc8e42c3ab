"""`crucible runs list` and `crucible runs get`: jobs as rows, one job in detail."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from crucible.cli.common import JsonOpt, console, print_json, warn_skipped
from crucible.cli.runs.common import (
    JobIdArg,
    JobsDirOpt,
    command,
    fmt_reward,
    fmt_time,
    jobs_dir_of,
    open_jobs_dir,
    resolve,
    status_style,
    when,
)


@command("list")
def list_cmd(
    jobs_dir: Path | None = JobsDirOpt,
    since: str | None = typer.Option(
        None, "--since", help="Only jobs active since then: an age (2h, 30m, 1d) or ISO 8601."
    ),
    status: str | None = typer.Option(
        None,
        "--status",
        help="running, completed, failed, cancelled, or interrupted (failed because its process died).",
    ),
    agent: str | None = typer.Option(None, "--agent", help="Agent name (glob)."),
    model: str | None = typer.Option(None, "--model", help="Model name (glob)."),
    limit: int = typer.Option(50, "--limit", min=1, help="At most this many jobs, newest first."),
    as_json: bool = JsonOpt,
) -> None:
    """One row per job: status, agent, model, dataset, trials by outcome, mean reward.

    A job recorded as running whose process is gone is shown as failed, with
    interrupted: true; `crucible run --resume ID` continues it. Times are ISO 8601.
    """
    from crucible.store.job_views import ListFilter, list_jobs

    flt = ListFilter(since=when(since, "--since", as_json), status=status, agent=agent, model=model)
    with open_jobs_dir(jobs_dir, as_json) as jd:
        rows, total = list_jobs(jd, flt, limit=limit)
    warn_skipped(jd.skipped, as_json=as_json)
    if as_json:
        print_json(
            {
                "jobs_dir": str(jobs_dir_of(jobs_dir)),
                "jobs": [r.model_dump(mode="json") for r in rows],
                "total": total,
                "has_more": total > len(rows),
            }
        )
        return
    if not rows:
        console.print("no jobs", style="dim")
        return
    from rich.table import Table

    t = Table(show_edge=False, pad_edge=False)
    t.add_column("job", no_wrap=True)
    t.add_column("status", no_wrap=True)
    t.add_column("agent / model", overflow="fold")
    t.add_column("done", justify="right", no_wrap=True)
    t.add_column("err", justify="right", no_wrap=True)
    t.add_column("reward", justify="right", no_wrap=True)
    t.add_column("updated", no_wrap=True)
    for r in rows:
        status_txt = f"[{status_style(r.status)}]{r.status}[/]" + ("*" if r.interrupted else "")
        agent_model = r.agent + (f" / {r.model}" if r.model else "")
        if r.kind != "eval":  # a generation (or training) run: its kind first
            agent_model = f"{r.kind}: {agent_model}"
        t.add_row(
            r.job_id,
            status_txt,
            agent_model,
            f"{r.n_done}/{r.n_trials}",
            str(r.n_errors),
            fmt_reward(r.mean_reward),
            fmt_time(r.updated_at, short=True),
        )
    console.print(t)
    if total > len(rows):
        console.print(f"{total - len(rows)} more; raise --limit to see them", style="dim")
    if any(r.interrupted for r in rows):
        console.print(
            "* interrupted: its process is gone; continue it with `crucible run --resume ID`",
            style="dim",
        )


@command("get")
def get_cmd(
    job_id: str = JobIdArg,
    jobs_dir: Path | None = JobsDirOpt,
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Add the reward over time and a row per trial."
    ),
    trial: str | None = typer.Option(
        None,
        "--trial",
        "-t",
        help="One finished trial (name or unique prefix) in detail: its rewards and each "
        "verifier stage's status, verdict, whole reason, and the judge's tokens and cost.",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Status, progress (done/total), current mean reward and errors by kind of one job."""
    from crucible.store.job_views import job_detail

    with open_jobs_dir(jobs_dir, as_json) as jd:
        rec = resolve(jd, job_id, as_json)
        if trial is not None:
            from crucible.cli.runs.trial import find_trial, print_trial, trial_detail

            print_trial(trial_detail(find_trial(rec.path, trial, as_json)), as_json)
            return
        d = job_detail(jd, rec, verbose=verbose)
    warn_skipped(jd.skipped, as_json=as_json)
    if as_json:
        print_json(d.model_dump(mode="json"))
        return
    from rich.table import Table

    style = status_style(d.status)
    console.print(f"[bold]{d.job_id}[/]  [{style}]{d.status}[/]", highlight=False)
    if d.hint:
        console.print(f"  [yellow]{d.hint}[/]", highlight=False)
    p = d.progress
    pct = f" ({p.fraction:.0%})" if p.fraction is not None else ""
    running = f", {p.in_progress} in progress" if p.in_progress else ""
    running += f", {p.cancelled} cancelled" if p.cancelled else ""
    console.print(f"  agent {d.agent}  model {d.model or '-'}  env {d.env}", highlight=False)
    console.print(f"  progress {p.done}/{p.total}{pct}{running}", highlight=False)
    console.print(
        f"  mean reward {fmt_reward(d.mean_reward)} over {d.n_rewarded} trials (verifier_failed as 0)",
        highlight=False,
    )
    if d.not_fully_graded:  # the rewards stand, but a declared veto or gate did not run
        console.print(f"  {escape(d.not_fully_graded)}", style="yellow", highlight=False)
    if d.pass_at_k:
        console.print(
            "  " + "  ".join(f"{k} {v:.3f}" for k, v in d.pass_at_k.items()), highlight=False
        )
    console.print(f"  created {fmt_time(d.created_at)}  updated {fmt_time(d.updated_at)}")
    if d.cancel_requested and d.status == "running":
        console.print("  cancel requested", style="yellow")
    if d.errors:
        console.print(f"  errors ({d.n_errors}):", style="red")
        for kind, g in d.errors.items():
            msg = (g.example_message or "").splitlines()[0][:100] if g.example_message else ""
            console.print(
                f"    {kind}: {g.count}  e.g. {g.example_trial}: {escape(msg)}", highlight=False
            )
            for line in g.example_output:
                console.print(f"      | {escape(line)}", highlight=False, overflow="fold")
    if verbose and d.reward_over_time:
        pts = d.reward_over_time
        step = max(1, len(pts) // 10)
        shown = pts[step - 1 :: step]
        if shown[-1] is not pts[-1]:
            shown.append(pts[-1])
        console.print("  reward over time (cumulative mean):")
        for pt in shown:
            console.print(
                f"    {fmt_time(pt.finished_at)}  n={pt.n:<5} mean {pt.mean_reward:.3f}",
                highlight=False,
            )
    if verbose and d.trials:
        t = Table(show_edge=False, pad_edge=False)
        for col in ("trial", "outcome", "reward", "seconds", "error"):
            t.add_column(col)
        for tr in d.trials:
            t.add_row(
                tr.trial_name,
                tr.outcome,
                fmt_reward(tr.reward),
                f"{tr.duration_sec:.1f}" if tr.duration_sec is not None else "-",
                escape((tr.error_message or (tr.output_tail or [""])[-1])[:80]),
            )
        console.print(t)
        why = [tr for tr in d.trials if tr.output_tail]
        if why:
            console.print("  verifier output of trials that errored or scored 0 (last lines):")
        for tr in why[:20]:
            console.print(f"    {tr.trial_name}:", highlight=False)
            for line in tr.output_tail:
                console.print(f"      | {escape(line)}", highlight=False, overflow="fold")
        notes = [(tr.trial_name, tr.stage_note) for tr in d.trials if tr.stage_note]
        if notes:  # whole, not cut to a column: a veto's reason is the point
            console.print("  verifier stages:")
            for name, note in notes:
                console.print(f"    {name}: {note}", highlight=False, soft_wrap=True)
