"""The service's counters, and their Prometheus text exposition (format 0.0.4, by hand:
a few counters and gauges need no client library)."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from crucible.sandboxes.ratelimit import StartGate

PREFIX = "crucible_serve"


@dataclass
class Metrics:
    by_status: Counter[str] = field(default_factory=Counter)  # finished grades
    cached: int = 0  # answers given from a grade that had already started or finished
    queued: int = 0  # trials waiting for a sandbox slot
    in_flight: int = 0  # trials holding one
    trials_started: int = 0  # trials run (a retry is another)
    sandboxes_started: int = 0  # creations asked of the provider (a separate verifier's too)
    sandbox_seconds: float = 0.0  # time trials held a slot
    requests: Counter[str] = field(default_factory=Counter)  # answered requests, by code

    def graded(self, status: str) -> None:
        self.by_status[status] += 1

    def render(self, *, sessions: int | None = None) -> str:
        lines: list[str] = []

        def metric(name: str, kind: str, helptext: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {PREFIX}_{name} {helptext}")
            lines.append(f"# TYPE {PREFIX}_{name} {kind}")
            for labels, value in samples:
                lines.append(f"{PREFIX}_{name}{labels} {_num(value)}")

        statuses = sorted({"ok", "invalid", "unscorable", *self.by_status})
        metric("grades_total", "counter", "Grades finished, by status.",
               [(f'{{status="{s}"}}', self.by_status[s]) for s in statuses])  # fmt: skip
        metric("cached_answers_total", "counter",
               "Answers given from a grade already started or finished (no new sandbox).",
               [("", self.cached)])  # fmt: skip
        metric("queue_depth", "gauge", "Trials waiting for a sandbox slot.", [("", self.queued)])
        metric("in_flight", "gauge", "Trials holding a sandbox slot.", [("", self.in_flight)])
        metric("trials_started_total", "counter",
               "Trials started (retries included); each starts a sandbox.",
               [("", self.trials_started)])  # fmt: skip
        metric("sandboxes_started_total", "counter",
               "Sandbox creations asked of the provider (separate verifiers' included).",
               [("", self.sandboxes_started)])  # fmt: skip
        metric("sandbox_seconds_total", "counter", "Seconds trials held a sandbox slot.",
               [("", self.sandbox_seconds)])  # fmt: skip
        metric("requests_total", "counter", "Grade requests answered, by HTTP code.",
               [(f'{{code="{c}"}}', n) for c, n in sorted(self.requests.items())])  # fmt: skip
        if sessions is not None:
            metric("sessions", "gauge", "Open sessions.", [("", sessions)])
        return "\n".join(lines) + "\n"


class CountingGate(StartGate):
    """The service's start gate: the job's pacing (--create-rate, --max-starting), and
    a count of every creation that passes it (every sandbox of a trial does)."""

    def __init__(self, rate: float, max_starting: int, metrics: Metrics) -> None:
        super().__init__(rate, max_starting)
        self.metrics = metrics

    @asynccontextmanager
    async def starting(self) -> AsyncIterator[float]:
        async with super().starting() as granted_at:
            self.metrics.sandboxes_started += 1
            yield granted_at


def _num(value: float) -> str:
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6f}"
