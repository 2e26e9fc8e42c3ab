"""The node agent: one Ray actor per node and job, owning that node's provider
(bubblewrap or docker), its image and rootfs cache, its build gate and teardown.

It runs the trials the head places on it with engine/trial.py's run_trial, exactly as
the local executor does, into a scratch job folder on the node; then packs the trial's
folder (record, logs, collected files, under the same collection caps) and sends it
back whole. It decides nothing: no retries (Ray's are off, the head's scheduler
retries), no placement. Created by the head's driver, it is owned by it: only that
head holds its handle, and it dies with it.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crucible.engine.executor import ExecutorSettings, TrialCall
from crucible.engine.spec import TrialPlan
from crucible.engine.teardown import Teardown
from crucible.executors.ray.ship import INLINE_LIMIT, check_store, pack_dir, to_store, unpack_into
from crucible.records.trial import TrialResult
from crucible.sandboxes.base import SandboxSpec
from crucible.sandboxes.buildgate import BuildGate
from crucible.sandboxes.ratelimit import StartGate
from crucible.sandboxes.registry import get_provider
from crucible.store.layout import storable_dump, write_json_atomic


@dataclass
class TrialBack:
    """A trial as it comes back to the head."""

    record: TrialResult
    folder: bytes | None  # the trial folder as a tar, or None when it went to the store
    stored: str | None = None  # its tar's path in the shared store


class NodeAgent:
    def __init__(self, settings: ExecutorSettings, node_name: str, slots: int) -> None:
        self.settings = settings
        self.node_name = node_name
        self.provider = get_provider(settings.env, settings.env_params)
        self.provider.build_gate = BuildGate(settings.max_builds)
        scratch = Path(os.environ.get("CRUCIBLE_NODE_SCRATCH") or _default_scratch())
        self.job_dir = scratch / settings.job_id
        self.job_dir.mkdir(parents=True, exist_ok=True)
        self.tasks_dir = scratch / "tasks"
        self.provider.log_dir = self.job_dir
        self.teardown = Teardown(slots)
        self.start_gate = None
        if settings.create_rate or settings.max_starting:  # per node under ray
            self.start_gate = StartGate(settings.create_rate or 1e6, settings.max_starting or slots)
        self.store = check_store(settings.shared_store)

    async def preflight(self) -> dict[str, Any]:
        await self.provider.preflight()
        return {"node": self.node_name, "host": socket.gethostname(), "pid": os.getpid()}

    async def prepare(self, specs: list[SandboxSpec]) -> None:
        await self.provider.prepare(specs)

    async def cleanup(self, job_id: str) -> int:
        return await self.provider.cleanup(job_id)

    async def run(self, call: TrialCall, bundle: list[Any]) -> TrialBack:
        """Run one trial here. `bundle`: [ObjectRef of the task folder's tar], fetched
        only when this node does not see the task folder at the head's path."""
        plan = await self._local_plan(call.plan, bundle)
        result = await call.run(
            provider=self.provider,
            start_gate=self.start_gate,
            teardown=self.teardown,
            plan=plan,
            job_dir=self.job_dir,
        )
        trial_dir = self.job_dir / plan.trial_name
        record, text, _ = storable_dump(result.model_copy(update={"node": self.node_name}))
        write_json_atomic(trial_dir / "result.json", text)
        data = pack_dir(trial_dir)
        shutil.rmtree(trial_dir, ignore_errors=True)
        if self.store is not None and len(data) > INLINE_LIMIT:
            return TrialBack(record, None, to_store(self.store, plan.job_id, plan.trial_name, data))
        return TrialBack(record, data)

    async def _local_plan(self, plan: TrialPlan, bundle: list[Any]) -> TrialPlan:
        task = plan.task
        if task.path.is_dir():  # the head's folder, seen here (one machine, shared storage)
            return plan
        here = self.tasks_dir / task.digest
        if not here.is_dir():
            part = here.with_name(here.name + f".{os.getpid()}.part")
            unpack_into(await bundle[0], part)
            os.replace(part, here)
        task = task.model_copy(update={"path": here})
        return dataclasses.replace(plan, task=task)  # a grade's plan keeps its own name

    async def close(self) -> None:
        self.provider.build_gate.close()
        await self.provider.build_gate.drained()
        await self.teardown.drain()
        await self.provider.aclose()


def _default_scratch() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "crucible", "node")
