"""One rollout of the terminal agent: the conversation, its limits and its record.

Each turn is one model call and the actions it asks for (turns.py,
actions.py). The context is trimmed to the window before each call, in
large steps (or summarised in one model call); an endpoint that refuses
function calling, or a model that writes commands as text, switches the
rollout to the plain-text protocol. The record is appended to
agent/trajectory.jsonl after every turn (trajectory.py).
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
    NONINTERACTIVE,
    SYSTEM_TEXT,
    SYSTEM_TOOLS,
    TMUX_TOOLS_LINE,
    TerminalConfig,
)
from crucible.agents.terminal.context import CannotFit, ContextBudget, note_summary
from crucible.agents.terminal.tmux import tmux_tools
from crucible.agents.terminal.tools import DOCS_TOOL, SUBMIT_TOOL, bash_tool, parse_text_reply
from crucible.agents.terminal.trajectory import TRAJECTORY_LOG, TrajectoryLog
from crucible.agents.terminal.turns import as_text_message, environment_facts, text_turn, tool_turn
from crucible.errors import ModelFailed
from crucible.export.atif.native import write_native_atif
from crucible.llm.client import ContextOverflow, ToolsUnsupported
from crucible.llm.pricing import ModelPrice, cost_usd
from crucible.llm.reply import ChatClient, ChatReply
from crucible.records.trajectory import Event, Trajectory, Turn
from crucible.records.trial import AgentError, AgentInfo, AgentResult, utcnow
from crucible.records.usage import Usage

SUMMARY_PROMPT = (
    "Summarise the work so far on the task below for your own later use: what was tried, "
    "what was learned (paths, commands, errors, results), and what remains. Be concise."
)


class _Stop(Exception):
    """The rollout ends with an agent error (graded)."""

    def __init__(self, error: AgentError) -> None:
        super().__init__(error.message)
        self.error = error


class Rollout:
    """One rollout: the conversation, the limits and the record."""

    def __init__(
        self,
        agent: AgentInfo,
        cfg: TerminalConfig,
        prices: dict[str, ModelPrice],
        ctx: AgentContext,
        client: ChatClient,
    ) -> None:
        self.cfg = cfg
        self.prices = prices
        self.ctx = ctx
        self.client = client
        self.mode: Literal["tools", "text"] = "text" if self.cfg.tool_mode == "text" else "tools"
        self.budget = ContextBudget(
            self.cfg.context_window, self.cfg.max_output_tokens, self.cfg.trim_to_fraction
        )
        self.deadline = time.monotonic() + ctx.timeout_sec
        self.usage = Usage()
        self.cost: float | None = 0.0
        self.format_errors = 0
        self.environment = ""
        self.actions = Actions(cfg, ctx, self._remaining)
        self.log = TrajectoryLog(ctx.logs_dir, cfg.trajectory_cap_bytes)
        self.traj = Trajectory(
            agent=agent.name,
            agent_version=agent.version,
            model=self.cfg.model,
            base_url=self.cfg.model_base_url,
            task=ctx.task.name,
            mode=self.mode,
            config=self.cfg.model_dump(mode="json", exclude={"system_prompt"}),
        )
        self.context: list[dict[str, Any]] = []

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
            workdir=self.ctx.task.workdir,
            budget=self.cfg.output_budget_chars,
            docs=docs,
            environment=self.environment,
            noninteractive=NONINTERACTIVE,
        )

    async def _start(self) -> None:
        if not self.cfg.system_prompt:
            self.environment = await environment_facts(self.ctx)
        self.context = [
            {"role": "system", "content": self._system_prompt()},
            {"role": "user", "content": self.ctx.task.instruction},
        ]
        self.traj.messages = [dict(m) for m in self.context]

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

    def _event(self, kind: str, detail: str, **kw: Any) -> None:
        self.traj.events.append(Event(kind=kind, detail=detail, **kw))

    def _switch_to_text(self, why: str) -> None:
        self.mode = "text"
        self.traj.mode = "text"
        self.context[0] = {"role": "system", "content": self._system_prompt()}
        self.traj.messages[0] = dict(self.context[0])
        self.context[:] = [as_text_message(m) for m in self.context]
        self._event("mode_switch", f"plain-text protocol: {why}")

    # -- the loop -------------------------------------------------------------
    async def loop(self) -> AgentResult:
        error: AgentError | None = None
        status = "submitted"
        n_turns = 0
        try:
            await self._start()
            while True:
                if n_turns >= self.cfg.max_turns:
                    raise _Stop(
                        AgentError(
                            type="turn_limit", message=f"no submission after {n_turns} turns"
                        )
                    )
                if self._remaining() <= 1.0:
                    raise _Stop(self._timeout())
                outcome = await self._turn(n_turns)
                if outcome == "retry":
                    continue  # the request was adjusted (mode switch, trimmed context); not a turn
                n_turns += 1
                self.traj.n_turns = n_turns
                self._save()
                if outcome == "done":
                    break
                self._check_limits()
        except _Stop as stop:
            status, error = stop.error.type, stop.error
        except ModelFailed as exc:
            self._save(
                status="model_failed", error=AgentError(type="model_failed", message=exc.message)
            )
            raise
        except asyncio.CancelledError:
            self._save(status="cancelled")
            raise
        except Exception as exc:  # a sandbox failure or a bug: keep the record, then let it through
            self._save(
                status="error", error=AgentError(type=type(exc).__name__, message=str(exc)[:500])
            )
            raise
        self._save(status=status, error=error)
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
                "trajectory": TRAJECTORY_LOG,
                "trajectory_bytes": self.log.bytes_written,
                "trajectory_truncated": self.log.truncated,
            },
        )

    def _timeout(self) -> AgentError:
        return AgentError(type="timeout", message=f"wall time of {self.ctx.timeout_sec:g}s ran out")

    def _check_limits(self) -> None:
        """The optional budgets: a rollout past one ends with its own reason (the agent's)."""
        cfg = self.cfg
        if self.format_errors >= cfg.max_format_errors:
            raise _Stop(
                AgentError(
                    type="format_errors",
                    message=f"{self.format_errors} replies in a row without a usable action",
                )
            )
        if cfg.max_cost_usd is not None and self.cost is not None and self.cost >= cfg.max_cost_usd:
            raise _Stop(
                AgentError(
                    type="cost_limit",
                    message=f"cost ${self.cost:.4f} reached the limit ${cfg.max_cost_usd:g}",
                )
            )
        used = self.usage.input_tokens + self.usage.output_tokens
        if cfg.max_total_tokens is not None and used >= cfg.max_total_tokens:
            raise _Stop(
                AgentError(
                    type="token_limit",
                    message=f"{used} tokens reached the limit {cfg.max_total_tokens}",
                )
            )

    def _save(self, status: str | None = None, error: AgentError | None = None) -> None:
        self.traj.usage = self.usage
        self.traj.cost_usd = self.cost
        if status is not None:
            self.traj.status, self.traj.error = status, error
            self.traj.finished_at = utcnow()
        try:
            self.log.sync(self.traj, finished=status is not None)
        except OSError:
            pass  # the record is best effort; the rollout goes on
        if status is not None:
            write_native_atif(self.traj, self.ctx.logs_dir)  # agent/trajectory.atif.json

    async def _call(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> ChatReply:
        try:
            return await asyncio.wait_for(
                self.client.chat(messages, tools), timeout=self._remaining()
            )
        except TimeoutError:
            raise _Stop(self._timeout()) from None

    def _account(self, reply: ChatReply) -> float | None:
        self.usage = self.usage + reply.usage
        call_cost = cost_usd(self.cfg.model, reply.usage, self.prices)
        self.cost = None if call_cost is None or self.cost is None else self.cost + call_cost
        return call_cost

    async def _fit(self) -> None:
        """Trim (or summarise) the context when it passes the limit; record what the model sees."""
        if self.budget.fits(self.context):
            return
        if self.cfg.context_strategy == "summarize" and (n := self.budget.droppable(self.context)):
            transcript = json.dumps(self.context[2 : 2 + n], ensure_ascii=False)
            ask = [
                {"role": "system", "content": SUMMARY_PROMPT},
                {
                    "role": "user",
                    "content": f"Task:\n{self.context[1]['content']}\n\nTranscript:\n{transcript}",
                },
            ]
            reply = await self._call(ask, None)
            self._account(reply)
            note_summary(self.context, n, reply.content or "")
            self._event(
                "context_summary",
                f"{n} message(s) replaced by a summary in one model call",
                messages=json.loads(json.dumps(self.context)),
                data={"summary": reply.content or "", "usage": reply.usage.model_dump()},
            )
            if self.budget.fits(self.context):
                return
        try:
            report = self.budget.trim(self.context)
        except CannotFit as exc:
            raise _Stop(AgentError(type="context_overflow", message=str(exc))) from None
        self._event(
            "context_trim",
            f"elided {report.elided} output(s), dropped {report.dropped_turns} turn(s)",
            messages=json.loads(json.dumps(self.context)),
        )

    async def _turn(self, index: int) -> str:
        """One model call and its actions: 'continue', 'done' or 'retry'."""
        await self._fit()
        turn = Turn(
            index=index,
            started_at=utcnow(),
            mode=self.mode,
            prompt_messages=len(self.context),
            estimated_prompt_tokens=self.budget.estimate(self.context),
        )
        try:
            reply = await self._call(self.context, self._tools())
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
        turn.cost_usd = self._account(reply)
        turn.usage, turn.latency_sec, turn.attempts = reply.usage, reply.latency_sec, reply.attempts
        turn.finish_reason, turn.reasoning_content = reply.finish_reason, reply.reasoning_content
        turn.metrics = dict(reply.tokens)
        message = reply.to_message()
        turn.assistant = message
        self.traj.turns.append(turn)

        if self.mode == "tools" and not reply.tool_calls and self.cfg.tool_mode == "auto":
            found, _ = parse_text_reply(reply.content or "")
            if found:  # the server took `tools` but the model wrote commands as text
                self._switch_to_text("the model answered with command blocks instead of tool calls")
                turn.mode = "text"
        self.context.append(message)
        recorded = dict(message)
        if reply.reasoning_content:  # kept in the record; not sent back
            recorded["reasoning_content"] = reply.reasoning_content
        self.traj.messages.append(json.loads(json.dumps(recorded)))
        try:
            run = tool_turn if self.mode == "tools" else text_turn
            outcome = await run(self.actions, reply, turn)
        finally:
            turn.finished_at = utcnow()
        for m in outcome.messages:
            self.context.append(m)
            self.traj.messages.append(json.loads(json.dumps(m)))
        turn.format_error = outcome.format_error
        self.format_errors = self.format_errors + 1 if outcome.format_error else 0
        return "done" if outcome.done else "continue"
