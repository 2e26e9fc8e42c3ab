"""What the ATIF converters share: the file name, caps on untrusted text, step building, validation.

The converters read logs written by code in the sandbox (an installed agent's
stdout, the model's replies), so every string is capped, every JSON value is
type-checked before use, and a malformed line is skipped, never raised.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from atif import Agent, FinalMetrics, Metrics, Observation, ObservationResult, Step, ToolCall
from atif import Trajectory as Atif

from crucible.store.layout import write_json_atomic

SCHEMA_VERSION = "ATIF-v1.8"
# Harbor names its ATIF file trajectory.json in the agent's log folder; in crucible that
# name is the terminal agent's own record, so ATIF sits beside it under this name.
ATIF_FILE = "trajectory.atif.json"
TEXT_CAP = 100_000  # characters of one message or observation kept
MAX_STEPS = 5_000
MAX_LINE = 4 * 1024 * 1024  # bytes of one JSONL line parsed; longer ones are skipped

__all__ = [
    "ATIF_FILE",
    "SCHEMA_VERSION",
    "Atif",
    "Steps",
    "cap",
    "json_lines",
    "write_atif",
]


def cap(value: Any) -> str:
    """A string from anything, cut to TEXT_CAP with a marker."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) > TEXT_CAP:
        return text[:TEXT_CAP] + f"\n[... {len(text) - TEXT_CAP} characters cut]"
    return text


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return max(int(value), 0)


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL text; other lines (and oversized ones) are skipped."""
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{") or len(line) > MAX_LINE:
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def arguments(value: Any) -> dict[str, Any]:
    """Tool-call arguments as a JSON object: a JSON string is parsed, anything else wrapped."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            return {"input": cap(value)}
        return parsed if isinstance(parsed, dict) else {"input": parsed}
    return {} if value is None else {"input": value}


def timestamp(value: Any) -> str | None:
    """An ISO 8601 string, or None when the value is not one."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        Step.model_validate({"step_id": 1, "source": "user", "message": "", "timestamp": value})
    except ValueError:
        return None
    return value


class Steps:
    """Builds the step list: ids in order, tool calls matched to their results."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.dropped = 0

    def add(self, source: str, message: Any, **fields: Any) -> Step | None:
        if len(self.steps) >= MAX_STEPS:
            self.dropped += 1
            return None
        if source != "agent":
            fields = {k: v for k, v in fields.items() if k in ("timestamp", "extra")}
        step = Step(step_id=len(self.steps) + 1, source=source, message=cap(message), **fields)  # type: ignore[arg-type]
        self.steps.append(step)
        return step

    def last_agent(self) -> Step | None:
        return self.steps[-1] if self.steps and self.steps[-1].source == "agent" else None

    def call(self, step: Step, call_id: str, name: str, args: Any, **extra: Any) -> None:
        tc = ToolCall(
            tool_call_id=call_id or f"call_{step.step_id}_{len(step.tool_calls or [])}",
            function_name=cap(name) or "tool",
            arguments=arguments(args),
            extra=extra or None,
        )
        step.tool_calls = [*(step.tool_calls or []), tc]

    def result(self, step: Step, call_id: str | None, content: Any, **extra: Any) -> None:
        known = {tc.tool_call_id for tc in step.tool_calls or []}
        res = ObservationResult(
            source_call_id=call_id if call_id in known else None,
            content=cap(content),
            extra={k: v for k, v in extra.items() if v is not None} or None,
        )
        obs = step.observation or Observation(results=[])
        obs.results.append(res)
        step.observation = obs

    def result_for(self, call_id: str, content: Any, **extra: Any) -> bool:
        """Attach a result to the latest agent step that made call `call_id`."""
        for step in reversed(self.steps[-50:]):
            if any(tc.tool_call_id == call_id for tc in step.tool_calls or []):
                self.result(step, call_id, content, **extra)
                return True
        return False

    def build(
        self, agent: Agent, session_id: str | None = None, extra: dict[str, Any] | None = None
    ) -> Atif:
        notes = f"{self.dropped} step(s) beyond {MAX_STEPS} dropped" if self.dropped else None
        totals = FinalMetrics(total_steps=len(self.steps) + self.dropped)
        for s in self.steps:
            m = s.metrics
            if m is None:
                continue
            for total, part in (
                ("total_prompt_tokens", m.prompt_tokens),
                ("total_completion_tokens", m.completion_tokens),
                ("total_cached_tokens", m.cached_tokens),
                ("total_cost_usd", m.cost_usd),
            ):
                if part is not None:
                    setattr(totals, total, (getattr(totals, total) or 0) + part)
        doc = Atif(
            schema_version=SCHEMA_VERSION,
            session_id=session_id,
            agent=agent,
            steps=self.steps,
            notes=notes,
            final_metrics=totals,
            extra=extra or None,
        )
        # the models validate on construction, not on later mutation: check the whole
        return Atif.model_validate(doc.model_dump(mode="json", exclude_none=True))


def metrics(
    prompt: Any = None,
    completion: Any = None,
    cached: Any = None,
    cost: Any = None,
    **more: Any,
) -> Metrics | None:
    values = {
        "prompt_tokens": as_int(prompt),
        "completion_tokens": as_int(completion),
        "cached_tokens": as_int(cached),
        "cost_usd": float(cost)
        if isinstance(cost, int | float) and not isinstance(cost, bool)
        else None,
        **{k: v for k, v in more.items() if v is not None},
    }
    values = {k: v for k, v in values.items() if v is not None}
    return Metrics.model_validate(values) if values else None


def write_atif(doc: Atif, logs_dir: Path) -> Path:
    logs_dir.mkdir(parents=True, exist_ok=True)
    path = logs_dir / ATIF_FILE
    write_json_atomic(path, json.dumps(doc.to_json_dict(), indent=1))
    return path
