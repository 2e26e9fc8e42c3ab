"""The first stage: the task's own tests/test.sh, run in the sandbox (verifiers/script.py,
engine/grading/). By the time host-side stages run it has given its rewards; this stage
records them as its components, as every stage records what it gave."""

from __future__ import annotations

from typing import ClassVar

from crucible.records.verifier import StageResult, StageRole
from crucible.verifiers.stages.base import Stage, StageContext, StageSpec


class ScriptStage(Stage):
    kind: ClassVar[str] = "script"
    default_role: ClassVar[StageRole] = "score"
    roles: ClassVar[tuple[StageRole, ...]] = ("score",)

    def __init__(self, exit_code: int | None = None) -> None:
        super().__init__(StageSpec(kind="script", role="score"))
        self.exit_code = exit_code

    async def run(self, ctx: StageContext) -> StageResult:
        return self.result(
            status="passed",
            components=dict(ctx.rewards),
            reason="tests/test.sh gave its rewards",
            details={"exit_code": self.exit_code},
        )
