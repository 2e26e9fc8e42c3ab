"""What the grading service's parts share: its options, a refusal (an HTTP 4xx with
nothing started), a grade's trial plan, and the check that an item can be recorded."""

from __future__ import annotations

from dataclasses import dataclass

from crucible.engine.spec import TrialPlan
from crucible.records.defaults import DEFAULT_MAX_RETRIES
from crucible.records.serve import GradeItem, GradeResult

DEFAULT_MAX_PENDING = 10_000
UNPACED, UNCAPPED = 1e9, 1_000_000  # a start gate's rate and cap when none is asked for
# What submit hands wait for an item: (id, cached) of a grade, or an answer already made.
Ticket = tuple[str, bool] | GradeResult


class Refused(Exception):
    """A request the service refuses as a whole, before anything starts (an HTTP 4xx)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class GradePlan(TrialPlan):
    """A trial named after its grade id (hashed), not after its task and attempt."""

    name: str = ""

    @property
    def trial_name(self) -> str:
        return self.name


@dataclass
class ServiceOptions:
    max_retries: int = DEFAULT_MAX_RETRIES
    retry_base_sec: float = 1.0
    retry_cap_sec: float = 60.0
    trial_timeout_sec: float | None = None
    create_rate: float | None = None
    max_starting: int | None = None
    max_pending: int = DEFAULT_MAX_PENDING  # grades queued or running at once


def check_storable(item: GradeItem) -> None:
    """Text JSON can carry but UTF-8 cannot (a lone surrogate) could not be recorded."""
    try:
        item.model_dump_json()
    except ValueError:
        raise Refused(422, f"item {item.id[:80]!r}: holds text that is not valid UTF-8 "
                           "(a lone surrogate)") from None  # fmt: skip
