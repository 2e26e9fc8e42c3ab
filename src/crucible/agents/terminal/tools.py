"""The terminal agent's tools: schemas, output budgets, and the plain-text protocol.

With function calling the model gets `bash`, `submit` and (given a docs
index) `docs`. Endpoints without tools use a plain-text protocol instead:
commands in ```bash blocks, documentation look-ups in ```docs blocks, and
SUBMIT on a line of its own to finish.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ELIDED = "[output elided to fit the context window]"


def bash_tool(default_timeout: float, max_timeout: float) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": "bash",
            "description": (
                "Run one shell command with bash in the task's working directory and return its "
                "exit code and combined stdout/stderr (long output is cut in the middle). Each call "
                "is a fresh shell: files persist, `cd` and variables do not. "
                f"Timeout {default_timeout:g}s unless `timeout_sec` says otherwise (max {max_timeout:g}s)."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command (may span lines)."},
                    "timeout_sec": {
                        "type": "integer",
                        "description": "Optional timeout in seconds.",
                    },
                },
                "required": ["command"],
            },
        },
    }


SUBMIT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "submit",
        "description": "Finish: call this once the task is complete. Nothing runs after it.",
        "parameters": {"type": "object", "properties": {}},
    },
}

DOCS_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "docs",
        "description": (
            "Search the documentation. action=query with `keys` (words or identifiers) returns the "
            "most relevant pages first; action=show with `page` (a path from query) returns a window "
            "of that page from line `offset` (default 0), `limit` lines long, with next_offset to "
            "continue reading."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["query", "show"]},
                "keys": {"type": "string", "description": "Search words (query)."},
                "page": {"type": "string", "description": "Page path (show)."},
                "offset": {"type": "integer"},
                "limit": {"type": "integer"},
            },
            "required": ["action"],
        },
    },
}


def truncate_middle(text: str, budget: int) -> tuple[str, bool]:
    """Keep the head and tail of `text` within `budget` characters; say what was cut."""
    if len(text) <= budget:
        return text, False
    head = budget * 2 // 5
    tail = budget - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[-tail:]}", True


def format_exec(
    exit_code: int, output: str, timed_out: bool, timeout: float, budget: int
) -> tuple[str, bool]:
    body, cut = truncate_middle(output, budget)
    status = (
        f"[timed out after {timeout:g}s; exit code {exit_code}]"
        if timed_out
        else f"[exit code {exit_code}]"
    )
    return f"{status}\n{body}" if body else status, cut


# -- plain-text protocol ----------------------------------------------------

_FENCE_OPEN = re.compile(r"^(.*?)```([a-zA-Z]*)[ \t]*$")
# `<<EOF`, `<<-'EOF'`, `<< "EOF"`: the delimiter word (not `<<<`, a here-string).
_HEREDOC = re.compile(r"(?<!<)<<-?[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_SUBMIT = re.compile(r"^\s*[*_`]*SUBMIT[*_`.!]*\s*$", re.MULTILINE)
_LANGS = ("", "bash", "sh", "shell", "console")


@dataclass
class TextAction:
    kind: str  # "bash" | "docs"
    body: str


def _blocks(content: str) -> tuple[list[tuple[str, str]], str]:
    """(lang, body) of each closed fenced block, and the text outside them.

    Line-based, and heredoc-aware in shell blocks: a ``` line inside
    `cat > f <<'EOF' ... EOF` belongs to the file being written, not the fence.
    An unclosed block (a reply cut off) is not a command.
    """
    blocks: list[tuple[str, str]] = []
    outside: list[str] = []
    lines = content.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        i += 1
        if not m:
            outside.append(lines[i - 1])
            continue
        outside.append(m.group(1))
        lang = m.group(2).lower()
        body: list[str] = []
        pending: list[str] = []  # heredoc delimiters still open, in order
        while i < len(lines):
            line = lines[i]
            i += 1
            if pending:
                if line.strip() == pending[0]:
                    pending.pop(0)
                body.append(line)
            elif line.rstrip().endswith("```"):
                body.append(line.rstrip()[:-3])
                blocks.append((lang, "\n".join(body)))
                break
            else:
                if lang in _LANGS:
                    pending = [d for _, d in _HEREDOC.findall(line)]
                body.append(line)
    return blocks, "\n".join(outside)


def parse_text_reply(content: str) -> tuple[list[TextAction], bool]:
    """(actions in order, whether the model submitted) from a plain-text reply."""
    actions: list[TextAction] = []
    blocks, outside = _blocks(content)
    for lang, raw in blocks:
        body = raw.strip("\n")
        if not body.strip():
            continue
        if lang == "docs":
            actions.append(TextAction("docs", body.strip()))
        elif lang in _LANGS:
            actions.append(TextAction("bash", body))
    return actions, bool(_SUBMIT.search(outside))


def docs_args_from_text(body: str) -> dict[str, Any]:
    """`query WORDS...` or `show PAGE [OFFSET [LIMIT]]` into docs tool arguments."""
    parts = body.split()
    if not parts:
        return {}
    action = parts[0].lower()
    if action == "show" and len(parts) >= 2:
        args: dict[str, Any] = {"action": "show", "page": parts[1]}
        if len(parts) >= 3 and parts[2].isdigit():
            args["offset"] = int(parts[2])
        if len(parts) >= 4 and parts[3].isdigit():
            args["limit"] = int(parts[3])
        return args
    if action == "query":
        return {"action": "query", "keys": " ".join(parts[1:])}
    return {"action": "query", "keys": body}


# -- docs -------------------------------------------------------------------


def _docs_sync(index: Path, args: dict[str, Any], budget: int) -> str:
    from crucible.docs.index import DocsIndexMissing
    from crucible.docs.query import search
    from crucible.docs.show import PageNotFound, show_page

    action = str(args.get("action") or ("show" if args.get("page") else "query"))
    try:
        if action == "show":
            page = str(args.get("page") or "")
            if not page:
                return "error: action=show needs `page`"
            w = show_page(
                index,
                page,
                offset=int(args.get("offset") or 0),
                limit=int(args.get("limit") or 120),
                max_chars=budget,
            )
            head = (
                f"{w.title} ({w.path}) lines {w.offset}-{w.next_offset or w.n_lines} of {w.n_lines}"
            )
            more = (
                f"\n[next_offset: {w.next_offset}]"
                if w.next_offset is not None
                else "\n[end of page]"
            )
            return f"{head}\n\n{w.text}{more}"
        if action == "query":
            keys = args.get("keys") or args.get("query") or ""
            keys_list = keys if isinstance(keys, list) else str(keys).split()
            hits = search(index, [str(k) for k in keys_list], limit=int(args.get("limit") or 5))
            if not hits:
                return "no matching pages"
            return json.dumps([h.model_dump() for h in hits], indent=1)
        return f"error: unknown action {action!r}; use query or show"
    except (DocsIndexMissing, PageNotFound, ValueError) as exc:
        return f"error: {exc}"


async def run_docs(index: Path, args: dict[str, Any], budget: int) -> str:
    # sqlite3 has no async API; its queries here take milliseconds.
    out = await asyncio.to_thread(_docs_sync, index, args, budget)
    return truncate_middle(out, budget)[0]
