"""The ray executor, head side: node agents made and followed, trials placed, records
and folders brought back into the head's job folder.

The job's scheduler (engine/job.py) decides what runs and what is retried; this only
places. Ray's own retries are off (an agent is made with max_restarts=0 and
max_task_retries=0): a node that dies mid-trial, or an agent that crashes, fails the
call, and the trial gets a sandbox_failed record here, which the job's retry policy
runs again on another node (never a 0). Nodes are followed while the job runs: a new
node gets an agent, a dead one's agent is dropped.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from crucible.engine.executor import ExecutorSettings, TrialCall
from crucible.engine.spec import TrialPlan
from crucible.engine.teardown import Teardown
from crucible.engine.trial import prepare_trial_dir
from crucible.errors import ErrorKind, ProviderUnavailable, ResourcesUnavailable
from crucible.executors.ray.agent import NodeAgent, TrialBack
from crucible.executors.ray.placement import SLOTS, Needs, NodeView, choose, node_view
from crucible.executors.ray.ship import check_store, pack_dir, replace_dir
from crucible.records.text import storable_text
from crucible.records.trial import ErrorInfo, TrialResult, utcnow
from crucible.sandboxes.base import Provider, SandboxSpec
from crucible.sandboxes.ratelimit import StartGate
from crucible.store.layout import storable_dump, write_json_atomic
from crucible.store.logs import TRIAL_LOG, FileLog

# Sandboxes per CPU of a node that advertises no `crucible_slots`.
SLOTS_PER_CPU = 4
# How often the head looks for nodes that joined or left (seconds).
REFRESH_SEC = 1.0


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise ProviderUnavailable(
            "the ray executor needs Ray", hint="pip install 'crucible[ray]'"
        ) from exc
    return ray


class RayExecutor:
    name = "ray"

    def __init__(self, settings: ExecutorSettings) -> None:
        self.settings = settings
        self.store = check_store(settings.shared_store)
        self.nodes: dict[str, NodeView] = {}
        self.agents: dict[str, Any] = {}  # node id -> actor handle
        self.bundles: dict[str, Any] = {}  # task digest -> ObjectRef of its folder's tar
        self._room = asyncio.Condition()
        self._follow: asyncio.Task[None] | None = None
        self._inited = False
        self.on_placed: Any = None  # (plan, NodeView) -> None: for tests and progress

    # -- the cluster ------------------------------------------------------------------
    async def start(self, provider: Provider) -> None:
        ray = _ray()
        if not ray.is_initialized():
            kw: dict[str, Any] = {"address": self.settings.address} if self.settings.address else {}
            # In this thread: Ray sets its signal handlers only from the main thread.
            ray.init(**kw, include_dashboard=False, log_to_driver=False, configure_logging=False)
            self._inited = True
        await self._refresh()
        if not self.agents:
            raise ProviderUnavailable("the Ray cluster has no node to run trials on")
        await asyncio.gather(*(a.preflight.remote() for a in self.agents.values()))
        self._follow = asyncio.create_task(self._follow_nodes())

    async def _refresh(self) -> None:
        ray = _ray()
        alive = {n["NodeID"]: n for n in await asyncio.to_thread(ray.nodes) if n.get("Alive")}
        for node_id in list(self.nodes):
            if node_id not in alive:
                self._drop(node_id)
        # Once a node advertises crucible_slots, only such nodes run trials (a head kept free).
        declared = any(SLOTS in n.get("Resources", {}) for n in alive.values())
        for node_id, node in alive.items():
            if node_id not in self.agents and (not declared or SLOTS in node["Resources"]):
                self._add(node)
        async with self._room:
            self._room.notify_all()

    def _add(self, node: dict[str, Any]) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = _ray()
        view = node_view(node, SLOTS_PER_CPU)
        if self.settings.env == "docker" and not view.docker:
            return  # a docker job's trials only where docker is
        old = self.nodes.get(view.node_id)
        if old is not None:
            view.images |= old.images
        actor = ray.remote(NodeAgent).options(
            num_cpus=0,
            max_restarts=0,
            max_task_retries=0,
            max_concurrency=view.slots + 16,
            scheduling_strategy=NodeAffinitySchedulingStrategy(view.node_id, soft=False),
        )
        self.agents[view.node_id] = actor.remote(self.settings, view.name, view.slots)
        self.nodes[view.node_id] = view

    def _drop(self, node_id: str) -> None:
        self.agents.pop(node_id, None)
        self.nodes.pop(node_id, None)

    async def _follow_nodes(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_SEC)
            try:
                await self._refresh()
            except Exception:  # the GCS may be slow to answer; try again next round
                continue

    # -- the job's calls -----------------------------------------------------------------
    async def prepare(self, provider: Provider, specs: list[SandboxSpec]) -> None:
        """Each node builds what it lacks (a node that joins later builds at create())."""
        await self._each(lambda a: a.prepare.remote(specs))

    async def cleanup(self, provider: Provider, job_id: str) -> int:
        counts = await self._each(lambda a: a.cleanup.remote(job_id))
        return sum(c for c in counts if isinstance(c, int))

    async def _each(self, call: Any) -> list[Any]:
        refs = [call(a) for a in self.agents.values()]
        return list(await asyncio.gather(*refs, return_exceptions=True))

    async def run(
        self,
        call: TrialCall,
        *,
        provider: Provider,
        start_gate: StartGate | None,
        teardown: Teardown | None,
    ) -> TrialResult:
        ray = _ray()
        plan = call.plan
        env = plan.task.config.environment
        need = Needs(env.cpus, env.memory_mb, env.gpus, self.settings.env == "docker",
                     plan.task.environment_digest)  # fmt: skip
        node = await self._place(need)
        if node is None:
            return _infra_record(call, ResourcesUnavailable(
                f"no node of the cluster can run task {plan.task.name!r} "
                f"({env.cpus:g} CPU, {env.memory_mb} MB, {env.gpus} GPU)"), None)  # fmt: skip
        node.running += 1
        node.gpus_used += need.gpus
        agent = self.agents[node.node_id]
        try:
            ref = agent.run.remote(call, [self._bundle(plan)])
            if self.on_placed is not None:  # the call is on its way to the node
                self.on_placed(plan, node)
            try:
                back: TrialBack = await ref
            except asyncio.CancelledError:
                ray.cancel(ref)
                raise
            except ray.exceptions.RayError as exc:
                if isinstance(exc, ray.exceptions.RayActorError | ray.exceptions.NodeDiedError):
                    self._drop(node.node_id)  # the next refresh makes a new one if it lives
                return _infra_record(call, exc, node.name)
        finally:
            node.running -= 1
            node.gpus_used -= need.gpus
            async with self._room:
                self._room.notify_all()
        if need.image:
            node.images.add(need.image)
        data = back.folder
        if data is None and back.stored is not None:
            data = await asyncio.to_thread(_take_stored, back.stored)
        if data is not None:
            replace_dir(data, call.job_dir / plan.trial_name)
        return back.record

    async def _place(self, need: Needs) -> NodeView | None:
        async with self._room:
            while True:
                nodes = list(self.nodes.values())
                got = choose(nodes, need)
                if got is not None:
                    return got
                if nodes and not any(n.could_fit(need) for n in nodes):
                    return None
                await self._room.wait()

    def _bundle(self, plan: TrialPlan) -> Any:
        ref = self.bundles.get(plan.task.digest)
        if ref is None:
            ref = self.bundles[plan.task.digest] = _ray().put(pack_dir(plan.task.path))
        return ref

    async def aclose(self) -> None:
        if self._follow is not None:
            self._follow.cancel()
        await self._each(lambda a: a.close.remote())
        ray = _ray()
        for a in self.agents.values():
            ray.kill(a)
        self.agents.clear()
        if self._inited:
            ray.shutdown()


def _take_stored(path: str) -> bytes:
    data = open(path, "rb").read()
    os.unlink(path)
    return data


def _infra_record(call: TrialCall, exc: BaseException, node: str | None) -> TrialResult:
    """The record of a trial its node could not give back (lost node, crashed agent):
    crucible's failure (sandbox_failed), retried by the job; or a task no node fits."""
    plan = call.plan
    kind = getattr(exc, "kind", ErrorKind.sandbox_failed)
    where = f" on node {node}" if node else ""
    why = storable_text(f"the trial was lost{where}: {type(exc).__name__}: {exc}")[:2000]
    if kind == ErrorKind.resources_unavailable:
        why = str(getattr(exc, "message", exc))
    trial_dir = call.job_dir / plan.trial_name
    prepare_trial_dir(trial_dir)
    log = FileLog(trial_dir / TRIAL_LOG)
    log.error(f"{kind.value}: {why}")
    log.close()
    now = utcnow()
    result = TrialResult(
        id=os.urandom(16).hex(), task_name=plan.task.name, trial_name=plan.trial_name,
        job_id=plan.job_id, attempt=plan.attempt, task_checksum=plan.task.digest,
        source=plan.task.config.source, task_metadata=dict(plan.task.metadata),
        agent_info=call.agent.info(), outcome=kind.value, retries=call.retries,
        error=ErrorInfo(kind=kind, type=type(exc).__name__, message=why),
        started_at=now, finished_at=now, node=node,
    )  # fmt: skip
    record, text, _ = storable_dump(result)
    write_json_atomic(trial_dir / "result.json", text)
    return record
