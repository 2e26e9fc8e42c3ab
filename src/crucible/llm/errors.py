"""How an OpenAI-compatible endpoint's refusals are told apart (llm/client.py raises
them): the prompt does not fit, the prompt's text was filtered, the request was refused
for another reason of its own, or the server does not take `tools`. Whose failure each
is depends on the caller: the agent trims or switches mode, the judge counts what its
request carried (the submission) against the attempt.
"""

from __future__ import annotations

from crucible.errors import ModelFailed

CONTEXT_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "prompt is too long",
    "too many tokens",
)
# A provider's refusal of what the prompt says (OpenAI's flagged prompt, Azure's content
# filter): the prompt's text did it, not the endpoint being down.
REFUSAL_MARKERS = ("content_filter", "content_policy", "content management policy",
                    "responsibleaipolicyviolation", "invalid_prompt",
                    "flagged as potentially violating")  # fmt: skip


class ContextOverflow(Exception):
    """The request does not fit the model's context window."""


class RequestRefused(ModelFailed):
    """The endpoint refused the request itself (a 4xx other than 401/403/404): something in
    what was sent did it. A ModelFailed (the endpoint's) to callers that do not tell it
    apart; the judge counts it against the submission, which is its request's bulk."""

    def __init__(self, message: str, *, status: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status


class ContentRefused(RequestRefused):
    """The endpoint refused the prompt for what it says (a content filter)."""


class ToolsUnsupported(Exception):
    """The endpoint refused a request because it carried `tools`."""
