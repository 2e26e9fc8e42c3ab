"""What a running trial is doing now, for the progress line, and its model retry budget.

The job sets one `LiveTrial` per trial in a context variable around each try; the
trial's phases (engine/trial.py) and the model client's retry loop (llm/client.py)
write to it, and the progress display reads it: the phase and since when, and a note
while a model call is being retried ("retrying (model HTTP 500, 2/7)"). Nothing here
is stored: it lives as long as the job's process.

The budget is the trial's, across its tries: the HTTP retries inside a try and the
job's retries of a `model_failed` trial draw from it, so an endpoint that answers 500
costs one series of backoffs per trial, not one per try.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass
class RetryBudget:
    """Failed HTTP attempts in a row at a model endpoint, over every try of one trial.
    The first client to use it sets the limit (its max_retries + 1); a success resets
    the count, so only an endpoint that keeps failing spends it."""

    limit: int | None = None
    used: int = 0
    last: str = ""  # the last failure, for the error once it is spent
    note: str | None = None  # while a retry waits: "retrying (model HTTP 500, 2/7)"

    @property
    def spent(self) -> bool:
        return self.limit is not None and self.used >= self.limit

    def failed(self, why: str) -> bool:
        """Count a failed attempt ("HTTP 500: ..."); True once the budget is spent."""
        self.used, self.last = self.used + 1, why
        self.note = (
            None
            if self.spent
            else (f"retrying (model {why.split(':')[0]}, {self.used + 1}/{self.limit})")
        )
        return self.spent

    def succeeded(self) -> None:
        self.used, self.last, self.note = 0, "", None


@dataclass
class LiveTrial:
    trial_name: str
    phase: str = "starting"
    since: float = field(default_factory=time.monotonic)  # when the phase began
    started: float = field(default_factory=time.monotonic)  # when this try began
    budget: RetryBudget = field(default_factory=RetryBudget)


CURRENT: ContextVar[LiveTrial | None] = ContextVar("crucible_live_trial", default=None)


def current() -> LiveTrial | None:
    return CURRENT.get()


def set_phase(name: str) -> None:
    """The running trial (when the job tracks it) entered phase `name`."""
    live = CURRENT.get()
    if live is not None:
        live.phase, live.since = name, time.monotonic()


def trial_budget(limit: int) -> RetryBudget:
    """The running trial's model retry budget (a fresh one outside a trial)."""
    live = CURRENT.get()
    budget = live.budget if live is not None else RetryBudget()
    if budget.limit is None:
        budget.limit = limit
    return budget
