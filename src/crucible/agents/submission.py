"""The `submission` agent: applies a submission (records/submission.py) as the agent's work.

What the grading service runs in place of an agent, so a graded submission is a
trial like any other: the same sandbox, the same collection, the same Grader and
blame rules. It acts as the task's agent user, through the sandbox's exec, so it
can do nothing an agent's own process could not. A submission that cannot be
applied (a patch that does not apply, a path it may not write) is the policy's
failure: the agent result carries error type `invalid_submission` and the trial
is still graded (the service answers `invalid`, reward 0).
"""

from __future__ import annotations

import time

from crucible.agents.base import Agent, AgentContext
from crucible.records.submission import (
    DEFAULT_ANSWER_PATH,
    FilesSubmission,
    PatchSubmission,
    TextSubmission,
    check_sandbox_path,
)
from crucible.records.trial import AgentError, AgentResult
from crucible.sandboxes.base import Sandbox

INVALID = "invalid_submission"
PATCH_PATH = "/tmp/.crucible-submission.patch"
# Writes a file from stdin, as the agent user: its parents are made first.
_WRITE = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'


def answer_path(metadata: dict[str, object]) -> str:
    """Where a text submission goes: `[metadata] answer_path`, or the default."""
    declared = metadata.get("answer_path")
    return check_sandbox_path(declared) if isinstance(declared, str) else DEFAULT_ANSWER_PATH


class SubmissionAgent(Agent):
    name = "submission"
    version = "1"

    def __init__(self, submission: TextSubmission | FilesSubmission | PatchSubmission) -> None:
        self.submission = submission

    async def run(self, ctx: AgentContext) -> AgentResult:
        sub = self.submission
        deadline = time.monotonic() + ctx.timeout_sec
        user = ctx.task.config.agent.user
        as_user = None if user is None else str(user)
        if isinstance(sub, TextSubmission):
            files = {answer_path(dict(ctx.task.metadata)): sub.text}
        elif isinstance(sub, FilesSubmission):
            files = dict(sub.files)
        else:
            files = {PATCH_PATH: sub.patch}
        for path, content in files.items():
            err = await _write(ctx.sandbox, path, content, as_user, deadline, ctx.task.workdir)
            if err is not None:
                return AgentResult(exit_code=1, error=AgentError(type=INVALID, message=err))
        if isinstance(sub, PatchSubmission):
            res = await ctx.sandbox.exec(
                f"git apply --whitespace=nowarn {PATCH_PATH} 2>&1 || "
                f"patch -p1 --forward --batch < {PATCH_PATH}",
                timeout=max(0.1, deadline - time.monotonic()),
                cwd=ctx.task.workdir,
                user=as_user,
            )
            if not res.ok:
                msg = f"the patch does not apply: {(res.stdout + res.stderr).strip()[-500:]}"
                return AgentResult(exit_code=res.exit_code, error=AgentError(type=INVALID, message=msg))
        return AgentResult(exit_code=0)


async def _write(
    sandbox: Sandbox, path: str, content: str, user: str | None, deadline: float, cwd: str
) -> str | None:
    res = await sandbox.exec(
        ["sh", "-c", _WRITE, "sh", path],
        input=content.encode(),
        timeout=max(0.1, deadline - time.monotonic()),
        cwd=cwd,
        user=user,
    )
    if res.ok:
        return None
    return f"cannot write {path[:200]}: {(res.stderr or res.stdout).strip()[-300:]}"
