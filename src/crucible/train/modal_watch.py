"""The host side of a remote training run: the sandbox's output, line by line, into the run.

A line `@@crucible-train <nonce> <json>` with this launch's nonce is one scored sample
(train/remote.py); every `per_step` of them (batch_size x samples_per_prompt) make a step,
recorded as StepMetrics with the mean reward and components, and the samples beside it
(capped by the run's trace_samples). Any other line is the trainer's log. The output is
untrusted (the trainer prints model text): a marker line with a wrong or no nonce, one
that is not JSON, too long, or not a sample with finite numbers is logged, never counted.
"""

from __future__ import annotations

import hmac
import statistics
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from crucible.records.train import SampleRecord, StepMetrics
from crucible.train.remote import MARKER

if TYPE_CHECKING:
    from crucible.train.run import RunHandle

MAX_LINE = 64 * 1024  # characters; a longer marker line is not a sample
MAX_COMPONENTS = 64


class RemoteSample(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(max_length=20000)
    response: str = Field(max_length=20000)
    reward: float = Field(allow_inf_nan=False)
    components: dict[str, float] = Field(default_factory=dict)
    label: str | int | float | None = None

    @field_validator("components")
    @classmethod
    def _finite(cls, v: dict[str, float]) -> dict[str, float]:
        if len(v) > MAX_COMPONENTS:
            raise ValueError("too many components")
        if any(x != x or x in (float("inf"), float("-inf")) for x in v.values()):
            raise ValueError("components must be finite")
        return v


class Watcher:
    """Feed it the sandbox's output; it records steps and samples into the run."""

    def __init__(self, run: RunHandle, nonce: str, per_step: int) -> None:
        self.run, self.nonce, self.per_step = run, nonce, max(1, per_step)
        self.step = 0
        self._pending: list[RemoteSample] = []
        self._partial = ""
        self.rejected = 0

    def feed(self, chunk: str) -> None:
        data = self._partial + chunk
        *lines, self._partial = data.split("\n")
        if len(self._partial) > MAX_LINE:  # a line that never ends is not a sample
            self.run.log(self._partial[:2000] + " [cut]")
            self._partial = ""
        for line in lines:
            self.line(line.rstrip("\r"))

    def close(self) -> None:
        if self._partial:
            self.line(self._partial)
            self._partial = ""
        if self._pending:
            self._flush()

    def line(self, line: str) -> None:
        sample = self._parse(line)
        if sample is None:
            if line.strip():
                self.run.log(line[:4000])
            return
        self._pending.append(sample)
        if len(self._pending) >= self.per_step:
            self._flush()

    def _parse(self, line: str) -> RemoteSample | None:
        if not line.startswith(MARKER + " "):
            return None
        _, _, rest = line.partition(" ")
        nonce, _, body = rest.partition(" ")
        if len(line) > MAX_LINE or not hmac.compare_digest(nonce.encode(), self.nonce.encode()):
            self.rejected += 1
            return None
        try:
            return RemoteSample.model_validate_json(body)
        except ValidationError:
            self.rejected += 1
            return None

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        self.step += 1
        totals = [s.reward for s in batch]
        comps: dict[str, list[float]] = {}
        for s in batch:
            for k, v in s.components.items():
                comps.setdefault(k, []).append(v)
        self.run.add_samples([SampleRecord(step=self.step, index=i, prompt=s.prompt,
                                           response=s.response, reward=s.reward,
                                           components=s.components, label=s.label)
                              for i, s in enumerate(batch)])  # fmt: skip
        self.run.add_step(StepMetrics(
            step=self.step, reward_mean=statistics.fmean(totals),
            reward_std=statistics.pstdev(totals) if len(totals) > 1 else 0.0,
            components={k: statistics.fmean(v) for k, v in comps.items()},
            n_samples=len(batch)))  # fmt: skip
        self.run.log(f"step {self.step}: reward {statistics.fmean(totals):.4f} over "
                     f"{len(batch)} samples")  # fmt: skip

    def summary(self) -> dict[str, Any]:
        return {"steps": self.step, "rejected_lines": self.rejected}
