"""The one grading sequence: a one-step trial (engine/trial.py) and each step of a
multi-step task (engine/steps.py) are graded by `Grader.grade`, in this order:

1. hand-over: every agent process killed; in separate mode, what the attempt changed in
   the system is read now (in place, just before the tests go in);
2. the submission the host-side stages judge (`[metadata.crucible] submission`, when
   the task declares stages), taken here, before anything graded runs: test.sh and a
   collect hook run commands in the sandbox, often the agent's own code, which could
   otherwise swap the files the gate and the judge read;
3. the task's [[verifier.collect]] hooks, then its artifacts (grading/artifacts.py);
4. in separate mode, the agent's sandbox closed once nothing else needs it (a one-step
   trial always; a step only when it is the last);
5. the script stage, tests/test.sh: in place (grading/script.py) or in a new verifier
   sandbox given only the taken artifacts (grading/separate.py);
6. the record: test.sh's output and the rewards read from what was collected
   (grading/record.py), on the trial's record or the step's, before anything can fail;
7. the host-side stages on those rewards, with the submission taken in 2.

A step's verifier mode is Harbor's precedence ([steps.verifier] first, then the task's).
Blame is one rule (grading/blame.py): grading that breaks in a live sandbox is the
attempt's; a verifier sandbox that cannot be made is the infrastructure's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crucible.engine.collect import TrialCollector
from crucible.engine.grading.artifacts import hand_over, take_artifacts
from crucible.engine.grading.blame import blamed, shielded
from crucible.engine.grading.record import note_changes, record_grade
from crucible.engine.grading.script import grade_in_place
from crucible.engine.grading.separate import grade_separately
from crucible.engine.spec import verifier_spec
from crucible.records.tamper import TamperPolicy
from crucible.records.trial import StepResult, TrialResult
from crucible.records.verifier import VerifierResult
from crucible.sandboxes.base import ExecResult, Provider, Sandbox
from crucible.sandboxes.ratelimit import StartGate
from crucible.store.layout import LOGS_ARTIFACTS, LOGS_VERIFIER, VERIFIER_DIR, collected_dir
from crucible.store.logs import FileLog
from crucible.tasks.models import StepSection, Task
from crucible.tasks.sections import VerifierMode
from crucible.verifiers.pipeline import Pipeline
from crucible.verifiers.script import TESTS_DIR
from crucible.verifiers.submission import Submission, collect_submission


@dataclass(frozen=True)
class Graded:
    """One grading's outcome: its record (the rewards after the stages) and how it ran."""

    verifier: VerifierResult
    mode: VerifierMode
    submission: Submission | None = None  # what the stages judged (None: no stages)

    @property
    def rewards(self) -> dict[str, float] | None:
        return self.verifier.rewards


@dataclass
class Grader:
    """Grades a trial's attempt (or each of its steps). `task` is the whole task; a
    step's view of it (engine/steps.step_task) is given to `grade`."""

    task: Task
    result: TrialResult
    collector: TrialCollector
    log: FileLog
    provider: Provider  # what a separate verifier sandbox is made with:
    job_id: str
    trial_name: str
    params: dict[str, str] | None = None  # the job's environment parameters
    gate: StartGate | None = None  # the job's start gate
    tampered: TamperPolicy = "flag"  # the job's policy, for in-place grading
    in_place: bool = False  # the last grading ran in the agent's sandbox
    graded_steps: int = 0  # steps graded so far in this trial

    async def clear(self, sandbox: Sandbox) -> None:
        """Before a step's setup: empty what the previous step's in-place grading left
        (its tests, its reward files), so no agent sees them; and, once a step was graded,
        /logs/artifacts, whose files that step's folder now keeps. Harbor 0.25 moves a
        step's artifacts out of the trial's artifacts folder into steps/NAME/artifacts/
        after each step, which empties the sandbox's bind-mounted /logs/artifacts
        (src/harbor/trial/multi_step.py, `_archive_step_outputs`): each step's folder holds
        what that step wrote."""
        if self.in_place:
            await sandbox.reset_dir(TESTS_DIR)
            await sandbox.reset_dir(LOGS_VERIFIER)
            self.in_place = False
        if self.graded_steps:
            await sandbox.reset_dir(LOGS_ARTIFACTS)

    async def grade(
        self,
        sandbox: Sandbox,
        view: Task,
        *,
        into: Path,
        step: StepSection | None = None,
        last: bool = True,
    ) -> Graded:
        """Grade the attempt in `sandbox` (its agent phase over) as `view` has it: the task,
        or step `step`'s view of it. Its files go under `into` (the trial's folder, or the
        step's); its record onto the trial's record, or the step's. `last`: no later step
        needs the agent's sandbox."""
        cfg = self.task.config
        mode = cfg.verifier_mode() if step is None else cfg.step_verifier_mode(step)
        separate = mode == VerifierMode.separate
        record = self._record(step)
        record.verifier_environment_mode = mode.value
        pipeline = Pipeline.for_task(view)  # its stages, read once (checked at launch)
        changed = await hand_over(sandbox, separate=separate)
        submission = None
        if pipeline.has_stages:  # the agent's work as it left it, before anything is graded
            paths = list(pipeline.submission_paths)
            submission = await blamed(sandbox, collect_submission(sandbox, paths, into))
        taken = await take_artifacts(
            sandbox, view, self.collector, self.log, with_logs=separate, into=into
        )
        # /logs/artifacts as test.sh left them, the trial's or (a multi-step task) the step's,
        # into <trial>/steps/NAME/sandbox/logs/artifacts/.
        folders = [LOGS_VERIFIER, LOGS_ARTIFACTS]
        if step is not None:
            self.graded_steps += 1

        async def collect(box: Sandbox) -> Path:
            await box.kill_all()  # what test.sh left running may not race the copy
            got = [await self.collector.collect(box, f, collected_dir(into, f)) for f in folders]
            return got[0]

        if separate:
            note_changes(self.result, changed, self.log, shared=False)
            if last:  # nothing else needs the agent's sandbox
                await shielded(sandbox.close())
            spec = verifier_spec(
                self.task, job_id=self.job_id, trial_id=self.trial_name, params=self.params,
                step=step,
            )  # fmt: skip
            res, verifier_dir = await grade_separately(
                view, spec, self.provider, taken, self.log, collect, self.gate
            )
        else:
            self.in_place = True  # set first: a failed grading may have left files too
            res, verifier_dir = await blamed(
                sandbox,
                grade_in_place(sandbox, view, self.result, self.log, collect, self.tampered),
            )

        def hold(verifier: VerifierResult) -> None:
            record.verifier_result = verifier

        verifier = record_grade(
            res,
            verifier_dir,
            into / VERIFIER_DIR,  # crucible's own: never a folder the sandbox shares
            view.verifier_timeout_sec,
            self.log,
            hold,
            pipeline.reward_range,
        )
        if submission is not None:
            await self._stages(pipeline, verifier, submission, res)
        return Graded(verifier, mode, submission)

    async def _stages(
        self,
        pipeline: Pipeline,
        verifier: VerifierResult,
        submission: Submission,
        res: ExecResult,
    ) -> None:
        """The task's host-side stages (verifiers/pipeline.py) gate, score or veto the
        rewards just read, on the submission taken before grading, with test.sh's stdout
        as the grading exec returned it. A stage that cannot run raises its error kind."""

        async def fetch(paths: list[str]) -> Submission:
            return submission

        await pipeline.run(
            verifier, fetch, self.log, test_output=res.stdout, test_output_cut=res.truncated
        )

    def _record(self, step: StepSection | None) -> TrialResult | StepResult:
        """Where this grading is recorded: the trial's record, or its step's (the last of
        that name: engine/steps.py appends it before the step runs)."""
        if step is None:
            return self.result
        for record in reversed(self.result.steps or []):
            if record.name == step.name:
                return record
        raise ValueError(f"step {step.name!r} has no record on the trial")
