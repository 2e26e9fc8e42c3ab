"""The `terminal` agent: an LLM on any OpenAI-compatible endpoint acting through a shell.

The loop: the model sees a system prompt and the task instruction, runs
commands through the `bash` tool (or ```bash blocks on endpoints without
function calling, detected automatically), reads each command's output cut
to a budget, and ends by calling `submit`; a reply without a usable action
is answered with a nudge. Limits: turns, the context window (trimmed in
large steps, or summarised), wall time, consecutive format errors, and
optionally cost and tokens. The endpoint failing is infrastructure
(ModelFailed propagates, the trial ends model_failed); the model running out
of turns, time, context or budget is a failure at the task (AgentResult.error,
still graded).

A trainer can drive it in-process: `TerminalAgent(model=..., client=obj)`
with any object that has ModelClient's `chat`/`aclose`/`n_calls`/`n_retries`
(llm.reply.ChatClient); sampling options, `extra_body` and `collect_tokens`
pass through to the requests.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from pydantic import ValidationError

from crucible.agents.base import Agent, AgentContext
from crucible.agents.terminal.config import TerminalConfig
from crucible.agents.terminal.rollout import Rollout
from crucible.llm.client import ModelClient, ModelConfig, resolve_base_url
from crucible.llm.pricing import ModelPrice, cost_usd, default_price_table, load_price_table
from crucible.llm.reply import ChatClient
from crucible.records.trial import AgentInfo, AgentResult, ModelInfo
from crucible.records.usage import Usage


class TerminalAgent(Agent):
    name = "terminal"
    version = "1"

    def __init__(self, client: ChatClient | None = None, **options: Any) -> None:
        if not options.get("model"):
            raise ValueError("the terminal agent needs a model (--model NAME)")
        self._client = client  # a trainer's own client: it owns the endpoint and its lifetime
        given = options.get("model_base_url")
        base = (given or "http://in-process.invalid/v1") if client is not None else None
        options = {**options, "model_base_url": base or resolve_base_url(given)}
        try:
            self.config = TerminalConfig.model_validate(options)
        except ValidationError as exc:
            known = ", ".join(TerminalConfig.model_fields)
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'options'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ValueError(
                f"invalid terminal agent options: {problems} (known options: {known})"
            ) from None
        self._prices: dict[str, ModelPrice] = (
            load_price_table(self.config.price_table)
            if self.config.price_table
            else default_price_table()
        )
        if (
            self.config.max_cost_usd is not None
            and cost_usd(self.config.model, Usage(), self._prices) is None
        ):
            raise ValueError(
                f"max_cost_usd needs a price for model {self.config.model!r}; "
                "give one with price_table=FILE"
            )

    def model_endpoint(self) -> tuple[str, str] | None:
        if self._client is not None:
            return None
        return self.config.model_base_url, self.config.model_api_key_env

    def info(self) -> AgentInfo:
        host = urlparse(self.config.model_base_url).hostname
        return AgentInfo(
            name=self.name,
            version=self.version,
            model_info=ModelInfo(name=self.config.model, provider=host),
        )

    async def run(self, ctx: AgentContext) -> AgentResult:
        cfg = self.config
        if self._client is not None:
            return await Rollout(self.info(), cfg, self._prices, ctx, self._client).loop()
        client = ModelClient(
            ModelConfig(
                model=cfg.model,
                base_url=cfg.model_base_url,
                api_key_env=cfg.model_api_key_env,
                temperature=cfg.temperature,
                max_output_tokens=cfg.max_output_tokens,
                max_retries=cfg.max_retries,
                request_timeout_sec=cfg.request_timeout_sec,
                sampling=cfg.sampling(),
                extra_body=dict(cfg.extra_body),
                collect_tokens=cfg.collect_tokens,
            )
        )
        try:
            return await Rollout(self.info(), cfg, self._prices, ctx, client).loop()
        finally:
            await client.aclose()
