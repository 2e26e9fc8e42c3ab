"""Which node runs a trial: the task's declared needs against what each node advertises.

Nodes advertise custom resources when they join (`ray start --resources`):
`crucible_slots` (sandboxes at once), `crucible_docker` (a Docker engine is there),
`crucible_image:<digest>` (an image it holds), besides Ray's own CPU, memory and GPU.
A trial goes to a node with a free slot, enough GPUs free, CPUs and memory for one
sandbox of the task, and docker when the job's provider is docker; among those, soft
affinity: a node known to hold the task's image first, then the least loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SLOTS = "crucible_slots"
DOCKER = "crucible_docker"
IMAGE_PREFIX = "crucible_image:"


@dataclass(frozen=True)
class Needs:
    cpus: float = 1.0
    memory_mb: int = 0
    gpus: int = 0
    docker: bool = False
    image: str | None = None  # the environment's digest: what a node may hold already


@dataclass
class NodeView:
    node_id: str
    name: str
    slots: int
    cpus: float
    memory_mb: int
    gpus: int
    docker: bool
    images: set[str] = field(default_factory=set)
    running: int = 0
    gpus_used: int = 0

    def could_fit(self, need: Needs) -> bool:
        """Whether the node could ever run it (when idle)."""
        return (
            self.slots > 0
            and need.gpus <= self.gpus
            and (self.docker or not need.docker)
            and need.cpus <= self.cpus
            and need.memory_mb <= self.memory_mb
        )

    def fits(self, need: Needs) -> bool:
        return (
            self.could_fit(need)
            and self.running < self.slots
            and self.gpus_used + need.gpus <= self.gpus
        )


def node_view(node: dict[str, Any], default_slots: int) -> NodeView:
    """A node of `ray.nodes()`, as placement sees it."""
    res: dict[str, float] = node.get("Resources", {})
    cpus = float(res.get("CPU", 0.0))
    slots = int(res.get(SLOTS, 0)) or max(1, int(cpus)) * default_slots
    images = {k[len(IMAGE_PREFIX) :] for k in res if k.startswith(IMAGE_PREFIX)}
    return NodeView(
        node_id=node["NodeID"],
        name=f"{node.get('NodeManagerAddress', '?')}:{node['NodeID'][:8]}",
        slots=slots,
        cpus=cpus,
        memory_mb=int(res.get("memory", 0) / 2**20),
        gpus=int(res.get("GPU", 0)),
        docker=res.get(DOCKER, 0) > 0,
        images=images,
    )


def choose(nodes: list[NodeView], need: Needs) -> NodeView | None:
    """The node to run it now, or None when none has room now."""
    fit = [n for n in nodes if n.fits(need)]
    if not fit:
        return None
    return min(fit, key=lambda n: (need.image not in n.images, n.running / n.slots, n.node_id))
