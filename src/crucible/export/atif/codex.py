"""codex's JSONL as ATIF v1.8: the rollout file (~/.codex/sessions/.../rollout-*.jsonl) or
the `codex exec --json` event stream (what crucible's codex template leaves in stdout).

Rollout lines are `{timestamp, type, payload}`: `session_meta` (id, cli
version), `turn_context` (model), `response_item` (a Responses API item:
message, reasoning, function_call / custom_tool_call and their `_output`) and
`event_msg` (token_count with the last call's usage). The exec stream has
`thread.started`, `item.completed` items (agent_message, reasoning,
command_execution with its exit code and output, file_change, mcp_tool_call,
web_search) and `turn.completed` with usage. An item that made a call and
the output that answers it land in one agent step.
"""

from __future__ import annotations

from typing import Any

from atif import Agent

from crucible.export.atif.common import (
    Atif,
    Steps,
    arguments,
    as_dict,
    cap,
    json_lines,
    metrics,
    timestamp,
)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(cap(as_dict(p).get("text")) for p in content if as_dict(p).get("text"))
    return cap(content)


def _output(raw: Any) -> tuple[str, int | None]:
    """A function_call_output's text and exit code (codex wraps both in a JSON string)."""
    data = arguments(raw) if isinstance(raw, str) else as_dict(raw)
    if "output" in data:
        code = as_dict(data.get("metadata")).get("exit_code")
        return cap(data.get("output")), code if isinstance(code, int) else None
    return cap(raw), None


class _Codex:
    def __init__(self) -> None:
        self.steps = Steps()
        self.model: str | None = None
        self.session: str | None = None
        self.version = "unknown"

    def agent_step(self, at: str | None) -> Any:
        step = self.steps.last_agent()
        if step is not None and not step.observation:
            return step  # reasoning, text and calls of one model turn share a step
        return self.steps.add("agent", "", timestamp=at, model_name=self.model, llm_call_count=1)

    def say(self, at: str | None, text: str, reasoning: bool = False) -> None:
        step = self.agent_step(at)
        if step is None or not text:
            return
        if reasoning:
            step.reasoning_content = "\n".join(t for t in (step.reasoning_content, text) if t)
        elif step.tool_calls:  # text after a call starts the next turn
            step = self.steps.add(
                "agent", text, timestamp=at, model_name=self.model, llm_call_count=1
            )
        else:
            step.message = cap("\n".join(t for t in (step.message, text) if t))

    def rollout(self, at: str | None, kind: Any, p: dict[str, Any]) -> None:
        if kind == "session_meta":
            self.session = cap(p.get("id"))[:200] or None
            self.version = cap(p.get("cli_version"))[:100] or self.version
        elif kind == "turn_context":
            self.model = cap(p.get("model"))[:200] or self.model
        elif kind == "event_msg" and p.get("type") == "token_count":
            last = as_dict(as_dict(p.get("info")).get("last_token_usage"))
            step = self.steps.last_agent()
            if last and step is not None and step.metrics is None:
                step.metrics = metrics(
                    last.get("input_tokens"),
                    last.get("output_tokens"),
                    last.get("cached_input_tokens"),
                )
        elif kind == "response_item":
            ptype = p.get("type")
            if ptype == "message":
                text = _text(p.get("content"))
                if p.get("role") == "assistant":
                    self.say(at, text)
                elif p.get("role") in ("user", "developer", "system"):
                    self.steps.add(
                        "system" if p.get("role") != "user" else "user", text, timestamp=at
                    )
            elif ptype == "reasoning":
                self.say(at, _text(p.get("summary")) or _text(p.get("content")), reasoning=True)
            elif ptype in ("function_call", "custom_tool_call", "local_shell_call"):
                step = self.agent_step(at)
                if step is not None:
                    args = (
                        p.get("arguments")
                        if ptype == "function_call"
                        else p.get("input", p.get("action"))
                    )
                    self.steps.call(
                        step, cap(p.get("call_id"))[:200], cap(p.get("name") or ptype), args
                    )
            elif ptype in ("function_call_output", "custom_tool_call_output"):
                body, code = _output(p.get("output"))
                self.steps.result_for(cap(p.get("call_id")), body, exit_code=code)

    def exec_item(self, at: str | None, item: dict[str, Any]) -> None:
        itype = item.get("type")
        if itype == "agent_message":
            self.say(at, cap(item.get("text")))
        elif itype == "reasoning":
            self.say(at, cap(item.get("text")), reasoning=True)
        elif itype in ("command_execution", "file_change", "mcp_tool_call", "web_search"):
            step = self.agent_step(at)
            if step is None:
                return
            call_id = cap(item.get("id"))[:200]
            if itype == "command_execution":
                args: dict[str, Any] = {"command": cap(item.get("command"))}
                out, code = item.get("aggregated_output"), item.get("exit_code")
            elif itype == "file_change":
                args, out, code = {"changes": item.get("changes")}, item.get("status"), None
            elif itype == "mcp_tool_call":
                args = {
                    "server": item.get("server"),
                    "tool": item.get("tool"),
                    **arguments(item.get("arguments")),
                }
                out, code = item.get("result") or item.get("error"), None
            else:
                args, out, code = {"query": cap(item.get("query"))}, "", None
            self.steps.call(step, call_id, str(itype), args)
            self.steps.result(
                step,
                call_id,
                out,
                exit_code=code if isinstance(code, int) else None,
                status=item.get("status") if isinstance(item.get("status"), str) else None,
            )


def codex_to_atif(text: str) -> Atif | None:
    """None when the text holds no codex conversation."""
    c = _Codex()
    for event in json_lines(text):
        kind = event.get("type")
        at = timestamp(event.get("timestamp"))
        if isinstance(event.get("payload"), dict):
            c.rollout(at, kind, event["payload"])
        elif kind == "thread.started":
            c.session = cap(event.get("thread_id"))[:200] or None
        elif kind == "item.completed":
            c.exec_item(at, as_dict(event.get("item")))
        elif kind == "turn.completed":
            u = as_dict(event.get("usage"))
            step = c.steps.last_agent()
            if u and step is not None and step.metrics is None:
                step.metrics = metrics(
                    u.get("input_tokens"), u.get("output_tokens"), u.get("cached_input_tokens")
                )
    if not c.steps.steps:
        return None
    agent = Agent(name="codex", version=c.version, model_name=c.model)
    return c.steps.build(agent, session_id=c.session, extra={"source": "codex"})
