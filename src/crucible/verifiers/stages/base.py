"""The one small interface every verifier stage has, and what a stage is given.

A stage has a name, a kind and a role:
* score: gives reward components (added to the rewards as "<name>.<component>");
* gate: must pass for the reward to count (a failed gate zeroes the script's rewards);
* veto: may zero the reward, with a reason.
`run` returns a StageResult (records/verifier.py) whose status says which of these
happened. A stage that cannot run raises the CrucibleError of the matching kind
(ModelFailed for a judge endpoint that is down, VerifierFailed for an analyzer the
submission crashed): the trial then ends with that error, never with a 0 or a 1.

What the pipeline needs to know of a kind is on its class: the spec it reads
(`spec_type`), its default and allowed roles, whether it costs a model call (`costly`:
never spent on a rollout already failing), whose fault a crash is (`crash_kind`), and
the contracts it requires of the submission (`required_contracts`, told to the judge).
Kinds are found by name through verifiers/registry.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from crucible.errors import CrucibleError, VerifierFailed
from crucible.records.verifier import StageResult, StageRole, StageStatus
from crucible.tasks.models import Task
from crucible.verifiers.submission import Submission


class StageSpec(BaseModel):
    """One `[[metadata.crucible.stages]]` table; each kind extends it with its options."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    role: StageRole
    name: str = ""  # defaults to the kind

    @property
    def stage_name(self) -> str:
        return self.name or self.kind


@dataclass
class StageContext:
    """What a host-side stage reads. `trace`: a runtime trace of the submission, when a
    stage before it (or a runtime) recorded one; the judge passes it on. `test_output`:
    what the script stage printed (the swebench stage parses it)."""

    task: Task
    submission: Submission
    rewards: dict[str, float]
    required_contracts: list[str] = field(default_factory=list)
    trace: str | None = None
    earlier: list[StageResult] = field(default_factory=list)
    # test.sh's stdout as the host captured it from the grading exec (capped at the exec's
    # output cap; `test_output_cut` when it was cut): never a file the sandbox wrote.
    test_output: str = ""
    test_output_cut: bool = False


class Stage(ABC):
    kind: ClassVar[str]
    spec_type: ClassVar[type[StageSpec]] = StageSpec  # the table's model, for this kind
    default_role: ClassVar[StageRole]
    roles: ClassVar[tuple[StageRole, ...]]
    # Costs a model call: run only on a rollout still passing, else recorded as skipped.
    costly: ClassVar[bool] = False
    # Whose failure a crash is (an exception that is not a CrucibleError): by default the
    # attempt's (the analyzer was given the submission: verifier_failed, counted 0).
    crash_kind: ClassVar[type[CrucibleError]] = VerifierFailed

    def __init__(self, spec: StageSpec) -> None:
        self.spec = spec

    @property
    def name(self) -> str:
        return self.spec.stage_name

    @property
    def role(self) -> StageRole:
        return self.spec.role

    @property
    def required_contracts(self) -> list[str]:
        """The Modal contracts this stage requires of the submission (none by default)."""
        return []

    def task_problems(self, task: Task) -> list[str]:
        """What makes this stage unable to grade `task` at all, found at launch (and by
        `crucible tasks check`) before any sandbox starts: none by default."""
        return []

    def status(self, ok: bool) -> StageStatus:
        """What a verdict means for this stage's role: a score stage never zeroes."""
        if ok or self.role == "score":
            return "passed"
        return "failed" if self.role == "gate" else "vetoed"

    def result(self, **fields: object) -> StageResult:
        """A StageResult of this stage (name, kind, role filled in)."""
        return StageResult(name=self.name, kind=self.kind, role=self.role, **fields)  # type: ignore[arg-type]

    @abstractmethod
    async def run(self, ctx: StageContext) -> StageResult:
        """Judge the submission; raise a CrucibleError when the stage cannot run."""
