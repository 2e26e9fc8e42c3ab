"""One fake Ray cluster on loopback for the module (ray.cluster_utils.Cluster): a head
node, a node that advertises docker, and a node with a (fake) GPU; each advertises 4
sandbox slots. Ray's temp dir and the node agents' scratch are in the tests' tmp
folder, so nothing lands in HOME. Shared by the tests of this folder. The test process is the cluster's driver (the head of
every job run here). Token auth is on."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# Ray's token auth on (docs/ray.md): every node, the head and the heads the tests start
# as subprocesses hold the token through the environment, never ~/.ray. Ray reads the
# mode once, when first asked: so before it is imported.
AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
_BEFORE = {k: os.environ.get(k) for k in AUTH}
os.environ.update(AUTH)
ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

SLOTS = {"crucible_slots": 4}


@dataclass
class FakeCluster:
    cluster: Any
    address: str
    head: Any
    docker: Any
    gpu: Any
    scratch: Path

    def node_id(self, node: Any) -> str:
        return str(node.node_id)


@pytest.fixture(scope="session")  # started once, by the first test that asks
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeCluster]:
    base = tmp_path_factory.mktemp("ray")
    names = ("RAY_TMPDIR", "CRUCIBLE_NODE_SCRATCH", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")
    saved = {**{k: os.environ.get(k) for k in names}, **_BEFORE}
    os.environ.update(AUTH)
    os.environ["RAY_TMPDIR"] = str(base)
    os.environ["CRUCIBLE_NODE_SCRATCH"] = str(base / "scratch")
    (base / "ray").mkdir()  # Ray's own dir under RAY_TMPDIR: the address file, sessions
    common = {"num_cpus": 1, "temp_dir": str(base / "ray"), "include_dashboard": False}
    # A lost node is noticed in a second or two, not Ray's default half minute.
    fast = {"health_check_period_ms": 500, "health_check_failure_threshold": 2,
            "health_check_timeout_ms": 500, "health_check_initial_delay_ms": 0}  # fmt: skip
    cluster = Cluster(initialize_head=True,
                      head_node_args={**common, "resources": SLOTS, "_system_config": fast})  # fmt: skip
    docker = cluster.add_node(**common, resources={**SLOTS, "crucible_docker": 1})
    gpu = cluster.add_node(**common, num_gpus=1, resources=SLOTS)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        yield FakeCluster(cluster, cluster.address, cluster.head_node, docker, gpu,
                          base / "scratch")  # fmt: skip
    finally:
        ray.shutdown()
        cluster.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
