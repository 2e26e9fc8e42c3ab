"""The setter's protocol: one `propose_task` tool (or one fenced json block) per task.

Any model, or a scripted server, can play setter: it is asked for a task and
answers by calling `propose_task` with {"category", "files": {relpath: content}},
a complete Harbor task folder as files (task.toml, instruction.md,
environment/Dockerfile, solution/solve.sh, tests/test.sh), failure cases as
solution/failures/<name>.sh. A server without tool calls answers with one
fenced ```json block holding the same object. Hardening asks the same tool.
What the model sends is untrusted: `parse_proposal` checks its shape only;
files.py checks each path before anything is written.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

TOOL_NAME = "propose_task"

PROPOSE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": (
            "Propose one task as a complete Harbor task folder: task.toml, instruction.md, "
            "environment/Dockerfile, solution/solve.sh, tests/test.sh (writes "
            "/logs/verifier/reward.txt), and failure cases solution/failures/<name>.sh "
            "(plausible wrong solutions that must score below 1)."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "category": {"type": "string", "description": "The category it exercises."},
                "files": {
                    "type": "object",
                    "description": "Relative path -> file content.",
                    "additionalProperties": {"type": "string"},
                },
            },
            "required": ["category", "files"],
        },
    },
}

_FENCE = re.compile(r"```json\s*\n(.*?)\n```", re.DOTALL)


class Proposal(BaseModel):
    """What the setter sent, its shape checked; nothing written yet."""

    category: str
    files: dict[str, str] = Field(default_factory=dict)


class ProtocolError(ValueError):
    """The reply is not a proposal (no tool call, no json block, wrong shape)."""


def parse_proposal(content: str | None, tool_args: list[dict[str, Any] | None]) -> Proposal:
    """The proposal of one reply: the first `propose_task` call's arguments, else the
    one fenced json block of its text."""
    for args in tool_args:
        if args is None:
            raise ProtocolError(f"{TOOL_NAME} was called with arguments that are not JSON")
        return _shape(args)
    blocks = _FENCE.findall(content or "")
    if len(blocks) != 1:
        raise ProtocolError(
            f"the reply has no {TOOL_NAME} call and {len(blocks)} fenced json blocks (want 1)"
        )
    try:
        data = json.loads(blocks[0])
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"the json block does not parse: {exc}") from exc
    if not isinstance(data, dict):
        raise ProtocolError("the json block is not an object")
    return _shape(data)


def _shape(data: dict[str, Any]) -> Proposal:
    category, files = data.get("category"), data.get("files")
    if not isinstance(category, str) or not category.strip():
        raise ProtocolError("the proposal has no category")
    if not isinstance(files, dict) or not files:
        raise ProtocolError("the proposal has no files")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ProtocolError("files must map paths to text")
    return Proposal(category=category.strip(), files=files)


SYSTEM = (
    "You are the setter of a curriculum of agent tasks in the Harbor format. Each task "
    "runs in a sandbox: the agent works in /app; tests/test.sh grades the result and "
    "writes a number in [0, 1] to /logs/verifier/reward.txt; solution/solve.sh is the "
    "reference solution and must score 1; each solution/failures/<name>.sh is a plausible "
    "wrong solution that must score below 1; doing nothing must score 0. Never put the "
    f"solution in instruction.md. Answer by calling {TOOL_NAME} (or, without tools, with "
    'one ```json block holding {"category": ..., "files": {path: content}}).'
)


def propose_prompt(category: str, covered: dict[str, int], brief: str | None) -> str:
    lines = [f"Propose a new task in the category `{category}`."]
    if covered:
        have = ", ".join(f"{c}: {n}" for c, n in sorted(covered.items()))
        lines.append(f"Accepted so far per category: {have}.")
    if brief:
        lines += ["", brief]
    return "\n".join(lines)


def harden_prompt(
    parent_files: dict[str, str], approach: str, under_covered: list[str], operator: str
) -> str:
    shown = {k: v for k, v in parent_files.items() if not k.startswith("solution/")}
    return "\n".join(
        [
            "The solver always solves this task; make a harder child task with the operator "
            f"`{operator}` (add a contract, remove a hint, add edge cases, or compose features).",
            f"Under-covered categories: {', '.join(under_covered) or 'none'}.",
            "The solver's successful approach (last steps):",
            approach[-4000:] or "(none recorded)",
            "The parent task (solution omitted):",
            json.dumps(shown, indent=1)[:20000],
        ]
    )
