"""The `oracle` agent: uploads the task's solution/ to /solution and runs solve.sh."""

from __future__ import annotations

from crucible.agents.base import Agent, AgentContext
from crucible.engine.results import AgentError, AgentResult
from crucible.errors import TaskInvalid

SOLUTION_DIR = "/solution"


class OracleAgent(Agent):
    name = "oracle"
    version = "1"

    async def run(self, ctx: AgentContext) -> AgentResult:
        solution = ctx.task.solution_dir
        if not (solution / "solve.sh").is_file():
            raise TaskInvalid(
                f"{ctx.task.name}: solution/solve.sh is missing; the oracle cannot run"
            )
        await ctx.sandbox.upload_dir(solution, SOLUTION_DIR)
        res = await ctx.sandbox.exec(
            f"bash {SOLUTION_DIR}/solve.sh",
            timeout=ctx.timeout_sec,
            cwd=ctx.task.workdir,
            env=dict(ctx.task.config.solution.env),
        )
        (ctx.logs_dir / "oracle.txt").write_text(
            f"$ bash {SOLUTION_DIR}/solve.sh\n--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}\n"
            f"--- exit {res.exit_code}{' (timed out)' if res.timed_out else ''}"
            f"{' (output truncated)' if res.truncated else ''} ---\n"
        )
        error = None
        if res.timed_out:
            error = AgentError(
                type="timeout", message=f"solve.sh timed out after {ctx.timeout_sec:g}s"
            )
        elif res.exit_code != 0:
            error = AgentError(type="nonzero_exit", message=f"solve.sh exited {res.exit_code}")
        return AgentResult(exit_code=res.exit_code, error=error)
