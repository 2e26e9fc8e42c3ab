"""What the terminal agent's commands do in the sandbox: bash, docs, submit, bad calls."""

from __future__ import annotations

import secrets
import shlex
import time
from collections.abc import Callable
from typing import Any

from crucible.agents.base import AgentContext
from crucible.agents.terminal.config import NONINTERACTIVE_ENV, TerminalConfig
from crucible.agents.terminal.tmux import Tmux
from crucible.agents.terminal.tools import TextAction, docs_args_from_text, format_exec, run_docs
from crucible.llm.client import ToolCall
from crucible.records.trajectory import RAW_OUTPUT_CAP, Action
from crucible.records.trial import utcnow


class Actions:
    """Runs one rollout's actions; `remaining` says how much wall time the rollout has left."""

    def __init__(
        self, cfg: TerminalConfig, ctx: AgentContext, remaining: Callable[[], float]
    ) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.remaining = remaining
        self.bash_cmd: list[str] | None = None
        # The shell's state between calls: data files in the sandbox, never run as code.
        self.state = f"/tmp/.crucible-shell-{secrets.token_hex(6)}"
        self.tmux = Tmux(ctx, cfg.output_budget_chars)

    async def tool_call(self, call: ToolCall, after_submit: bool) -> tuple[Action, bool]:
        """The action a tool call makes, and whether it is the submission."""
        args = call.parsed_arguments()
        if after_submit:
            output = "not run: submit was called earlier in this reply"
            action = Action(
                tool=call.name,
                arguments=args or call.arguments,
                tool_call_id=call.id,
                output=output,
            )
        elif args is None:
            output = f"error: the arguments are not a JSON object: {call.arguments[:200]!r}"
            action = Action(
                tool="invalid", arguments=call.arguments, tool_call_id=call.id, output=output
            )
        elif call.name == "submit":
            return Action(
                tool="submit", arguments=args, tool_call_id=call.id, output="submitted"
            ), True
        elif call.name == "bash" and isinstance(args.get("command"), str):
            action = await self.bash(args["command"], args.get("timeout_sec"))
            action.tool_call_id, action.arguments = call.id, args
        elif call.name == "tmux" and "tmux" in self.cfg.tools:
            action = await self.tmux_action(args)
            action.tool_call_id = call.id
        elif call.name == "docs" and self.cfg.docs_index is not None:
            action = await self.docs(args)
            action.tool_call_id = call.id
        else:
            output = f"error: unknown tool {call.name!r} or missing arguments; tools: bash(command), submit()"
            action = Action(tool="invalid", arguments=args, tool_call_id=call.id, output=output)
        return action, False

    async def text_action(self, act: TextAction) -> Action:
        if act.kind == "docs":
            if self.cfg.docs_index is None:
                return Action(
                    tool="invalid",
                    arguments=act.body,
                    output="error: no documentation is available",
                )
            return await self.docs(docs_args_from_text(act.body))
        action = await self.bash(act.body, None)
        action.arguments = {"command": act.body}
        return action

    async def _bash_argv(self, command: str) -> list[str]:
        if self.bash_cmd is None:
            probe = await self.ctx.sandbox.exec(["sh", "-c", "command -v bash"], timeout=30)
            self.bash_cmd = ["bash", "-c"] if probe.ok and probe.stdout.strip() else ["sh", "-c"]
        env = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in NONINTERACTIVE_ENV.items())
        # stderr joins stdout so the model sees them interleaved, as in a terminal.
        if self.bash_cmd[0] != "bash":
            return [*self.bash_cmd, env + "exec 2>&1\n" + command]
        return [*self.bash_cmd, env + shell_state_prelude(self.state) + "exec 2>&1\n" + command]

    def _timeout(self, timeout_arg: Any) -> float:
        timeout = self.cfg.command_timeout_sec
        if (
            isinstance(timeout_arg, int | float)
            and not isinstance(timeout_arg, bool)
            and timeout_arg > 0
        ):
            timeout = min(float(timeout_arg), self.cfg.max_command_timeout_sec)
        return max(min(timeout, self.remaining() - 1.0), 1.0)

    async def bash(self, command: str, timeout_arg: Any) -> Action:
        timeout = self._timeout(timeout_arg)
        started = utcnow()
        user = self.ctx.task.config.agent.user
        res = await self.ctx.sandbox.exec(
            await self._bash_argv(command),
            timeout=timeout,
            cwd=self.ctx.task.workdir,
            input="",
            user=str(user) if user is not None else None,
        )
        raw = res.stdout + res.stderr
        output, cut = format_exec(
            res.exit_code, raw, res.timed_out, timeout, self.cfg.output_budget_chars
        )
        return Action(
            tool="bash",
            arguments={"command": command},
            output=output,
            raw_output=raw[:RAW_OUTPUT_CAP] if cut else None,
            exit_code=res.exit_code,
            timed_out=res.timed_out,
            truncated=cut or res.truncated,
            started_at=started,
            duration_sec=res.duration_sec,
        )

    async def tmux_action(self, args: dict[str, Any]) -> Action:
        started, t0 = utcnow(), time.monotonic()
        timeout = self._timeout(args.get("timeout_sec"))
        output, code, timed_out = await self.tmux.call(args, timeout)
        return Action(
            tool="tmux",
            arguments=args,
            output=output,
            exit_code=code,
            timed_out=timed_out,
            started_at=started,
            duration_sec=time.monotonic() - t0,
        )

    async def docs(self, args: dict[str, Any]) -> Action:
        assert self.cfg.docs_index is not None
        started = utcnow()
        t0 = time.monotonic()
        output = await run_docs(self.cfg.docs_index, args, self.cfg.output_budget_chars)
        return Action(
            tool="docs",
            arguments=args,
            output=output,
            started_at=started,
            duration_sec=time.monotonic() - t0,
        )


def shell_state_prelude(state: str) -> str:
    """Bash that restores the last call's directory and exported variables, and saves them on exit.

    The state is data (a NUL-separated NAME=value list and a path), read with
    `read` and `export`/`cd`, never sourced: whatever a command writes there
    cannot run as code in the next call, and none of it reaches the host.
    The command's exit code is kept: the EXIT trap exits with it.
    """
    q = shlex.quote(state)
    return (
        f"if [ -r {q}.cwd ]; then IFS= read -r -d '' __c < {q}.cwd; cd -- \"$__c\" 2>/dev/null; fi\n"
        f"if [ -r {q}.env ]; then while IFS= read -r -d '' __kv; do "
        'case $__kv in [A-Za-z_]*=*) export -- "$__kv" 2>/dev/null;; esac; '
        f"done < {q}.env; fi\n"
        "unset __c __kv\n"
        "trap '__rc=$?; for __n in $(compgen -e); do case $__n in PWD|OLDPWD|SHLVL|_) ;; "
        f'*) printf "%s=%s\\0" "$__n" "${{!__n}}";; esac; done > {q}.env.tmp 2>/dev/null '
        f'&& mv -f {q}.env.tmp {q}.env 2>/dev/null; printf "%s\\0" "$PWD" > {q}.cwd 2>/dev/null; '
        "exit $__rc' EXIT\n"
    )
