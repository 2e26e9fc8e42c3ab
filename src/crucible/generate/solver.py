"""The solver's attempts on a proven task, and its difficulty by unbiased pass@k.

The solver is any crucible agent (default: terminal) on an OpenAI-compatible
endpoint. It attempts a task k times; when the solve rate lands within EDGE of
a band edge it attempts up to MORE_ATTEMPTS in all. Solved means a reward of 1.
A task never solved is tried by the strong solver, when one is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crucible.generate.proofs import Where, run_job
from crucible.metrics.passk import pass_at_k
from crucible.records.trial import TrialResult
from crucible.records.usage import Usage

MORE_ATTEMPTS = 8
EDGE = 0.15


@dataclass
class SolverSpec:
    agent: str = "terminal"
    kwargs: dict[str, Any] = field(default_factory=dict)  # model, model_base_url, ...

    @property
    def model(self) -> str | None:
        value = self.kwargs.get("model")
        return str(value) if value else None


@dataclass
class Rating:
    n: int
    c: int
    usage: Usage
    cost_usd: float | None
    approach: str  # the last steps of a successful attempt (for hardening)

    def pass_at(self, k: int) -> float | None:
        return pass_at_k(self.n, self.c, k) if self.n else None


def solved(r: TrialResult) -> bool:
    return r.outcome == "graded" and (r.reward or 0.0) >= 1.0


def near_edge(rate: float, band: tuple[float, float]) -> bool:
    return any(abs(rate - edge) <= EDGE for edge in band)


async def rate(
    task_dir: Path, jobs: Path, spec: SolverSpec, k: int, band: tuple[float, float],
    *, where: Where = Where(), job: str = "solve",
) -> Rating:  # fmt: skip
    results = await run_job(
        [task_dir], jobs, job, spec.agent, k, where=where, agent_kwargs=spec.kwargs
    )
    counted = [r for r in results if r.counted_reward is not None]
    c = sum(solved(r) for r in counted)
    if counted and 0 < c < len(counted) and near_edge(c / len(counted), band) and k < MORE_ATTEMPTS:
        more = await run_job(
            [task_dir], jobs, f"{job}-more", spec.agent, MORE_ATTEMPTS - k,
            where=where, agent_kwargs=spec.kwargs,
        )  # fmt: skip
        results += more
        counted += [r for r in more if r.counted_reward is not None]
        c = sum(solved(r) for r in counted)
    return Rating(
        n=len(counted), c=c, usage=usage_of(results), cost_usd=cost_of(results),
        approach=approach_of(jobs, results),
    )  # fmt: skip


def usage_of(results: list[TrialResult]) -> Usage:
    total = Usage()
    for r in results:
        a = r.agent_result
        if a is not None:
            total = total + Usage(
                input_tokens=a.n_input_tokens or 0,
                cache_read_tokens=a.n_cache_tokens or 0,
                cache_write_tokens=a.n_cache_write_tokens or 0,
                output_tokens=a.n_output_tokens or 0,
            )
    return total


def cost_of(results: list[TrialResult]) -> float | None:
    costs = [r.agent_result.cost_usd for r in results if r.agent_result]
    known = [c for c in costs if c is not None]
    return sum(known) if known else None


def approach_of(jobs: Path, results: list[TrialResult]) -> str:
    """The tool calls of the first solved attempt, from its trajectory (crucible's own
    record, read through `load_trajectory`), at most the last 4,000 characters."""
    import json

    from crucible.records.trajectory import load_trajectory

    for r in results:
        if not solved(r):
            continue
        try:
            traj = load_trajectory(jobs / r.job_id / r.trial_name / "agent")
        except (OSError, ValueError):
            return ""
        calls = [
            {"tool": a.tool, "arguments": a.arguments, "exit_code": a.exit_code}
            for turn in traj.turns
            for a in turn.actions
        ]
        return json.dumps(calls)[-4000:]
    return ""
