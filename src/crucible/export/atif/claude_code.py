"""claude-code's JSONL (the `--output-format stream-json` stream, or a session file) as ATIF v1.8.

Both carry the same events: `system` (init: session id, model, tools),
`assistant` (an Anthropic message: text, thinking and tool_use blocks, with
usage), `user` (the prompt, or tool_result blocks answering tool_use ids) and
`result` (the totals). The stream splits one model message over several
events sharing a message id: they make one agent step, its usage counted once.
Session files add a timestamp per event; sidechain (subagent) events are
kept apart in `extra`, not mixed into the main line.
"""

from __future__ import annotations

from typing import Any

from atif import Agent

from crucible.export.atif.common import (
    Atif,
    Steps,
    as_dict,
    as_int,
    cap,
    json_lines,
    metrics,
    timestamp,
)


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _result_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(cap(as_dict(b).get("text", b)) for b in content)
    return cap(content)


def _usage_metrics(usage: dict[str, Any]) -> Any:
    read = as_int(usage.get("cache_read_input_tokens")) or 0
    write = as_int(usage.get("cache_creation_input_tokens")) or 0
    base = as_int(usage.get("input_tokens"))
    prompt = None if base is None else base + read + write
    return metrics(prompt=prompt, completion=usage.get("output_tokens"), cached=read)


def claude_code_to_atif(text: str, version: str = "unknown") -> Atif | None:
    """None when the text holds no claude-code conversation."""
    steps = Steps()
    model: str | None = None
    session: str | None = None
    tools: list[dict[str, Any]] | None = None
    result: dict[str, Any] = {}
    sidechain = 0
    last_msg_id: object = None
    for event in json_lines(text):
        kind = event.get("type")
        if isinstance(event.get("session_id") or event.get("sessionId"), str):
            session = session or str(event.get("session_id") or event.get("sessionId"))[:200]
        if event.get("isSidechain") is True:
            sidechain += 1
            continue
        msg = as_dict(event.get("message"))
        at = timestamp(event.get("timestamp"))
        if kind == "system" and event.get("subtype") == "init":
            model = cap(event.get("model"))[:200] or model
            names = event.get("tools")
            if isinstance(names, list):
                tools = [{"name": cap(n)[:200]} for n in names[:200] if isinstance(n, str)]
        elif kind == "assistant":
            model = cap(msg.get("model"))[:200] or model
            msg_id = msg.get("id")
            step = steps.last_agent()
            if step is None or msg_id is None or msg_id != last_msg_id:
                step = steps.add("agent", "", timestamp=at, model_name=model, llm_call_count=1)
                if step is None:
                    continue
            last_msg_id = msg_id
            texts: list[str] = [cap(step.message)] if step.message else []
            thinking: list[str] = []
            if step.reasoning_content:
                thinking.append(step.reasoning_content)
            for block in _blocks(msg.get("content")):
                btype = block.get("type")
                if btype == "text":
                    texts.append(cap(block.get("text")))
                elif btype in ("thinking", "redacted_thinking"):
                    thinking.append(cap(block.get("thinking")))
                elif btype == "tool_use":
                    steps.call(
                        step, cap(block.get("id"))[:200], cap(block.get("name")), block.get("input")
                    )
            step.message = cap("\n".join(t for t in texts if t))
            step.reasoning_content = cap("\n".join(t for t in thinking if t)) or None
            usage = as_dict(msg.get("usage"))
            if usage:
                step.metrics = _usage_metrics(usage)
        elif kind == "user":
            last_msg_id = None
            plain: list[str] = []
            for block in _blocks(msg.get("content")):
                if block.get("type") == "tool_result":
                    call_id = cap(block.get("tool_use_id"))
                    body = _result_text(block.get("content"))
                    is_error = block.get("is_error") is True or None
                    if not steps.result_for(call_id, body, is_error=is_error):
                        steps.add("user", body, timestamp=at, extra={"tool_use_id": call_id[:200]})
                elif block.get("type") == "text":
                    plain.append(cap(block.get("text")))
            if plain:
                steps.add("user", "\n".join(plain), timestamp=at)
        elif kind == "result":
            result = event
    if not steps.steps:
        return None
    extra: dict[str, Any] = {"source": "claude-code"}
    for key in ("subtype", "num_turns", "is_error", "duration_ms"):
        if isinstance(result.get(key), str | int | float | bool):
            extra[key] = result[key]
    if sidechain:
        extra["sidechain_events_skipped"] = sidechain
    doc = steps.build(
        Agent(name="claude-code", version=version, model_name=model, tool_definitions=tools),
        session_id=session,
        extra=extra,
    )
    cost = result.get("total_cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool) and doc.final_metrics:
        doc.final_metrics.total_cost_usd = float(cost)
    return doc
