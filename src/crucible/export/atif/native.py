"""The terminal agent's record (crucible.records.trajectory.Trajectory) as ATIF v1.8.

The conversation (`messages`) gives the steps in order; each assistant
message is matched with its turn for the actions it ran (tool calls and
their results, exit codes), usage and cost, and any per-turn fields a newer
record carries (token ids, logprobs, reasoning). Fields the record does not
have are left out, never invented. write_native_atif is the one call the
agent makes when a rollout ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from atif import Agent

from crucible.export.atif.common import Atif, Steps, as_dict, cap, metrics, write_atif
from crucible.records.trajectory import Action, Trajectory, Turn

_RL_FIELDS = ("prompt_token_ids", "completion_token_ids", "logprobs")


def _turn_field(turn: Turn, name: str) -> Any:
    value = getattr(turn, name, None)
    if value is None:
        value = (turn.model_extra or {}).get(name) if turn.model_extra else None
    return value


def _logprob_list(value: Any) -> list[float] | None:
    """OpenAI's choice `logprobs` ({"content": [{"token", "logprob", ...}]}) as the floats
    ATIF keeps; a plain list of numbers as it is; anything else None."""
    if isinstance(value, dict):
        value = [e.get("logprob") for e in value.get("content") or [] if isinstance(e, dict)]
    if isinstance(value, list) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        return [float(v) for v in value]
    return None


def _metrics(turn: Turn) -> Any:
    rl: dict[str, Any] = {}
    for name in _RL_FIELDS:
        value = _turn_field(turn, name)
        if isinstance(value, list):
            rl[name] = value
    # The terminal agent's token collection (Turn.metrics, as the server sent them).
    got = turn.metrics if isinstance(getattr(turn, "metrics", None), dict) else {}
    ids = {
        "prompt_token_ids": got.get("prompt_token_ids"),
        "completion_token_ids": got.get("token_ids"),
    }
    for name, value in ids.items():
        if name not in rl and isinstance(value, list) and all(type(v) is int for v in value):
            rl[name] = value
    if "logprobs" not in rl and (lp := _logprob_list(got.get("logprobs"))) is not None:
        rl["logprobs"] = lp
    return metrics(
        prompt=turn.usage.input_tokens,
        completion=turn.usage.output_tokens,
        cached=turn.usage.cache_read_tokens,
        cost=turn.cost_usd,
        **rl,
    )


def _call_id(turn: Turn, i: int, action: Action) -> str:
    return action.tool_call_id or f"turn{turn.index}_action{i}"


def _agent_step(steps: Steps, msg: dict[str, Any], turn: Turn | None, model: str) -> None:
    reasoning = msg.get("reasoning_content")
    if reasoning is None and turn is not None:
        reasoning = _turn_field(turn, "reasoning_content")
    step = steps.add(
        "agent",
        msg.get("content"),
        timestamp=turn.started_at.isoformat() if turn else None,
        model_name=model,
        reasoning_content=cap(reasoning) if isinstance(reasoning, str) and reasoning else None,
        metrics=_metrics(turn) if turn else None,
        llm_call_count=1,
        extra={"finish_reason": turn.finish_reason, "mode": turn.mode} if turn else None,
    )
    if step is None:
        return
    if turn is None:  # no turn record: the message's own tool calls, without results
        for call in msg.get("tool_calls") or []:
            fn = as_dict(as_dict(call).get("function"))
            steps.call(
                step, str(as_dict(call).get("id") or ""), str(fn.get("name")), fn.get("arguments")
            )
        return
    for i, action in enumerate(turn.actions):
        call_id = _call_id(turn, i, action)
        steps.call(step, call_id, action.tool, action.arguments)
        if action.tool == "submit" and not action.output:
            continue
        steps.result(
            step,
            call_id,
            action.output,
            exit_code=action.exit_code,
            timed_out=action.timed_out or None,
            truncated=action.truncated or None,
            duration_sec=action.duration_sec,
        )


def native_to_atif(traj: Trajectory) -> Atif:
    steps = Steps()
    turns = iter(traj.turns)
    last_turn: Turn | None = None
    for raw in traj.messages:
        msg = as_dict(raw)
        role = msg.get("role")
        if role == "assistant":
            last_turn = next(turns, None)
            _agent_step(steps, msg, last_turn, traj.model)
        elif role == "tool":
            continue  # the turn's actions carry these outputs, with exit codes
        elif role == "system":
            steps.add("system", msg.get("content"))
        elif role == "user":
            prev = steps.last_agent()
            ran = last_turn is not None and any(a.tool != "submit" for a in last_turn.actions)
            if prev is not None and last_turn is not None and last_turn.mode == "text" and ran:
                continue  # the plain-text protocol's combined outputs: already the observation
            steps.add("user", msg.get("content"))
    extra: dict[str, Any] = {
        "crucible_schema_version": traj.schema_version,
        "task": traj.task,
        "status": traj.status,
        "mode": traj.mode,
        "n_turns": traj.n_turns,
        "events": [e.model_dump(mode="json") for e in traj.events],
    }
    if traj.error is not None:
        extra["error"] = traj.error.model_dump(mode="json")
    agent = Agent(name=traj.agent, version=traj.agent_version, model_name=traj.model)
    return steps.build(agent, extra=extra)


def write_native_atif(traj: Trajectory, logs_dir: Path) -> Path | None:
    """Write the rollout's ATIF beside its record; best effort (None when it could not)."""
    try:
        return write_atif(native_to_atif(traj), logs_dir)
    except (OSError, ValueError):
        return None
