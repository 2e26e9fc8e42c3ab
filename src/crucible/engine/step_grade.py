"""Grading one step of a multi-step trial (engine/steps.py), in the agent's sandbox or in
a separate verifier sandbox, then the task's host-side stages.

Once the step's agent processes are killed and its /logs/agent collected:
1. its artifacts are taken (after the task's and the step's [[verifier.collect]] hooks:
   the task's `artifacts` and the step's, into <trial>/steps/NAME/sandbox/artifacts/),
   and, when the task declares stages, its submission (steps/NAME/sandbox/submission/):
   both before any grading can touch the agent's files;
2. it is graded as a one-step trial is, by the step's verifier mode (Harbor's
   precedence: [steps.verifier] environment_mode or environment, then the task's):
   - shared: in the agent's sandbox (grading.grade: /tests and /logs/verifier reset
     from the host side, test.sh in the grading context). The next step's setup starts
     by emptying /tests and /logs/verifier again, so no agent sees a step's tests;
   - separate: in a NEW sandbox (separate.grade_separately, from
     verifier_spec(task, step=...)) that gets only the step's taken artifacts. The
     agent's sandbox stays alive for the next step; only before the last step's
     separate grading is it closed (nothing else needs it), as Harbor stops it;
3. the task's [metadata.crucible] stages (verifiers/pipeline.py) run on the step's
   rewards with the submission taken in 1., giving the step's final rewards; their
   results stay in that step's verifier_result.stages. A stage that cannot run ends the
   trial with its error kind, as in a one-step trial. Harbor's steps have no metadata
   table, so a step cannot declare stages of its own: the task's apply to every step.

Blame is a one-step trial's: a verifier sandbox that cannot be made is the
infrastructure's (sandbox_failed); grading that breaks in a live sandbox is the attempt's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crucible.engine.artifacts import hand_over
from crucible.engine.collect import TrialCollector
from crucible.engine.grading import blamed, grade, note_changes, record_grade, shielded
from crucible.engine.separate import grade_separately, verifier_spec
from crucible.records.tamper import TamperPolicy
from crucible.records.trial import StepResult, TimingInfo, TrialResult, utcnow
from crucible.records.verifier import VerifierResult
from crucible.sandboxes.base import Provider, Sandbox
from crucible.sandboxes.ratelimit import StartGate
from crucible.store.layout import LOGS_VERIFIER, VERIFIER_DIR
from crucible.store.logs import FileLog
from crucible.tasks.models import StepSection, Task
from crucible.tasks.sections import VerifierMode
from crucible.verifiers.pipeline import (
    FetchSubmission,
    has_stages,
    reward_range,
    run_pipeline,
    submission_paths,
)
from crucible.verifiers.script import TESTS_DIR
from crucible.verifiers.submission import Submission, collect_submission


@dataclass(frozen=True)
class VerifierSandboxes:
    """What a separate verifier sandbox is made with: the trial's provider, its names,
    the job's environment parameters and its start gate."""

    provider: Provider
    job_id: str
    trial_name: str
    params: dict[str, str] | None = None
    gate: StartGate | None = None
    tampered: TamperPolicy = "flag"  # the job's policy, for in-place grading (grading.py)


@dataclass
class StepGrader:
    task: Task  # the whole task (a step's view is given to `grade`)
    result: TrialResult
    collector: TrialCollector
    log: FileLog
    verifiers: VerifierSandboxes
    in_place: bool = False  # the last step was graded in the agent's sandbox

    async def clear(self, sandbox: Sandbox) -> None:
        """Before a step's setup: empty what the previous step's in-place grading left
        (its tests, its reward files), so no agent sees them."""
        if self.in_place:
            await sandbox.reset_dir(TESTS_DIR)
            await sandbox.reset_dir(LOGS_VERIFIER)
            self.in_place = False

    async def grade(
        self,
        sandbox: Sandbox,
        step: StepSection,
        view: Task,
        folder: Path,
        record: StepResult,
        *,
        last: bool,
    ) -> dict[str, float] | None:
        """Grade step `step` (its task as `view`, engine/steps.step_task); its files go
        under `folder`. Returns its final rewards (after the stages)."""
        mode = self.task.config.step_verifier_mode(step)
        record.verifier_environment_mode = mode.value
        separate = mode == VerifierMode.separate
        taken, changed = await hand_over(
            sandbox, view, self.collector, self.log, separate=separate, into=folder
        )
        submission = None
        if has_stages(view):  # the agent's work as it left it, before anything is graded
            paths = submission_paths(view)
            submission = await blamed(sandbox, collect_submission(sandbox, paths, folder))
        record.verifier = TimingInfo(started_at=utcnow())
        dst = folder / "sandbox/logs/verifier"

        async def collect(box: Sandbox) -> Path:
            await box.kill_all()  # what test.sh left running may not race the copy
            return await self.collector.collect(box, LOGS_VERIFIER, dst)

        if separate:
            note_changes(self.result, changed, self.log, shared=False)
            if last:  # nothing else needs the agent's sandbox
                await shielded(sandbox.close())
            v = self.verifiers
            spec = verifier_spec(
                self.task, job_id=v.job_id, trial_id=v.trial_name, params=v.params, step=step
            )
            res, verifier_dir = await grade_separately(
                view, spec, v.provider, taken, self.log, collect, v.gate
            )
        else:
            self.in_place = True  # set first: a failed grading may have left files too
            res, verifier_dir = await blamed(
                sandbox,
                grade(
                    sandbox, view, self.result, self.log, lambda: collect(sandbox),
                    self.verifiers.tampered,
                ),
            )  # fmt: skip

        def hold(graded: VerifierResult) -> None:
            record.verifier_result = graded

        own = folder / VERIFIER_DIR
        graded = record_grade(
            res, verifier_dir, own, view.verifier_timeout_sec, self.log, hold, reward_range(view)
        )
        if submission is not None:
            await run_pipeline(view, graded, _given(submission), self.log)
        record.verifier.finished_at = utcnow()
        return graded.rewards


def _given(submission: Submission) -> FetchSubmission:
    async def fetch(paths: list[str]) -> Submission:
        return submission

    return fetch
