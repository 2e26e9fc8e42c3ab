"""The verifier pipeline: the task's declared stages, run after the test script gave
its rewards, and what they make of the reward.

A task declares them under [metadata] (Harbor ignores it, so Harbor still loads the
task and runs its test script):

    [metadata.crucible]
    submission = ["/app/main.py"]          # read by host-side stages
    reward_range = [0, 1]                  # the default; a reward outside is verifier_failed
    [[metadata.crucible.stages]]
    kind = "contracts"                     # role = "gate" by default
    require = ["function", "gpu"]
    [[metadata.crucible.stages]]
    kind = "judge"                         # role = "veto" by default
    model = "gpt-4.1-mini"
    base_url_env = "CRUCIBLE_JUDGE_BASE_URL"

Order: the script stage, then score and gate stages as declared, then veto stages.
A costly stage (the judge) runs only on a rollout still passing (primary reward > 0,
no gate failed, no veto yet); otherwise it is recorded as skipped. A failed gate or a
veto sets every reward the script gave to 0; each host stage's components are added
as "<stage>.<component>". Every stage's result goes into verifier_result.stages, the
one that could not run included, before its error ends the trial.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from crucible.errors import CrucibleError, ModelFailed, TaskInvalid, VerifierFailed
from crucible.records.reward_range import DEFAULT_RANGE, parse_range
from crucible.records.verifier import StageResult, SubmissionRecord, VerifierResult
from crucible.store.logs import FileLog
from crucible.tasks.models import Task
from crucible.verifiers.stages.base import Stage, StageContext, StageSpec
from crucible.verifiers.stages.contracts import ContractsSpec, ContractsStage
from crucible.verifiers.stages.io import IoSpec, IoStage
from crucible.verifiers.stages.judge import JudgeSpec, JudgeStage
from crucible.verifiers.stages.script import ScriptStage
from crucible.verifiers.submission import Submission, declared_paths

META_KEY = "crucible"
KINDS: dict[str, tuple[type[Stage], type[StageSpec]]] = {
    "contracts": (ContractsStage, ContractsSpec),
    "io": (IoStage, IoSpec),
    "judge": (JudgeStage, JudgeSpec),
}
# Stages that cost a model call: never spent on a rollout that already failed.
COSTLY = frozenset({"judge"})
# When a stage cannot run for a reason that is not a CrucibleError (a crash), whose
# failure it is: the judge's endpoint (model_failed), else the attempt's (the analyzer
# was given the submission: verifier_failed, counted 0).
CRASH_KIND: dict[str, type[CrucibleError]] = {"judge": ModelFailed}

FetchSubmission = Callable[[list[str]], Awaitable[Submission]]


class CrucibleMeta(BaseModel):
    """`[metadata.crucible]`: crucible's keys that this pipeline reads (others are kept)."""

    model_config = ConfigDict(extra="allow")

    submission: list[str] = Field(default_factory=list)
    stages: list[dict[str, Any]] = Field(default_factory=list)
    reward_range: tuple[float, float] = DEFAULT_RANGE

    @field_validator("reward_range", mode="before")
    @classmethod
    def _range(cls, value: Any) -> tuple[float, float]:
        return parse_range(value)  # finite, lo < hi: a bound of inf would admit any reward


def declared(task: Task) -> tuple[CrucibleMeta, list[Stage]]:
    """The task's submission and stages; TaskInvalid naming the table that is wrong."""
    raw = task.metadata.get(META_KEY) or {}
    try:
        meta = CrucibleMeta.model_validate(raw)
    except ValidationError as exc:
        raise TaskInvalid(f"{task.name}: [metadata.crucible]: {_brief(exc)}") from exc
    stages: list[Stage] = []
    for i, table in enumerate(meta.stages):
        kind = str(table.get("kind", ""))
        if kind not in KINDS:
            raise TaskInvalid(
                f"{task.name}: [[metadata.crucible.stages]] #{i + 1}: unknown kind {kind!r}",
                hint=f"kinds: {', '.join(sorted(KINDS))}",
            )
        cls, spec_cls = KINDS[kind]
        try:
            spec = spec_cls.model_validate({"role": cls.default_role, **table})
        except ValidationError as exc:
            raise TaskInvalid(f"{task.name}: stage #{i + 1} ({kind}): {_brief(exc)}") from exc
        if spec.role not in cls.roles:
            raise TaskInvalid(
                f"{task.name}: stage #{i + 1} ({kind}): role {spec.role!r} is not one of "
                f"{', '.join(cls.roles)}"
            )
        stages.append(cls(spec))
    names = [s.name for s in stages]
    if len(set(names)) != len(names) or "script" in names:
        raise TaskInvalid(f"{task.name}: stage names must be unique and not 'script': {names}")
    return meta, stages


def _brief(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'table'}: {e['msg']}" for e in exc.errors()
    )


def stage_problems(task: Task) -> list[str]:
    """What is wrong with the task's stage declarations (checked before any trial runs)."""
    try:
        declared(task)
    except TaskInvalid as exc:
        return [exc.message]
    return []


def has_stages(task: Task) -> bool:
    raw = task.metadata.get(META_KEY)
    return isinstance(raw, dict) and bool(raw.get("stages"))


def reward_range(task: Task) -> tuple[float, float]:
    """The [lo, hi] the test script's rewards must fall in (checked at launch)."""
    return declared(task)[0].reward_range


def submission_paths(task: Task) -> list[str]:
    """The sandbox paths of the task's declared submission (what a stage's fetch gets)."""
    return declared_paths(declared(task)[0].submission, task.workdir)


def _primary(rewards: dict[str, float]) -> float | None:
    if "reward" in rewards:
        return rewards["reward"]
    return next(iter(rewards.values()), None)


def _failing(ctx: StageContext) -> str | None:
    """Why the rollout already fails (so a costly stage is not spent on it), or None."""
    for s in ctx.earlier:
        if s.status in ("failed", "vetoed"):
            return f"stage {s.name} {s.status}"
    primary = _primary(ctx.rewards)
    if primary is None or primary <= 0:
        return f"the test script's reward is {primary}"
    return None


async def run_pipeline(
    task: Task,
    verifier: VerifierResult,
    fetch: FetchSubmission,
    log: FileLog,
    *,
    trace: str | None = None,
) -> None:
    """Run the task's stages on `verifier` (whose rewards the test script gave) and set
    its stages and final rewards. Raises the error of a stage that could not run."""
    stages = declared(task)[1]
    script = dict(verifier.rewards or {})
    verifier.script_rewards = dict(script)
    submission = await fetch(submission_paths(task))
    verifier.submission = SubmissionRecord(
        files=sorted(submission.files), missing=submission.missing, notes=submission.notes[:50]
    )
    if submission.missing:
        log.warning(f"submission: not found, not a regular file or cut: {submission.missing[:10]}")
    required = sorted({c for s in stages if isinstance(s, ContractsStage) for c in s.spec.require})
    ctx = StageContext(task, submission, script, required, trace)
    ctx.earlier.append(await ScriptStage(verifier.exit_code).run(ctx))
    verifier.stages = ctx.earlier
    ordered = [s for s in stages if s.role != "veto"] + [s for s in stages if s.role == "veto"]
    for stage in ordered:
        why = _failing(ctx) if stage.kind in COSTLY else None
        if why is not None:
            ctx.earlier.append(stage.result(status="skipped", reason=f"not run: {why}"))
            continue
        try:
            ctx.earlier.append(await _run_one(stage, ctx, log))
        except CrucibleError:
            verifier.rewards = None  # no reward: the trial ends with the stage's error
            raise
    verifier.rewards = final_rewards(script, ctx.earlier)


async def _run_one(stage: Stage, ctx: StageContext, log: FileLog) -> StageResult:
    t0 = time.monotonic()
    try:
        res = await stage.run(ctx)
    except Exception as exc:
        if isinstance(exc, CrucibleError):
            err = exc
        else:
            kind = CRASH_KIND.get(stage.kind, VerifierFailed)
            err = kind(f"stage {stage.name} crashed: {type(exc).__name__}: {exc}"[:1000])
            log.error(traceback.format_exc()[-2000:])
        ctx.earlier.append(
            stage.result(status="error", reason=f"{err.kind.value}: {err.message}"[:2000])
        )
        if err is exc:
            raise
        raise err from exc
    res.duration_sec = round(time.monotonic() - t0, 3)
    if res.usage is not None:
        log.info(
            f"stage {stage.name}: {res.status} ({res.usage.input_tokens} in, "
            f"{res.usage.output_tokens} out tokens, cost {res.cost_usd})"
        )
    else:
        log.info(f"stage {stage.name}: {res.status}: {res.reason[:200]}")
    return res


def final_rewards(script: dict[str, float], stages: list[StageResult]) -> dict[str, float]:
    """The script's rewards (all 0 after a failed gate or a veto), then every host stage's
    components as "<stage>.<component>"."""
    zeroed = any(s.status in ("failed", "vetoed") for s in stages)
    out = {k: (0.0 if zeroed else v) for k, v in script.items()}
    for s in stages:
        if s.kind != "script":
            out.update({f"{s.name}.{k}": v for k, v in s.components.items()})
    return out
