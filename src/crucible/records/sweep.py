"""A sweep's record (<jobs-dir>/.sweeps/<id>.json): the agent x model arms run as sibling jobs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from crucible.records.trial import utcnow


class SweepArm(BaseModel):
    """One cell of the matrix: an agent (with its own options) and a model, run as one job."""

    model_config = ConfigDict(extra="forbid")

    label: str
    agent: str
    model: str | None = None
    # Options of this arm only (model_base_url, tool_mode, ...), over the sweep's shared ones.
    agent_kwargs: dict[str, Any] = Field(default_factory=dict)
    job_id: str = ""


class SweepRecord(BaseModel):
    schema_version: int = 1
    sweep_id: str
    created_at: datetime = Field(default_factory=utcnow)
    concurrency: int  # trials running at once across every arm (one shared budget)
    baseline: str  # the label every other arm is compared with, paired by task
    arms: list[SweepArm]

    def arm(self, label: str) -> SweepArm | None:
        return next((a for a in self.arms if a.label == label), None)
