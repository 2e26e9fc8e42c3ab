"""A trial's record as the grading service's answer (records/serve.py GradeResult).

One mapping for every graded thing the service answers, a grade item or a session:
- graded: `ok`, its reward; graded after the submission could not be applied
  (the agent's error `invalid_submission`): `invalid`, reward 0;
- verifier_failed (the blame rule put the grading failure on the attempt): `ok`,
  reward 0, with its reason;
- every other outcome (sandbox, model or task failures, resources, cancellation):
  `unscorable`, reward None (the trainer masks it).
"""

from __future__ import annotations

from crucible.agents.submission import INVALID
from crucible.errors import ErrorKind
from crucible.records.serve import GradeResult, GradeStatus
from crucible.records.trial import TrialResult


def grade_result(
    trial: TrialResult, *, id: str, cached: bool = False, group_id: str | None = None
) -> GradeResult:
    """The answer for `trial`, graded under the client's `id`."""
    base = GradeResult(id=id, status=GradeStatus.unscorable, task_hash=trial.task_checksum,
                       cached=cached, trial=f"{trial.job_id}/{trial.trial_name}",
                       group_id=group_id)  # fmt: skip
    agent_error = trial.agent_result.error if trial.agent_result else None
    if trial.graded:
        vr = trial.verifier_result
        rewards = dict(vr.rewards) if vr is not None and vr.rewards else None
        if agent_error is not None and agent_error.type == INVALID:
            return base.model_copy(update={"status": GradeStatus.invalid, "reward": 0.0,
                                           "rewards": rewards, "error": agent_error.message})  # fmt: skip
        return base.model_copy(
            update={"status": GradeStatus.ok, "reward": trial.reward, "rewards": rewards}
        )
    message = trial.error.message if trial.error is not None else trial.outcome
    if trial.outcome == ErrorKind.verifier_failed.value:
        return base.model_copy(update={"status": GradeStatus.ok, "reward": 0.0, "error": message})
    return base.model_copy(update={"error": f"{trial.outcome}: {message}"})
