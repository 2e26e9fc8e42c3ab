"""What `crucible run` shows: the live progress line and the closing summary.

The summary answers what a user asks after a run: the reward per task, why
each error happened (its message, and the verifier's last lines where a test
scored 0 or failed), tokens and cost, and how to resume. Numbers never read
`nan`: an undefined mean is `-`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from crucible.cli.common import console, err_console
from crucible.cli.expected import expected_note
from crucible.engine.summary import counted

if TYPE_CHECKING:
    from crucible.engine.job import JobRunner
    from crucible.records.job import JobSummary
    from crucible.records.trial import TrialResult
    from crucible.tasks.problems import Problem

MAX_REASONS = 8  # trials whose reason is printed; the rest are counted
TAIL_LINES = 3


def fmt_mean(total: float, n: int) -> str:
    return f"{total / n:.3f}" if n else "-"


def usage_totals(results: list[TrialResult]) -> tuple[dict[str, int], float | None, int]:
    """Tokens summed over rollouts, total cost (None when no rollout has one), rollouts counted."""
    tokens: Counter[str] = Counter()
    cost: float | None = None
    n = 0
    for r in results:
        a = r.agent_result
        if a is None or (a.n_input_tokens is None and a.n_output_tokens is None):
            continue
        n += 1
        tokens["input"] += a.n_input_tokens or 0
        tokens["cached"] += a.n_cache_tokens or 0
        tokens["output"] += a.n_output_tokens or 0
        if a.cost_usd is not None:
            cost = (cost or 0.0) + a.cost_usd
    return dict(tokens), cost, n


def fmt_tokens(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e4:
        return f"{n / 1e3:.1f}k"
    return f"{n:.0f}"


def fmt_usd(x: float) -> str:
    return f"${x:.4f}" if x < 1 else f"${x:.2f}"


def reason_lines(r: TrialResult, trial_dir: Path) -> list[str]:
    """Why a trial errored or scored 0: its error message, then the verifier's last lines."""
    from crucible.store.log_reader import verifier_tail

    out = []
    if r.error is not None:
        out.append(f"{r.error.kind}: {r.error.message.splitlines()[0] if r.error.message else ''}")
    elif r.agent_result is not None and r.agent_result.error is not None:
        out.append(f"agent {r.agent_result.error.type}: {r.agent_result.error.message[:200]}")
    # the host-side stage that zeroed or stopped it (a contracts gate, a judge's veto)
    if note := (r.verifier_result.stage_note() if r.verifier_result else None):
        score = f"reward {r.reward:g}" if r.reward is not None else "reward 0"
        if r.error is None:
            out.insert(0, f"{score}: {note}")
        else:
            out.append(f"stage {note}")
    if r.error is None or r.outcome == "verifier_failed":
        out += [f"  | {ln}" for ln in verifier_tail(trial_dir, TAIL_LINES)]
    return out


def print_summary(runner: JobRunner, summary: JobSummary, jobs_dir: Path, *, rerun: bool) -> None:
    results = sorted(runner.results.values(), key=lambda r: (r.task_name, r.attempt))
    per_task: dict[str, list[TrialResult]] = defaultdict(list)
    for r in results:
        per_task[r.task_name].append(r)
    if rerun:
        console.print(f"earlier results of job {escape(summary.job_id)}; nothing was run now:")
    title = f"job {summary.job_id} ({summary.status})"
    table = Table(title=escape(title), title_justify="left")
    table.add_column("task", overflow="fold")
    table.add_column("trials", justify="right", no_wrap=True)
    table.add_column("mean reward", justify="right", no_wrap=True)
    table.add_column("outcomes", overflow="fold")
    for name, rs in per_task.items():
        rewards = [v for r in rs if (v := counted(r, summary.primary)) is not None]
        outcomes = Counter(r.outcome for r in rs)
        table.add_row(
            escape(name),
            str(len(rs)),
            fmt_mean(sum(rewards), len(rewards)),
            ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())),
        )
    console.print(table)
    _print_reasons(results, jobs_dir / summary.job_id)
    if note := expected_note(runner.tasks, results):  # the task's [metadata] says so
        console.print(escape(note), highlight=False, soft_wrap=True)
    totals = Table(show_header=False, box=None)
    cancelled = f" ({summary.n_cancelled} cancelled)" if summary.n_cancelled else ""
    totals.add_row("trials", f"{summary.n_done}/{summary.n_trials}{cancelled}")
    errors = {k: v for k, v in summary.outcomes.items() if k not in ("graded", "cancelled")}
    totals.add_row("errors", ", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "none")
    totals.add_row("retries", str(summary.n_retries))
    if summary.n_tampered:  # under every policy (`--tampered zero` also counted them 0)
        policy = runner.cfg.tampered
        totals.add_row(
            "tampered",
            f"{summary.n_tampered} changed code grading runs"
            + (" (counted 0: --tampered zero)" if policy == "zero" else " (--tampered flag)"),
        )
    if summary.n_not_fully_graded:  # rewards stand; a declared veto or gate did not run
        from crucible.records.verifier import not_fully_graded_text

        totals.add_row(
            "not fully graded",
            escape(not_fully_graded_text(summary.n_not_fully_graded, summary.not_fully_graded)),
        )
    totals.add_row(
        "mean reward",
        "-"
        if summary.mean_reward is None
        else f"{summary.mean_reward:.3f}"
        + (f" ({summary.n_excluded} left out: infrastructure)" if summary.n_excluded else "")
        + (
            f" ({summary.n_without_primary} graded without {summary.primary!r}: counted 0)"
            if summary.n_without_primary
            else ""
        ),
    )
    for k, v in summary.pass_at_k.items():
        totals.add_row(k, f"{v:.3f}")
    tokens, cost, n = usage_totals(results)
    if n:
        parts = [f"{k} {fmt_tokens(v)}" for k, v in tokens.items() if v or k != "cached"]
        per = [f"{k} {fmt_tokens(v / n)}" for k, v in tokens.items() if v or k != "cached"]
        totals.add_row("tokens", ", ".join(parts) + f" ({', '.join(per)} per rollout)")
        totals.add_row(
            "cost",
            f"{fmt_usd(cost)} ({fmt_usd(cost / n)} per rollout)"
            if cost is not None
            else "unknown (no price for this model; --price-table adds one)",
        )
    totals.add_row("results", escape(str(jobs_dir / summary.job_id)))
    console.print(totals)


def _print_reasons(results: list[TrialResult], job_dir: Path) -> None:
    """The reason of every error, and of each task that scored 0 everywhere (capped)."""
    picked: list[TrialResult] = [r for r in results if not r.graded and r.outcome != "cancelled"]
    zero_tasks: dict[str, TrialResult] = {}
    for r in results:
        if r.graded and not r.reward:
            zero_tasks.setdefault(r.task_name, r)
    for name, r in zero_tasks.items():
        if all(not x.reward for x in results if x.task_name == name and x.graded):
            picked.append(r)
    if not picked:
        return
    console.print("[bold]why[/] (errors, and tasks that scored 0; `crucible runs get JOB -v`):")
    for r in picked[:MAX_REASONS]:
        lines = reason_lines(r, job_dir / r.trial_name) or ["reward 0"]
        head = lines[0] if not lines[0].startswith("  |") else "reward 0"
        rest = lines[1:] if head is lines[0] else lines
        console.print(f"  {escape(r.trial_name)}: {escape(head)}", highlight=False)
        for ln in rest:
            console.print(f"  {escape(ln)}", highlight=False, overflow="fold")
    if len(picked) > MAX_REASONS:
        console.print(f"  ... and {len(picked) - MAX_REASONS} more", highlight=False)


def print_invalid(path: Path, problems: list[Problem]) -> None:
    err_console.print(f"[red]invalid task[/] {path}", highlight=False)
    for p in problems:
        err_console.print(f"  {p}", highlight=False)


def print_unsupported(path: Path, problems: list[Problem]) -> None:
    """A valid task the provider cannot run yet: "unsupported", never "invalid"."""
    err_console.print(f"[yellow]unsupported task[/] {escape(str(path))}", highlight=False)
    for p in problems:
        err_console.print(f"  {escape(str(p))}", highlight=False)


def print_warnings(path: Path, problems: list[Problem]) -> None:
    for p in problems:
        err_console.print(f"[yellow]warning[/] {escape(str(p))}", highlight=False)
