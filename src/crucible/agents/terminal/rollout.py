"""One rollout of the terminal agent: the conversation, its limits and its record.

Each turn is one model call and the actions it asks for (actions.py). The
context is trimmed to the window before each call; an endpoint that refuses
function calling, or a model that writes commands as text, switches the
rollout to the plain-text protocol.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Literal

from crucible.agents.base import AgentContext
from crucible.agents.terminal.actions import Actions
from crucible.agents.terminal.config import (
    DOCS_TEXT_LINE,
    DOCS_TOOLS_LINE,
    SYSTEM_TEXT,
    SYSTEM_TOOLS,
    TMUX_TOOLS_LINE,
    TerminalConfig,
)
from crucible.agents.terminal.context import CannotFit, ContextBudget
from crucible.agents.terminal.tmux import tmux_tools
from crucible.agents.terminal.tools import DOCS_TOOL, SUBMIT_TOOL, bash_tool, parse_text_reply
from crucible.agents.terminal.trajectory import save_trajectory
from crucible.errors import ModelFailed
from crucible.export.atif.native import write_native_atif
from crucible.llm.client import ChatReply, ContextOverflow, ModelClient, ToolCall, ToolsUnsupported
from crucible.llm.pricing import ModelPrice, cost_usd
from crucible.records.trajectory import Action, Event, Trajectory, Turn
from crucible.records.trial import AgentError, AgentInfo, AgentResult, utcnow
from crucible.records.usage import Usage


class Rollout:
    """One rollout: the conversation, the limits and the record."""

    def __init__(
        self,
        agent: AgentInfo,
        cfg: TerminalConfig,
        prices: dict[str, ModelPrice],
        ctx: AgentContext,
        client: ModelClient,
    ) -> None:
        self.cfg = cfg
        self.prices = prices
        self.ctx = ctx
        self.client = client
        self.mode: Literal["tools", "text"] = "text" if self.cfg.tool_mode == "text" else "tools"
        self.budget = ContextBudget(self.cfg.context_window, self.cfg.max_output_tokens)
        self.deadline = time.monotonic() + ctx.timeout_sec
        self.usage = Usage()
        self.cost: float | None = 0.0
        self.actions = Actions(cfg, ctx, self._remaining)
        self.traj = Trajectory(
            agent=agent.name,
            agent_version=agent.version,
            model=self.cfg.model,
            base_url=self.cfg.model_base_url,
            task=ctx.task.name,
            mode=self.mode,
            config=self.cfg.model_dump(mode="json", exclude={"system_prompt"}),
        )
        self.context: list[dict[str, Any]] = [
            {"role": "system", "content": self._system_prompt()},
            {"role": "user", "content": ctx.task.instruction},
        ]
        self.traj.messages = [dict(m) for m in self.context]

    # -- set-up -------------------------------------------------------------
    def _system_prompt(self) -> str:
        if self.cfg.system_prompt:
            return self.cfg.system_prompt
        template = SYSTEM_TOOLS if self.mode == "tools" else SYSTEM_TEXT
        docs = ""
        if self.cfg.docs_index is not None:
            docs = DOCS_TOOLS_LINE if self.mode == "tools" else DOCS_TEXT_LINE
        if "tmux" in self.cfg.tools and self.mode == "tools":
            docs += TMUX_TOOLS_LINE
        return template.format(
            workdir=self.ctx.task.workdir, budget=self.cfg.output_budget_chars, docs=docs
        )

    def _tools(self) -> list[dict[str, Any]] | None:
        if self.mode != "tools":
            return None
        tools = [
            bash_tool(self.cfg.command_timeout_sec, self.cfg.max_command_timeout_sec),
            SUBMIT_TOOL,
        ]
        tools = tmux_tools(self.cfg.tools, tools)
        if self.cfg.docs_index is not None:
            tools.append(DOCS_TOOL)
        return tools

    def _remaining(self) -> float:
        return self.deadline - time.monotonic()

    def _event(self, kind: str, detail: str) -> None:
        self.traj.events.append(Event(kind=kind, detail=detail))

    def _switch_to_text(self, why: str) -> None:
        self.mode = "text"
        self.traj.mode = "text"
        self.context[0] = {"role": "system", "content": self._system_prompt()}
        self.traj.messages[0] = dict(self.context[0])
        self.context[:] = [_as_text_message(m) for m in self.context]
        self._event("mode_switch", f"plain-text protocol: {why}")

    # -- the loop -------------------------------------------------------------
    async def loop(self) -> AgentResult:
        error: AgentError | None = None
        status = "submitted"
        n_turns = 0
        try:
            while True:
                if n_turns >= self.cfg.max_turns:
                    status = "turn_limit"
                    error = AgentError(
                        type="turn_limit", message=f"no submission after {n_turns} turns"
                    )
                    break
                if self._remaining() <= 1.0:
                    status = "timeout"
                    error = AgentError(
                        type="timeout", message=f"wall time of {self.ctx.timeout_sec:g}s ran out"
                    )
                    break
                outcome = await self._turn(n_turns)
                if outcome == "retry":
                    continue  # the request was adjusted (mode switch, trimmed context); not a turn
                n_turns += 1
                self.traj.n_turns = n_turns
                self._save()
                if outcome == "done":
                    break
        except _Stop as stop:
            status, error = stop.error.type, stop.error
        except ModelFailed as exc:
            self.traj.status = "model_failed"
            self.traj.error = AgentError(type="model_failed", message=exc.message)
            self._save(finished=True)
            raise
        except asyncio.CancelledError:
            self.traj.status = "cancelled"
            self._save(finished=True)
            raise
        except Exception as exc:  # a sandbox failure or a bug: keep the record, then let it through
            self.traj.status = "error"
            self.traj.error = AgentError(type=type(exc).__name__, message=str(exc)[:500])
            self._save(finished=True)
            raise
        self.traj.status = status
        self.traj.error = error
        self._save(finished=True)
        return AgentResult(
            exit_code=0 if error is None else 1,
            error=error,
            n_input_tokens=self.usage.input_tokens,
            n_cache_tokens=self.usage.cache_read_tokens,
            n_cache_write_tokens=self.usage.cache_write_tokens,
            n_output_tokens=self.usage.output_tokens,
            cost_usd=self.cost,
            n_turns=n_turns,
            metadata={
                "model": self.cfg.model,
                "mode": self.mode,
                "model_calls": self.client.n_calls,
                "model_retries": self.client.n_retries,
                "context_turns_dropped": self.budget.dropped_turns,
                "trajectory": "trajectory.json",
            },
        )

    def _save(self, finished: bool = False) -> None:
        self.traj.usage = self.usage
        self.traj.cost_usd = self.cost
        if finished:
            self.traj.finished_at = utcnow()
        try:
            save_trajectory(self.traj, self.ctx.logs_dir)
        except OSError:
            pass  # the record is best effort; the rollout goes on
        if finished:
            write_native_atif(self.traj, self.ctx.logs_dir)  # agent/trajectory.atif.json

    async def _call(self) -> ChatReply:
        remaining = self._remaining()
        try:
            return await asyncio.wait_for(
                self.client.chat(self.context, self._tools()), timeout=remaining
            )
        except TimeoutError:
            raise _Stop(
                AgentError(
                    type="timeout", message=f"wall time of {self.ctx.timeout_sec:g}s ran out"
                )
            ) from None

    async def _turn(self, index: int) -> str:
        """One model call and its actions: 'continue', 'done' or 'retry'."""
        try:
            report = self.budget.trim(self.context)
        except CannotFit as exc:
            raise _Stop(AgentError(type="context_overflow", message=str(exc))) from None
        if report:
            self._event(
                "context_trim",
                f"elided {report.elided} output(s), dropped {report.dropped_turns} turn(s)",
            )
        turn = Turn(
            index=index,
            started_at=utcnow(),
            mode=self.mode,
            prompt_messages=len(self.context),
            estimated_prompt_tokens=self.budget.estimate(self.context),
        )
        try:
            reply = await self._call()
        except ToolsUnsupported as exc:
            if self.cfg.tool_mode != "auto" or self.mode == "text":
                raise ModelFailed(f"the endpoint refused function calling: {exc}") from exc
            self._switch_to_text(f"the endpoint refused tools ({str(exc)[:200]})")
            return "retry"
        except ContextOverflow as exc:
            before = self.budget.limit
            self.budget.shrink_after_overflow(self.context)
            self._event(
                "context_overflow",
                f"server: {str(exc)[:300]}; limit {before} -> {self.budget.limit}",
            )
            if len(self.context) <= 2 or (self.budget.limit is not None and self.budget.limit < 64):
                raise _Stop(AgentError(type="context_overflow", message=str(exc)[:500])) from None
            return "retry"
        self.budget.calibrate(self.context, reply.usage.input_tokens)
        self.usage = self.usage + reply.usage
        call_cost = cost_usd(self.cfg.model, reply.usage, self.prices)
        self.cost = None if call_cost is None or self.cost is None else self.cost + call_cost
        turn.usage, turn.cost_usd = reply.usage, call_cost
        turn.latency_sec, turn.attempts, turn.finish_reason = (
            reply.latency_sec,
            reply.attempts,
            reply.finish_reason,
        )
        message = reply.to_message()
        turn.assistant = message
        self.traj.turns.append(turn)

        if self.mode == "tools" and not reply.tool_calls and self.cfg.tool_mode == "auto":
            actions, _ = parse_text_reply(reply.content or "")
            if actions:  # the server took `tools` but the model wrote commands as text
                self._switch_to_text("the model answered with command blocks instead of tool calls")
                turn.mode = "text"
        self._append(message)
        try:
            if self.mode == "tools":
                done = await self._tool_actions(reply.tool_calls, turn)
            else:
                done = await self._text_actions(reply.content or "", turn)
        finally:
            turn.finished_at = utcnow()
        return "done" if done else "continue"

    def _append(self, message: dict[str, Any]) -> None:
        self.context.append(message)
        self.traj.messages.append(json.loads(json.dumps(message)))

    # -- actions ---------------------------------------------------------------
    async def _tool_actions(self, calls: list[ToolCall], turn: Turn) -> bool:
        if not calls:
            return True  # a reply without a tool call is the final answer
        done = False
        for call in calls:
            action, submitted = await self.actions.tool_call(call, after_submit=done)
            done = done or submitted
            turn.actions.append(action)
            self._append({"role": "tool", "tool_call_id": call.id, "content": action.output})
        return done

    async def _text_actions(self, content: str, turn: Turn) -> bool:
        actions, submitted = parse_text_reply(content)
        if not actions and not submitted:
            note = (
                "No command found. Give exactly one command in a ```bash block, "
                "or reply SUBMIT on a line of its own when the task is complete."
            )
            self._append({"role": "user", "content": note})
            return False
        outputs: list[str] = []
        for i, act in enumerate(actions):
            done = await self.actions.text_action(act)
            turn.actions.append(done)
            prefix = f"Output of command {i + 1}:\n" if len(actions) > 1 else ""
            outputs.append(prefix + done.output)
        if submitted:
            turn.actions.append(Action(tool="submit", arguments={}, output="submitted"))
            return True
        self._append({"role": "user", "content": "\n\n".join(outputs)})
        return False


class _Stop(Exception):
    """The rollout ends with an agent error (graded)."""

    def __init__(self, error: AgentError) -> None:
        super().__init__(error.message)
        self.error = error


def _as_text_message(msg: dict[str, Any]) -> dict[str, Any]:
    """A function-calling message rewritten for an endpoint without tools."""
    if msg["role"] == "assistant" and msg.get("tool_calls"):
        parts = [str(msg.get("content") or "")]
        for call in msg["tool_calls"]:
            fn = call.get("function", {})
            try:
                cmd = json.loads(fn.get("arguments") or "{}").get("command", "")
            except (ValueError, AttributeError):
                cmd = ""
            parts.append(f"```bash\n{cmd}\n```" if cmd else f"[{fn.get('name')}]")
        return {"role": "assistant", "content": "\n".join(p for p in parts if p)}
    if msg["role"] == "tool":
        return {"role": "user", "content": str(msg.get("content") or "")}
    return msg
