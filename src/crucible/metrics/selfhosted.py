"""Cost per rollout of a self-hosted model: its server's time, shared by the output tokens.

A hosted model is priced by the token. A model served on one's own GPUs costs
the server's price per second whether busy or not, so a rollout's share is its
output tokens over the server's aggregate output throughput. The throughput is
the one declared in the price file, or else measured from the job itself: all
its rollouts' output tokens over the span from the first agent start to the last
agent finish (a lower bound on the throughput, so the cost is an upper bound,
when the server also idled). Such costs carry the source "self-hosted".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel

from crucible.llm.pricing import ServerPrice
from crucible.metrics.records import TrialRecord


class SelfHostedBasis(BaseModel):
    """How a job's self-hosted costs were worked out (shown beside them)."""

    model: str
    usd_per_hour: float
    output_tokens_per_sec: float | None
    throughput: str  # "declared" | "measured"
    note: str | None = None

    def text(self) -> str:
        tput = (
            f"{self.output_tokens_per_sec:,.0f} output tok/s {self.throughput}"
            if self.output_tokens_per_sec
            else "no output tokens to measure a throughput"
        )
        note = f", {self.note}" if self.note else ""
        return f"{self.model}: self-hosted at ${self.usd_per_hour:g}/h{note}, {tput}"


def measured_throughput(
    records: Sequence[TrialRecord], spans: Sequence[tuple[datetime, datetime]]
) -> float | None:
    """Output tokens per second over the job: every rollout's output over the agents' span."""
    tokens = sum(r.tokens.output for r in records if r.tokens is not None)
    if not tokens or not spans:
        return None
    seconds = (max(end for _, end in spans) - min(start for start, _ in spans)).total_seconds()
    return tokens / seconds if seconds > 0 else None


def price_self_hosted(
    records: Sequence[TrialRecord],
    model: str,
    server: ServerPrice,
    spans: Sequence[tuple[datetime, datetime]],
) -> tuple[list[TrialRecord], SelfHostedBasis]:
    """The records with a cost for each rollout that has output tokens and no cost of its
    own (a cost the agent recorded wins), and the basis of those costs."""
    declared = server.output_tokens_per_sec
    tput = declared if declared is not None else measured_throughput(records, spans)
    basis = SelfHostedBasis(
        model=model,
        usd_per_hour=server.usd_per_hour,
        output_tokens_per_sec=tput,
        throughput="declared" if declared is not None else "measured",
        note=server.note,
    )
    if not tput:
        return list(records), basis
    per_token = server.usd_per_hour / 3600.0 / tput
    out = []
    for r in records:
        if r.cost_usd is None and r.tokens is not None:
            r = dataclasses.replace(
                r, cost_usd=r.tokens.output * per_token, cost_source="self-hosted"
            )
        out.append(r)
    return out, basis
