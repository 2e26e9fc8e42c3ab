"""Trials that ended as their task says they would: a task whose `[metadata]` has
`expected_outcome = "verifier_failed"` (the `verifier-timeout` example) is meant to fail,
and the run's summary says so, with the task's `expected_reason`, rather than leave a
mean below 1 and an error unexplained. An outcome the metadata does not name is not
excused."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crucible.records.trial import TrialResult
    from crucible.tasks.models import Task

MAX_REASON = 200


def expected_failures(tasks: list[Task], results: list[TrialResult]) -> list[TrialResult]:
    """The trials that ended without a grade exactly as their task's metadata expects."""
    expect = {t.name: t.metadata.get("expected_outcome") for t in tasks}
    return [r for r in results if r.outcome != "graded" and expect.get(r.task_name) == r.outcome]


def expected_note(tasks: list[Task], results: list[TrialResult]) -> str | None:
    """`1 trial expected to fail: verifier-timeout (expected verifier_failed: REASON)`."""
    failed = expected_failures(tasks, results)
    if not failed:
        return None
    by_task = Counter((r.task_name, r.outcome) for r in failed)
    reasons = {t.name: t.metadata.get("expected_reason") for t in tasks}
    parts = []
    for (name, outcome), n in sorted(by_task.items()):
        reason = reasons.get(name)
        why = f": {str(reason)[:MAX_REASON]}" if reason else ""
        parts.append(f"{name} ({f'{n} trials, ' if n > 1 else ''}expected {outcome}{why})")
    n = len(failed)
    return f"{n} trial{'s' if n > 1 else ''} expected to fail: " + "; ".join(parts)
