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

`Pipeline.for_task(task)` checks all of it once, at launch (engine/launch.py and
`crucible tasks check` call it before any sandbox starts): a wrong table is TaskInvalid
there, not when the first trial is graded. The Pipeline it returns is what grading
needs: `has_stages`, `submission_paths`, `reward_range`, and `run`. Stage kinds are
found by name (verifiers/registry.py: built-ins, then the `crucible.stages` entry points).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from crucible.errors import CrucibleError, TaskInvalid
from crucible.records.reward_range import DEFAULT_RANGE, parse_range
from crucible.records.verifier import StageResult, SubmissionRecord, VerifierResult
from crucible.store.logs import FileLog
from crucible.tasks.models import Task
from crucible.verifiers.registry import StageLookupError, stage_class
from crucible.verifiers.stages.base import Stage, StageContext
from crucible.verifiers.stages.script import ScriptStage
from crucible.verifiers.submission import Submission, declared_paths

META_KEY = "crucible"

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
        try:
            cls = stage_class(kind)
        except StageLookupError as exc:
            raise TaskInvalid(
                f"{task.name}: [[metadata.crucible.stages]] #{i + 1}: {exc.message}",
                hint=exc.hint,
            ) from exc
        try:
            spec = cls.spec_type.model_validate({"role": cls.default_role, **table})
        except ValidationError as exc:
            raise TaskInvalid(f"{task.name}: stage #{i + 1} ({kind}): {_brief(exc)}") from exc
        if spec.role not in cls.roles:
            raise TaskInvalid(
                f"{task.name}: stage #{i + 1} ({kind}): role {spec.role!r} is not one of "
                f"{', '.join(cls.roles)}"
            )
        stage = cls(spec)
        for problem in stage.task_problems(task):
            raise TaskInvalid(f"{task.name}: stage #{i + 1} ({kind}): {problem}")
        stages.append(stage)
    names = [s.name for s in stages]
    if len(set(names)) != len(names) or "script" in names:
        raise TaskInvalid(f"{task.name}: stage names must be unique and not 'script': {names}")
    return meta, stages


def _brief(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'table'}: {e['msg']}" for e in exc.errors()
    )


@dataclass(frozen=True)
class Pipeline:
    """A task's verifier, its [metadata.crucible] checked once: the host-side stages in
    the order they run (score and gate as declared, then veto), the sandbox paths of
    the submission they read, and the range the test script's rewards must fall in."""

    task: Task
    stages: tuple[Stage, ...]
    submission_paths: list[str]
    reward_range: tuple[float, float]

    @classmethod
    def for_task(cls, task: Task) -> Pipeline:
        """The task's pipeline; TaskInvalid naming the table that is wrong."""
        meta, stages = declared(task)
        ordered = [s for s in stages if s.role != "veto"] + [s for s in stages if s.role == "veto"]
        return cls(
            task=task,
            stages=tuple(ordered),
            submission_paths=declared_paths(meta.submission, task.workdir),
            reward_range=meta.reward_range,
        )

    @property
    def has_stages(self) -> bool:
        """Whether host-side stages run (and so a submission is taken before grading)."""
        return bool(self.stages)

    @property
    def required_contracts(self) -> list[str]:
        """The contracts any stage requires of the submission (the judge is told them)."""
        return sorted({c for s in self.stages for c in s.required_contracts})

    async def run(
        self,
        graded: VerifierResult,
        fetch: FetchSubmission,
        log: FileLog,
        *,
        trace: str | None = None,
        test_output: str = "",
        test_output_cut: bool = False,
    ) -> None:
        """Run the stages on `graded` (whose rewards the test script gave) and set its
        stages and final rewards; `test_output`: test.sh's stdout as the host captured it.
        Raises the error of a stage that could not run."""
        script = dict(graded.rewards or {})
        graded.script_rewards = dict(script)
        submission = await fetch(list(self.submission_paths))
        graded.submission = SubmissionRecord(
            files=sorted(submission.files), missing=submission.missing, notes=submission.notes[:50]
        )
        if submission.missing:
            log.warning(
                f"submission: not found, not a regular file or cut: {submission.missing[:10]}"
            )
        ctx = StageContext(self.task, submission, script, self.required_contracts, trace)
        ctx.test_output, ctx.test_output_cut = test_output, test_output_cut
        ctx.earlier.append(await ScriptStage(graded.exit_code).run(ctx))
        graded.stages = ctx.earlier
        for stage in self.stages:
            why = _failing(ctx) if stage.costly else None
            if why is not None:
                ctx.earlier.append(stage.result(status="skipped", reason=f"not run: {why}"))
                continue
            try:
                ctx.earlier.append(await _run_one(stage, ctx, log))
            except CrucibleError:
                graded.rewards = None  # no reward: the trial ends with the stage's error
                raise
        graded.rewards = final_rewards(script, ctx.earlier)


def stage_problems(task: Task) -> list[str]:
    """What is wrong with the task's stage declarations (Pipeline.for_task at launch
    and in `crucible tasks check`, before any sandbox starts), as problems to list."""
    try:
        Pipeline.for_task(task)
    except TaskInvalid as exc:
        return [f"{exc.message} ({exc.hint})" if exc.hint else exc.message]
    return []


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


async def _run_one(stage: Stage, ctx: StageContext, log: FileLog) -> StageResult:
    t0 = time.monotonic()
    try:
        res = await stage.run(ctx)
    except Exception as exc:
        if isinstance(exc, CrucibleError):
            err = exc
        else:
            why = f"stage {stage.name} crashed: {type(exc).__name__}: {exc}"
            err = stage.crash_kind(why[:1000])
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
