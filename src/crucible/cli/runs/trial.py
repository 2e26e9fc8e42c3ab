"""`crucible runs get JOB --trial NAME`: one trial in detail, each verifier stage with its
status, components, verdict and whole reason, and the judge's model, tokens and cost
beside the agent's (so a veto says why, and what it cost, apart from the rollout)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from rich.markup import escape

from crucible.cli.common import console, fail, print_json
from crucible.errors import ExitCode
from crucible.records.trial import AgentResult, ErrorInfo, TrialResult
from crucible.records.verifier import StageResult


class TrialDetail(BaseModel):
    job_id: str
    trial_name: str
    task_name: str
    attempt: int
    outcome: str
    reward: float | None  # what the trial counts as in a mean (None: left out)
    rewards: dict[str, float] | None = None
    script_rewards: dict[str, float] | None = None
    error: ErrorInfo | None = None
    agent: AgentResult | None = None
    stages: list[StageResult] = Field(default_factory=list)
    stage_note: str | None = None  # why a stage zeroed the trial (or could not run)
    not_fully_graded: list[str] = Field(default_factory=list)  # declared, not run
    stage_cost_usd: float | None = None


def find_trial(job_path: Path, name: str, as_json: bool) -> TrialResult:
    """The trial named exactly, or by a unique prefix; exit 3 / 2 otherwise."""
    from crucible.cli.common import warn_skipped
    from crucible.store.layout import iter_trial_results
    from crucible.store.trial_load import Skipped

    skipped: list[Skipped] = []
    results = {r.trial_name: r for r in iter_trial_results(job_path, skipped)}
    warn_skipped(skipped, as_json=as_json)
    if name in results:
        return results[name]
    matches = sorted(n for n in results if n.startswith(name))
    if len(matches) == 1:
        return results[matches[0]]
    if matches:
        fail(ExitCode.USAGE, "ambiguous_id", f"trial {name!r} matches {', '.join(matches[:10])}",
             hint="give more of the name", as_json=as_json)  # fmt: skip
    fail(ExitCode.NOT_FOUND, "not_found", f"no finished trial {name!r} in {job_path.name}",
         hint=f"`crucible runs get {job_path.name} --verbose` lists its trials",
         as_json=as_json)  # fmt: skip


def trial_detail(r: TrialResult) -> TrialDetail:
    v = r.verifier_result
    return TrialDetail(
        job_id=r.job_id,
        trial_name=r.trial_name,
        task_name=r.task_name,
        attempt=r.attempt,
        outcome=r.outcome,
        reward=r.counted_reward,
        rewards=v.rewards if v else None,
        script_rewards=v.script_rewards if v else None,
        error=r.error,
        agent=r.agent_result,
        stages=v.stages if v else [],
        stage_note=v.stage_note() if v else None,
        not_fully_graded=r.not_fully_graded() if r.graded else [],
        stage_cost_usd=v.stage_cost_usd if v else None,
    )


def _tokens(n_in: int | None, n_out: int | None, cost: float | None) -> str:
    price = f", ${cost:.4f}" if cost is not None else ""
    return f"{n_in or 0} in / {n_out or 0} out tokens{price}"


def _stage_line(s: StageResult) -> str:
    comps = " ".join(f"{k}={v:g}" for k, v in s.components.items())
    verdict = f" verdict {s.verdict}" if s.verdict else ""
    return f"    {s.name} ({s.kind}, {s.role}): {s.status}{verdict}" + (
        f"  {comps}" if comps else ""
    )


def print_trial(d: TrialDetail, as_json: bool) -> None:
    if as_json:
        print_json(d.model_dump(mode="json"))
        return
    reward = "-" if d.reward is None else f"{d.reward:.3f}"
    console.print(f"[bold]{d.job_id}/{d.trial_name}[/]  {d.outcome}  reward {reward}",
                  highlight=False)  # fmt: skip
    for why in d.not_fully_graded:
        console.print(f"  not fully graded: {escape(why)}", style="yellow", highlight=False)
    if d.error is not None:
        console.print(f"  error {d.error.kind}: {escape(d.error.message)}", highlight=False)
    if d.rewards:
        console.print("  rewards " + _kv(d.rewards), highlight=False)
    if d.script_rewards is not None:
        console.print("  test script gave " + _kv(d.script_rewards), highlight=False)
    if d.agent is not None and (d.agent.n_input_tokens or d.agent.cost_usd is not None):
        console.print("  agent " + _tokens(d.agent.n_input_tokens, d.agent.n_output_tokens,
                                           d.agent.cost_usd), highlight=False)  # fmt: skip
    if d.stages:
        console.print("  verifier stages:")
    for s in d.stages:
        console.print(escape(_stage_line(s)), highlight=False)
        if s.reason:  # whole, never cut: a veto's reason is the point
            console.print(f"      reason: {escape(s.reason)}", highlight=False, soft_wrap=True)
        if s.model is not None:
            usage = s.usage
            tokens = _tokens(usage.input_tokens if usage else None,
                             usage.output_tokens if usage else None, s.cost_usd)  # fmt: skip
            console.print(f"      model {escape(s.model.model)}, prompt {s.model.prompt_version}, "
                          f"{s.model.calls} call(s), {tokens}", highlight=False)  # fmt: skip


def _kv(values: dict[str, Any]) -> str:
    return "  ".join(
        f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in values.items()
    )
