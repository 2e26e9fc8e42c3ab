"""The submission's runtime trace, read as hostile input: the event log an io sandbox
wrote on its side channel, bounded and validated here, then built into a Trace
(modalrt/trace.py) on the host; and the short text of it the judge reads.

What the trace can and cannot prove. The side channel (fd 3) is held only by the io
driver, which is the runtime's dispatching side (modalrt/broker.py): it started every
container and carried every input to it and its reply back, and it records that; the
runner and the workers, which import the program, never hold fd 3, and the driver is
undumpable (no ptrace, no /proc/PID/fd of it for the program's uid). So the program's own
`emit()` and events.jsonl never reach the host, and "ran remotely on a GPU container, 5
inputs by .map" means inputs went through the broker to containers it started with those
resources. What the program claims remains in it: the call kind (remote, map...) and the
resources are its declaration; a worker is the program's code, so what it did with an
input (and a "needs a GPU" failure) is its own. The contracts stage and the judge read
that code. A "needs a GPU" trace never excuses a case (stage.py decides that from the task
before the run). The limits here keep a hostile log (the driver's process shares the
sandbox) from costing the host memory, time or a crash.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from crucible.modalrt.trace import Trace, build_trace
from crucible.records.text import storable

MAX_EVENTS = 20_000
MAX_LINE = 16 << 10  # bytes of one event; longer lines are dropped
MAX_TEXT = 500  # characters of any string field
MAX_WARNINGS = 10  # image warnings kept per function event
MAX_DEPTH = 16  # nesting of one event's JSON: the host's json.dumps of it recurses
SUMMARY_CHARS = 6000  # the judge's text, all cases together
EventKind = Literal[
    "start", "function", "input", "retry", "local", "volume", "app_run", "deploy", "store",
    "entry", "end",
]  # fmt: skip
# fields each kind must have for build_trace
REQUIRED: dict[str, tuple[str, ...]] = {
    "function": ("name",),
    "input": ("function", "via"),
    "retry": ("function",),
    "local": ("function",),
    "volume": ("name", "op"),
    "store": ("type",),
}


class Event(BaseModel):
    """One event line, as build_trace reads it; anything else is dropped."""

    model_config = ConfigDict(extra="ignore")

    kind: str
    name: str | None = None
    function: str | None = None
    type: str | None = None
    via: str | None = None
    op: str | None = None
    resources: dict[str, Any] | None = None
    duration_s: float | None = None
    container: int | None = None
    batch_size: int | None = None
    gpu: str | None = None
    gpu_backing: Literal["gpu", "cpu"] | None = None
    ok: bool | None = None
    error: str | None = None
    needs_gpu: bool | None = None
    entry_kind: str | None = None
    exit_code: int | None = None

    @field_validator(
        "name", "function", "type", "via", "op", "error", "entry_kind", "gpu", mode="before"
    )
    @classmethod
    def _cut(cls, v: Any) -> Any:
        return v[:MAX_TEXT] if isinstance(v, str) else v

    @field_validator("resources")
    @classmethod
    def _warnings(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        # build_trace makes one string per warning, all events together: a 16 KiB string
        # there became 16,000 of them (4 MiB of log held ~400 MiB on the host)
        if v is not None and "image_warnings" in v:
            ws = v["image_warnings"]
            ws = ws[:MAX_WARNINGS] if isinstance(ws, list) else []
            v["image_warnings"] = [w[:MAX_TEXT] for w in ws if isinstance(w, str)]
        return v


def _too_deep(value: Any) -> bool:
    """Nested deeper than MAX_DEPTH (walked without recursion: the line is hostile)."""
    todo = [(value, 1)]
    while todo:
        v, depth = todo.pop()
        if isinstance(v, dict | list):
            if depth > MAX_DEPTH:
                return True
            todo += [(x, depth + 1) for x in (v.values() if isinstance(v, dict) else v)]
    return False


def parse_events(raw: bytes) -> tuple[list[dict[str, Any]], int]:
    """The valid events of a side channel's bytes, and how many lines were dropped."""
    events: list[dict[str, Any]] = []
    dropped = 0
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        if len(events) >= MAX_EVENTS or len(line) > MAX_LINE:
            dropped += 1
            continue
        try:
            value = json.loads(line)
            if _too_deep(value):
                raise ValueError("nested too deeply")
            ev = Event.model_validate(value)
        except (ValueError, ValidationError, RecursionError):
            dropped += 1
            continue
        if ev.kind not in EventKind.__args__ or any(  # type: ignore[attr-defined]
            getattr(ev, f) is None for f in REQUIRED.get(ev.kind, ())
        ):
            dropped += 1
            continue
        events.append(storable(ev.model_dump(exclude_none=True)))  # "\udcff" is valid JSON
    return events, dropped


def host_trace(raw: bytes, program: str, entrypoint: str | None, exit_code: int) -> Trace:
    """The trace of one run from its (hostile) side channel; never raises on bad input."""
    events, _ = parse_events(raw)
    try:
        return build_trace(events, program, entrypoint, exit_code)
    except (ValueError, TypeError, KeyError, AttributeError, ValidationError):
        # a well-formed but absurd log (a resources dict of the wrong shapes): no trace
        return build_trace([], program, entrypoint, exit_code)


def _resources(res: dict[str, Any]) -> str:
    keys = ("gpu", "cpu", "memory", "volumes", "secrets", "max_containers", "retries", "timeout")
    parts = [f"{k}={json.dumps(res[k])[:60]}" for k in keys if res.get(k)]
    return ", ".join(parts) or "none"


def summary(case: int, trace: Trace) -> str:
    """A few lines on one case's run for the judge: what ran remotely, with what."""
    head = f"case {case}: status {trace.status}, exit {trace.exit_code}"
    if trace.error:
        head += f", error: {trace.error[:200]}"
    lines = [head]
    for f in trace.functions[:20]:
        calls = ", ".join(f"{k} {v}" for k, v in sorted(f.inputs_by_call.items())) or "none"
        line = (
            f"  {f.name} ({f.type}): {f.remote_inputs} inputs in containers (by call: {calls}), "
            f"{f.local_calls} local calls, {f.failed_inputs} failed; resources: "
            f"{_resources(f.resources)}"
        )
        if f.gpu_backing:
            line += f"; GPU request ran on: {f.gpu_backing}"
        if f.errors:
            line += f"; errors: {'; '.join(e[:120] for e in f.errors[:2])}"
        lines.append(line)
    shown = sorted(k for k, v in trace.evidence.items() if v)
    lines.append(f"  exercised: {', '.join(shown) or 'nothing'}")
    return "\n".join(lines)


def judge_text(parts: list[str]) -> str:
    """Every case's summary, bounded, with what the trace is and is not."""
    head = (
        "Offline Modal runtime trace of the submission (io stage), recorded by the "
        "runtime's dispatching side: which containers it started, with which resources, "
        "and the inputs it carried to them. What ran inside a container is the code's: "
        "read it beside the code.\n"
    )
    text = head + "\n".join(parts)
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 20] + "\n[trace cut]"
