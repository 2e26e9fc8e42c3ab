"""Cost of one rollout: the cost recorded in result.json, else its token usage priced.

Prices come from `crucible.llm.pricing` (built-in table, extended by
the user's price files); the caller loads the table once and passes it in, so
nothing here reads files.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel

from crucible.llm.pricing import ModelPrice, cost_usd
from crucible.records.trial import AgentResult
from crucible.records.usage import Usage

CostSource = Literal["recorded", "priced", "self-hosted"]


class TokenUsage(BaseModel):
    """Tokens of one rollout (OpenAI conventions: input includes cache reads and writes)."""

    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0

    @classmethod
    def from_agent_result(cls, ar: AgentResult | None) -> TokenUsage | None:
        if ar is None or all(
            v is None
            for v in (
                ar.n_input_tokens,
                ar.n_cache_tokens,
                ar.n_cache_write_tokens,
                ar.n_output_tokens,
            )
        ):
            return None
        return cls(
            input=ar.n_input_tokens or 0,
            cache_read=ar.n_cache_tokens or 0,
            cache_write=ar.n_cache_write_tokens or 0,
            output=ar.n_output_tokens or 0,
        )

    def as_usage(self) -> Usage:
        return Usage(
            input_tokens=self.input,
            cache_read_tokens=self.cache_read,
            cache_write_tokens=self.cache_write,
            output_tokens=self.output,
        )


def rollout_cost(
    agent_result: AgentResult | None,
    model: str | None,
    prices: Mapping[str, ModelPrice] | None,
) -> tuple[float | None, CostSource | None]:
    """(USD, where it came from). A cost recorded by the agent wins over pricing
    the tokens, since the agent saw the endpoint's own figures. None when neither
    is known: an unpriced model is unknown, never free."""
    if agent_result is not None and agent_result.cost_usd is not None:
        return agent_result.cost_usd, "recorded"
    tokens = TokenUsage.from_agent_result(agent_result)
    if tokens is None or not model or prices is None:
        return None, None
    usd = cost_usd(model, tokens.as_usage(), prices)
    return (usd, "priced") if usd is not None else (None, None)
