"""The setter: one chat call per proposal through crucible's LLM client."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crucible.generate.protocol import (
    PROPOSE_TOOL,
    SYSTEM,
    TOOL_NAME,
    Proposal,
    ProtocolError,
    parse_proposal,
)
from crucible.llm.client import DEFAULT_API_KEY_ENV, ModelClient, ModelConfig
from crucible.llm.errors import ToolsUnsupported
from crucible.records.usage import Usage


@dataclass
class SetterSpec:
    model: str
    base_url: str
    api_key_env: str | None = DEFAULT_API_KEY_ENV
    temperature: float | None = None
    max_output_tokens: int | None = None


@dataclass
class SetterReply:
    proposal: Proposal | None
    error: str | None
    usage: Usage
    raw: dict[str, Any]


class Setter:
    def __init__(self, spec: SetterSpec) -> None:
        self.spec = spec
        self.client = ModelClient(
            ModelConfig(
                model=spec.model,
                base_url=spec.base_url,
                api_key_env=spec.api_key_env,
                temperature=spec.temperature,
                max_output_tokens=spec.max_output_tokens,
            )
        )
        self.tools = True  # until the server refuses them

    async def aclose(self) -> None:
        await self.client.aclose()

    async def ask(self, prompt: str) -> SetterReply:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
        if self.tools:
            try:
                reply = await self.client.chat(messages, tools=[PROPOSE_TOOL])
            except ToolsUnsupported:
                self.tools = False
        if not self.tools:
            reply = await self.client.chat(messages)
        args = [tc.parsed_arguments() for tc in reply.tool_calls if tc.name == TOOL_NAME]
        raw = {"content": reply.content, "tool_calls": [tc.to_message() for tc in reply.tool_calls]}
        try:
            return SetterReply(parse_proposal(reply.content, args), None, reply.usage, raw)
        except ProtocolError as exc:
            return SetterReply(None, str(exc), reply.usage, raw)
