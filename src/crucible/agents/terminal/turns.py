"""What a reply leads to: its actions, or a nudge when it has none (the terminal agent's turn handling).

A reply without a usable action never ends a rollout by itself: prose gets
a nudge, a reply cut at the output limit (finish_reason "length") gets its
own note, and a broken tool call (arguments that are not JSON, an unknown
tool) is answered with a format error. Each such turn counts toward
`max_format_errors` consecutive ones; a usable action resets the count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from crucible.agents.base import AgentContext
from crucible.agents.terminal.actions import Actions
from crucible.agents.terminal.config import environment_line
from crucible.agents.terminal.tools import parse_text_reply
from crucible.llm.reply import ChatReply
from crucible.records.trajectory import Action, Turn

NO_TOOL_CALL = (
    "Your reply had no tool call, so nothing ran. Call `bash` to run a command, or call "
    "`submit` once the task is complete."
)
NO_BLOCK = (
    "No command found. Give exactly one command in a ```bash block, "
    "or reply SUBMIT on a line of its own when the task is complete."
)
TRUNCATED = (
    "Your reply was cut off at the output limit, so nothing in it ran. Reply more briefly: "
    "one short command per reply; write long files in several steps."
)


@dataclass
class Outcome:
    done: bool  # submitted
    format_error: bool  # no usable action in the reply
    messages: list[dict[str, Any]]  # what goes back to the model


async def tool_turn(actions: Actions, reply: ChatReply, turn: Turn) -> Outcome:
    truncated = reply.finish_reason == "length"
    if not reply.tool_calls:
        note = TRUNCATED if truncated else NO_TOOL_CALL
        turn.nudge = note
        return Outcome(False, True, [{"role": "user", "content": note}])
    done = usable = False
    out: list[dict[str, Any]] = []
    for call in reply.tool_calls:
        action, submitted = await actions.tool_call(call, after_submit=done)
        if action.tool == "invalid" and truncated:
            action.output = f"{TRUNCATED}\n{action.output}"
        usable = usable or action.tool != "invalid"
        done = done or submitted
        turn.actions.append(action)
        out.append({"role": "tool", "tool_call_id": call.id, "content": action.output})
    return Outcome(done, not usable, out)


async def text_turn(actions: Actions, reply: ChatReply, turn: Turn) -> Outcome:
    found, submitted = parse_text_reply(reply.content or "")
    if not found and not submitted:
        note = TRUNCATED if reply.finish_reason == "length" else NO_BLOCK
        turn.nudge = note
        return Outcome(False, True, [{"role": "user", "content": note}])
    outputs: list[str] = []
    usable = submitted
    for i, act in enumerate(found):
        done = await actions.text_action(act)
        usable = usable or done.tool != "invalid"
        turn.actions.append(done)
        prefix = f"Output of command {i + 1}:\n" if len(found) > 1 else ""
        outputs.append(prefix + done.output)
    if submitted:
        turn.actions.append(Action(tool="submit", arguments={}, output="submitted"))
        return Outcome(True, False, [])
    return Outcome(False, not usable, [{"role": "user", "content": "\n\n".join(outputs)}])


def as_text_message(msg: dict[str, Any]) -> dict[str, Any]:
    """A function-calling message rewritten for an endpoint without tools."""
    if msg["role"] == "assistant" and msg.get("tool_calls"):
        parts = [str(msg.get("content") or "")]
        for call in msg["tool_calls"]:
            fn = call.get("function", {})
            try:
                cmd = json.loads(fn.get("arguments") or "{}").get("command", "")
            except (ValueError, AttributeError):
                cmd = ""
            parts.append(f"```bash\n{cmd}\n```" if cmd else f"[{fn.get('name')}]")
        return {"role": "assistant", "content": "\n".join(p for p in parts if p)}
    if msg["role"] == "tool":
        return {"role": "user", "content": str(msg.get("content") or "")}
    return msg


_PROBE = (
    '(. /etc/os-release 2>/dev/null && printf "%s" "${PRETTY_NAME:-$NAME}") || uname -s; echo; '
    "id -un 2>/dev/null || id -u"
)


async def environment_facts(ctx: AgentContext) -> str:
    """One line for the system prompt: the OS (/etc/os-release), the user, the workdir, the network."""
    user = ctx.task.config.agent.user
    res = await ctx.sandbox.exec(
        ["sh", "-c", _PROBE],
        timeout=30,
        user=str(user) if user is not None else None,
        cwd=ctx.task.workdir,
    )
    lines = [ln.strip() for ln in res.stdout.splitlines()]
    # What the sandbox printed is the sandbox's to say: kept short and on one line.
    os_name = (lines[0] if lines and lines[0] else "Linux")[:80]
    who = (lines[1] if len(lines) > 1 and lines[1] else str(user or "unknown"))[:40]
    spec = getattr(ctx.sandbox, "spec", None)
    network = getattr(spec, "network", "none") != "none"
    return environment_line(os_name, who, ctx.task.workdir, network)
