"""The live progress line of `crucible run`.

    job-x ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 3/90 running 8 | queued 79 | done 3 |
      mean 0.667 | errors 0 | retries 1 | slowest t__0: verifier 92s | ETA 4m10s 0:01:23

The bar and its count are the trials that finished (graded or ended in an error): a
cancelled trial is counted apart, never as done, since a resume runs it again. The
slowest running trial is the one longest in its phase, so a 90 s verifier stage reads as
a verifier at work, not a hang; a model call being retried says so instead of its phase
("retrying (model HTTP 500, 2/7)"). The ETA is the trials left over this run's rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.progress import ProgressColumn
from rich.text import Text

if TYPE_CHECKING:
    from rich.progress import Task

    from crucible.engine.job import JobRunner
    from crucible.records.job import JobSummary
    from crucible.records.trial import TrialResult

PHASES = {"environment_setup": "setup", "agent_execution": "agent", "verifier": "verifier"}


def fmt_duration(sec: float) -> str:
    s = int(sec)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class LiveProgress:
    """Counts kept from the job's events; the line is read from them and the runner's
    running trials whenever the display redraws."""

    def __init__(self, runner: JobRunner, clock: Callable[[], float] = time.monotonic) -> None:
        self.runner = runner
        self.clock = clock
        self.t0 = clock()
        self.done = 0  # finished: graded or ended in an error, this run or an earlier one
        self.finished_now = 0  # finished by this run (the ETA's rate)
        self.cancelled = 0
        self.graded = 0
        self.reward = 0.0
        self.errors = 0
        self.retries = 0

    def attach(self, changed: Callable[[], None] = lambda: None) -> None:
        """Hook the runner's events (after any hook already there)."""
        events = self.runner.events
        previous = events.on_start

        def on_start(total: int, done: int) -> None:
            if previous:
                previous(total, done)
            self.done, self.t0 = done, self.clock()
            changed()

        def on_trial(r: TrialResult) -> None:
            if r.outcome == "cancelled":  # not finished: a resume runs it again
                self.cancelled += 1
            else:
                self.done += 1
                self.finished_now += 1
            if r.counted_reward is not None:  # graded, or verifier_failed as 0
                self.graded += 1
                self.reward += r.counted_reward
            if not r.graded and r.outcome != "cancelled":
                self.errors += 1
            changed()

        def on_retry(*_: Any) -> None:
            self.retries += 1
            changed()

        events.on_start, events.on_trial, events.on_retry = on_start, on_trial, on_retry

    def counts(self) -> tuple[int, int]:
        """(running, queued): queued are the trials neither running nor at an end yet."""
        running = len(self.runner.live)
        left = self.runner.n_total - self.done - self.cancelled
        return running, max(0, left - running)

    def eta(self, now: float) -> str:
        left = self.runner.n_total - self.done - self.cancelled
        if left <= 0:
            return "0s"
        if not self.finished_now or now <= self.t0:
            return "-"
        return fmt_duration(left * (now - self.t0) / self.finished_now)

    def slowest(self, now: float) -> str:
        live = list(self.runner.live.values())
        if not live:
            return ""
        t = min(live, key=lambda x: x.since)
        doing = t.budget.note or f"{PHASES.get(t.phase, t.phase)} {fmt_duration(now - t.since)}"
        out = f"slowest {t.trial_name}: {doing}"
        other = next((x for x in live if x is not t and x.budget.note), None)
        return out + (f" | {other.trial_name}: {other.budget.note}" if other else "")

    def line(self, now: float | None = None) -> str:
        now = self.clock() if now is None else now
        running, queued = self.counts()
        parts = [f"running {running}", f"queued {queued}", f"done {self.done}"]
        if self.cancelled:
            parts.append(f"cancelled {self.cancelled}")
        mean = f"{self.reward / self.graded:.3f}" if self.graded else "-"
        parts += [f"mean {mean}", f"errors {self.errors}", f"retries {self.retries}"]
        if slowest := self.slowest(now):
            parts.append(slowest)
        if running or queued:  # once nothing is left to run, there is nothing to wait for
            parts.append(f"ETA {self.eta(now)}")
        return " | ".join(parts)


class _LineColumn(ProgressColumn):
    """The counts line of each bar's job (a sweep shows one bar per arm)."""

    def __init__(self, lives: dict[Any, LiveProgress]) -> None:
        super().__init__()
        self.lives = lives

    def render(self, task: Task) -> Text:
        live = self.lives.get(task.id)
        return Text(live.line() if live is not None else "")


async def with_progress(runner: JobRunner) -> JobSummary:
    return (await with_progress_many([(runner.cfg.job_id, runner)]))[0]


async def with_progress_many(runners: list[tuple[str, JobRunner]]) -> list[JobSummary]:
    """Run the jobs at once, a bar for each (labelled), and return their summaries."""
    import asyncio

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from crucible.cli.common import err_console

    lives: dict[Any, LiveProgress] = {}
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _LineColumn(lives),
        TimeElapsedColumn(),
        console=err_console,
        transient=False,
        refresh_per_second=2,
    )

    def follow(bar: Any, live: LiveProgress) -> Callable[[], None]:
        return lambda: progress.update(bar, completed=live.done)

    for label, runner in runners:
        live = LiveProgress(runner)
        bar = progress.add_task(escape(label), total=runner.n_total)
        lives[bar] = live
        live.attach(follow(bar, live))
    with progress:
        return list(await asyncio.gather(*(r.run() for _, r in runners)))
