"""Sweeps: one run request as a matrix of agent x model arms, run as sibling jobs.

Each arm is an ordinary job (its own folder, index rows and resume), named
`<sweep-id>.<arm>`, so `runs`, `report` and `--resume` treat it as any job. The
arms share one concurrency budget: a trial of any arm holds one of the sweep's
slots while it runs, so `-c 8` means 8 sandboxes at most across the whole matrix.
The sweep's own record (<jobs-dir>/.sweeps/<id>.json) names the arms and the
baseline that `crucible report SWEEP` compares them with.

A sweep file (TOML) crosses `agents` with `models`, and may add explicit arms:

    baseline = "terminal/model-a"          # optional; default: the first arm
    agents = ["terminal", {label = "text", agent = "terminal", agent_kwargs = {tool_mode = "text"}}]
    models = ["model-a", {name = "model-b", model_base_url = "http://127.0.0.1:8001/v1"}]
    [[arm]]                                # an arm outside the cross product
    agent = "oracle"
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crucible.engine.job import JobRunner
from crucible.engine.launch import LaunchPlan
from crucible.engine.request import MODEL_OPTIONS, RunRequest
from crucible.errors import UnknownKey
from crucible.records.sweep import SweepArm, SweepRecord
from crucible.store.layout import dump, write_json_atomic

SWEEP_DIR = ".sweeps"
FILE_KEYS = ("baseline", "agents", "models", "arm")
AGENT_KEYS = ("label", "agent", "agent_kwargs")
MODEL_KEYS = ("label", "name", *(k for k in MODEL_OPTIONS if k != "model"))
ARM_KEYS = ("label", "agent", "agent_kwargs", *MODEL_OPTIONS)
_SLUG_BAD = re.compile(r"[^A-Za-z0-9._-]+")


class SweepError(ValueError):
    """A sweep that cannot be planned: a bad sweep file, clashing labels, an unknown baseline."""


def slug(label: str) -> str:
    out = _SLUG_BAD.sub("-", label).strip("-.")
    return out or "arm"


def _check_keys(what: str, table: dict[str, Any], known: Sequence[str]) -> None:
    for key in table:
        if key not in known:
            raise UnknownKey(what, key, known)


def _agent_entry(entry: Any) -> tuple[str, str, dict[str, Any]]:
    if isinstance(entry, str):
        return entry, entry, {}
    if not isinstance(entry, dict) or "agent" not in entry:
        raise SweepError(f"a sweep agent is a name or a table with `agent`: {entry!r}")
    _check_keys("sweep agent key", entry, AGENT_KEYS)
    agent = str(entry["agent"])
    return str(entry.get("label") or agent), agent, dict(entry.get("agent_kwargs") or {})


def _model_entry(entry: Any) -> tuple[str, str, dict[str, Any]]:
    if isinstance(entry, str):
        return entry, entry, {}
    if not isinstance(entry, dict) or "name" not in entry:
        raise SweepError(f"a sweep model is a name or a table with `name`: {entry!r}")
    _check_keys("sweep model key", entry, MODEL_KEYS)
    name = str(entry["name"])
    extra = {k: v for k, v in entry.items() if k not in ("label", "name")}
    return str(entry.get("label") or name), name, extra


def plan_arms(
    agents: Sequence[str], models: Sequence[str], sweep_file: dict[str, Any] | None = None
) -> tuple[list[SweepArm], str | None]:
    """The arms of a sweep and its baseline label (None: the first arm): the command
    line's --agent values crossed with its --model values, then the sweep file's."""
    file = sweep_file or {}
    _check_keys("sweep file key", file, FILE_KEYS)
    arms: list[SweepArm] = []
    agent_entries = [_agent_entry(a) for a in agents] + [
        _agent_entry(a) for a in file.get("agents", [])
    ]
    model_entries = [_model_entry(m) for m in models] + [
        _model_entry(m) for m in file.get("models", [])
    ]
    for a_label, agent, a_kwargs in agent_entries:
        if not model_entries:
            arms.append(SweepArm(label=a_label, agent=agent, agent_kwargs=a_kwargs))
        for m_label, model, m_kwargs in model_entries:
            arms.append(
                SweepArm(
                    label=f"{a_label}/{m_label}",
                    agent=agent,
                    model=model,
                    agent_kwargs={**a_kwargs, **m_kwargs},
                )
            )
    for entry in file.get("arm", []):
        if not isinstance(entry, dict) or "agent" not in entry:
            raise SweepError(f"a sweep [[arm]] needs an `agent`: {entry!r}")
        _check_keys("sweep arm key", entry, ARM_KEYS)
        kwargs = dict(entry.get("agent_kwargs") or {})
        kwargs.update({k: v for k, v in entry.items() if k in MODEL_OPTIONS and k != "model"})
        arm_model = None if entry.get("model") is None else str(entry["model"])
        label = entry.get("label") or (
            f"{entry['agent']}/{arm_model}" if arm_model else entry["agent"]
        )
        arms.append(
            SweepArm(
                label=str(label), agent=str(entry["agent"]), model=arm_model, agent_kwargs=kwargs
            )
        )
    seen: dict[str, str] = {}
    for arm in arms:
        key = slug(arm.label)
        if key in seen:
            raise SweepError(f"two sweep arms share the label {seen[key]!r}; give one a `label`")
        seen[key] = arm.label
    baseline = file.get("baseline")
    if baseline is not None and baseline not in {a.label for a in arms}:
        known = ", ".join(a.label for a in arms)
        raise SweepError(f"sweep baseline {baseline!r} is not an arm; arms: {known}")
    return arms, baseline


def arm_request(base: RunRequest, arm: SweepArm, job_id: str) -> RunRequest:
    """The request of one arm: the sweep's, with the arm's agent, model and options."""
    kwargs = {**base.agent_kwargs, **arm.agent_kwargs}
    if arm.model is not None:
        kwargs["model"] = arm.model
    return base.model_copy(
        update={"agent": arm.agent, "agent_kwargs": kwargs, "job_name": job_id, "resume": None}
    )


def sweep_file_path(jobs_dir: Path, sweep_id: str) -> Path:
    return jobs_dir / SWEEP_DIR / f"{sweep_id}.json"


def record_sweep(jobs_dir: Path, record: SweepRecord) -> Path:
    path = sweep_file_path(jobs_dir, record.sweep_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, dump(record))
    return path


def read_sweep(jobs_dir: Path, sweep_id: str) -> SweepRecord | None:
    """The sweep of that id, or None when there is none (or `sweep_id` is not a plain name)."""
    if not sweep_id or "/" in sweep_id or sweep_id.startswith("."):
        return None
    path = sweep_file_path(jobs_dir, sweep_id)
    if not path.is_file() or path.is_symlink():
        return None
    try:
        return SweepRecord.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def sibling_runners(plans: Sequence[LaunchPlan], concurrency: int) -> list[JobRunner]:
    """The arms' job runners, sharing one budget of `concurrency` trials running at once
    (run them together: `asyncio.gather(*(r.run() for r in runners))`)."""
    slots = asyncio.Semaphore(max(1, concurrency))
    runners = []
    for plan in plans:
        plan.options.shared_slots = slots
        runners.append(plan.runner())
    return runners
