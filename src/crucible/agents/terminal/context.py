"""Keeping a conversation inside the model's context window.

Tokens are estimated from characters, with the ratio calibrated on the
prompt sizes the server reports. When the estimate passes the limit, the
context is cut in one large step, down to `fraction` of the limit: the
oldest tool outputs are elided first, then the oldest turns are dropped
whole; the system prompt and the instruction always stay, and so does the
latest turn. Between two such trims the conversation only grows, so the
prompt prefix (and the server's prefix cache) holds. When even that cannot fit, `CannotFit` is raised and the agent
ends with a `context_overflow` error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from crucible.agents.terminal.tools import ELIDED

HEAD = 2  # system prompt + instruction, never trimmed
_PER_MESSAGE = 6  # role and framing tokens per message


class CannotFit(Exception):
    """Even the system prompt, the instruction and the latest turn exceed the window."""


def message_chars(messages: list[dict[str, Any]]) -> int:
    return len(json.dumps(messages, ensure_ascii=False))


@dataclass
class TrimReport:
    elided: int = 0
    dropped_turns: int = 0

    def __bool__(self) -> bool:
        return bool(self.elided or self.dropped_turns)


class ContextBudget:
    def __init__(
        self, window: int | None, max_output_tokens: int | None, fraction: float = 0.5
    ) -> None:
        self.window = window
        self.fraction = fraction
        reserve = max_output_tokens or (min(4096, window // 4) if window else 0)
        self.limit: int | None = window - reserve - 64 if window else None
        if self.limit is not None and self.limit <= 0:
            raise ValueError(
                f"context_window {window} leaves no room for the prompt after {reserve} output tokens"
            )
        self.chars_per_token = 3.5
        self.dropped_turns = 0

    def estimate(self, messages: list[dict[str, Any]]) -> int:
        return int(message_chars(messages) / self.chars_per_token) + _PER_MESSAGE * len(messages)

    def calibrate(self, messages: list[dict[str, Any]], prompt_tokens: int) -> None:
        """Learn characters per token from a prompt the server measured."""
        tokens = prompt_tokens - _PER_MESSAGE * len(messages)
        if tokens > 100:
            self.chars_per_token = min(max(message_chars(messages) / tokens, 1.0), 8.0)

    def shrink_after_overflow(self, messages: list[dict[str, Any]]) -> None:
        """The server said the prompt did not fit: aim well below what was sent."""
        sent = self.estimate(messages)
        self.limit = int(sent * 0.75) if self.limit is None else min(self.limit, int(sent * 0.75))

    def fits(self, messages: list[dict[str, Any]], fraction: float = 1.0) -> bool:
        return self.limit is None or self.estimate(messages) <= self.limit * fraction

    def droppable(self, messages: list[dict[str, Any]]) -> int:
        """How many messages after the head a trim would drop whole (for a summary of them)."""
        groups = _turn_groups(messages)
        probe = [*messages[:HEAD], *messages[groups[-1][0] :]] if groups else messages
        if len(groups) < 2 or not self.fits(probe, self.fraction):
            return 0
        keep = len(groups) - 1
        while keep > 0:  # the most recent turns that fit beside the head
            start = groups[len(groups) - keep][0]
            if self.fits([*messages[:HEAD], *messages[start:]], self.fraction):
                return start - HEAD
            keep -= 1
        return groups[-1][0] - HEAD

    def trim(self, messages: list[dict[str, Any]]) -> TrimReport:
        """Trim `messages` in place until it fits; raise CannotFit when it cannot."""
        report = TrimReport()
        if self.fits(messages):
            return report
        groups = _turn_groups(messages)
        goal = self.fraction  # one large step, so the next trim is many turns away
        # 1. Elide tool outputs, oldest first, all but the latest turn.
        for start, end in groups[:-1]:
            for msg in messages[start:end]:
                if msg["role"] in ("tool", "user") and len(str(msg.get("content") or "")) > len(
                    ELIDED
                ):
                    msg["content"] = ELIDED
                    report.elided += 1
                    if self.fits(messages, goal):
                        return report
        # 2. Drop whole turns, oldest first, all but the latest.
        while len(_turn_groups(messages)) > 1 and not self.fits(messages, goal):
            start, end = _turn_groups(messages)[0]
            del messages[start:end]
            report.dropped_turns += 1
            self.dropped_turns += 1
        if report.dropped_turns:
            _note_dropped(messages, self.dropped_turns)
        if self.fits(messages):
            return report
        # 3. Elide the latest turn's outputs too; the model still sees its own command.
        groups = _turn_groups(messages)
        if groups:
            start, end = groups[-1]
            for msg in messages[start:end]:
                if msg["role"] in ("tool", "user") and len(str(msg.get("content") or "")) > len(
                    ELIDED
                ):
                    msg["content"] = ELIDED
                    report.elided += 1
        if not self.fits(messages):
            raise CannotFit(
                f"prompt of ~{self.estimate(messages)} tokens does not fit the limit of {self.limit} "
                "even with every earlier turn removed"
            )
        return report


def _turn_groups(messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """[start, end) of each turn after the head: an assistant message and what answered it."""
    groups: list[tuple[int, int]] = []
    start: int | None = None
    for i in range(HEAD, len(messages)):
        if messages[i]["role"] == "assistant":
            if start is not None:
                groups.append((start, i))
            start = i
    if start is not None:
        groups.append((start, len(messages)))
    return groups


_NOTE = "\n\n[Note: {n} earlier turn(s) were removed to fit the context window.]"


def note_summary(messages: list[dict[str, Any]], n_dropped: int, summary: str) -> None:
    """Replace the `n_dropped` messages after the head with a summary, folded into the instruction."""
    del messages[HEAD : HEAD + n_dropped]
    instruction = messages[HEAD - 1]
    base = str(instruction.get("content") or "").split("\n\n[Note: ", 1)[0]
    instruction["content"] = (
        base + f"\n\n[Note: earlier turns were replaced by this summary of them:]\n{summary}"
    )


def _note_dropped(messages: list[dict[str, Any]], n: int) -> None:
    # Folded into the instruction message rather than added as a message of its own:
    # some chat templates refuse two user messages in a row.
    instruction = messages[HEAD - 1]
    base = str(instruction.get("content") or "").split("\n\n[Note: ", 1)[0]
    instruction["content"] = base + _NOTE.format(n=n)
