"""One chat-completions reply, parsed: text, tool calls, usage, reasoning, and the raw RL fields.

`tokens` carries what a vLLM or SGLang OpenAI server returned for training
(the choice's `logprobs`, vLLM's `token_ids` and `prompt_token_ids` when the
request asked for them), as the server sent them: the JSON values
untouched, so the trainer gets exactly the tokens the policy produced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from crucible.records.text import storable
from crucible.records.usage import Usage

# The reply fields an RL trainer needs, where a server sends them: (where, key).
TOKEN_FIELDS: tuple[tuple[str, str], ...] = (
    ("reply", "prompt_token_ids"),  # vLLM >= 0.10.2 with return_token_ids
    ("choice", "prompt_token_ids"),
    ("choice", "token_ids"),  # vLLM: the completion's ids
    ("choice", "logprobs"),  # OpenAI shape: {"content": [{"token", "logprob", ...}]}
)


class Retryable(Exception):
    """The request may succeed when sent again (a 5xx, a dropped connection, a malformed reply)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, as the model wrote it

    def parsed_arguments(self) -> dict[str, Any] | None:
        """The arguments as a dict, or None when the model wrote invalid JSON."""
        try:
            value = storable(json.loads(self.arguments or "{}"))
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None

    def to_message(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class ChatReply:
    content: str | None
    tool_calls: list[ToolCall]
    finish_reason: str | None
    usage: Usage
    latency_sec: float
    attempts: int  # HTTP requests it took (1 = no retry)
    started_at: datetime
    reasoning_content: str | None = None  # a reasoning model's thinking, where the server sends it
    tokens: dict[str, Any] = field(default_factory=dict)  # TOKEN_FIELDS the server sent, verbatim

    def to_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content or ""}
        if self.tool_calls:
            msg["tool_calls"] = [tc.to_message() for tc in self.tool_calls]
        return msg


class ChatClient(Protocol):
    """What the terminal agent needs of a model client; ModelClient is one, a trainer may bring its own."""

    n_calls: int
    n_retries: int

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> ChatReply: ...

    async def aclose(self) -> None: ...


def token_fields(data: dict[str, Any], choice: dict[str, Any]) -> dict[str, Any]:
    """The TOKEN_FIELDS present in a reply, keyed by name (a choice's value wins)."""
    out: dict[str, Any] = {}
    for where, key in TOKEN_FIELDS:
        source = data if where == "reply" else choice
        if source.get(key) is not None:
            out[key] = source[key]
    return out


def parse_reply(data: Any) -> tuple[str | None, list[ToolCall], str | None, Usage]:
    """Pull the first choice out of a reply; raise Retryable when it is malformed."""
    if not isinstance(data, dict):
        raise Retryable("reply is not a JSON object")
    if "error" in data and not data.get("choices"):
        raise Retryable(f"reply carries an error: {str(data['error'])[:500]}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise Retryable("reply has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise Retryable("reply's first choice has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        # Some servers send content parts; keep their text.
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        else:
            raise Retryable("reply's message content is neither text nor parts")
    calls: list[ToolCall] = []
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise Retryable("reply's tool_calls is not a list")
    for i, raw in enumerate(raw_calls):
        fn = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise Retryable("reply has a tool call without a function name")
        args = fn.get("arguments")
        if isinstance(args, dict):  # some servers send parsed arguments
            args = json.dumps(args)
        calls.append(
            ToolCall(id=str(raw.get("id") or f"call_{i}"), name=fn["name"], arguments=args or "")
        )
    usage = data.get("usage")
    return (
        content,
        calls,
        choices[0].get("finish_reason"),
        Usage.from_openai(usage if isinstance(usage, dict) else None),
    )


def reasoning_of(data: dict[str, Any]) -> str | None:
    """`reasoning_content` (vLLM, SGLang, DeepSeek) or `reasoning` of the first choice's message."""
    message = data["choices"][0]["message"]
    value = message.get("reasoning_content") or message.get("reasoning")
    return value if isinstance(value, str) and value else None
