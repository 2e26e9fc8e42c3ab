"""The ray executor's cost on the SIMULATED provider (no sandbox runs: crucible's and
Ray's own cost per trial), in one run:

    python bench/ray_executor.py                    # 400 trials: local vs ray on one node
    python bench/ray_executor.py --nodes 1 2 3      # then throughput vs nodes (fake cluster)

1. Overhead: the same job (N trials, -c 32, 0 s start) with the local executor and with
   the ray executor on a one-node Ray started here; the ratio of wall times, and the
   added milliseconds per trial.
2. Scaling: a fake cluster (ray.cluster_utils) of 1..K nodes, each with `--slots`
   sandbox slots and a `--start` s start: trials/s as nodes are added. On one machine
   the nodes share its cores, so growth stops where the cores do.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

from crucible.agents.oracle import OracleAgent
from crucible.engine.executor import ExecutorSettings, LocalExecutor
from crucible.engine.job import JobOptions, JobRunner
from crucible.engine.plan import make_job_config
from crucible.executors.ray.executor import RayExecutor
from crucible.sandboxes.simulated import SimulatedProvider
from crucible.tasks.dataset import discover_tasks
from crucible.tasks.scaffold import scaffold_task


def make_tasks(root: Path, n: int) -> list:
    root.mkdir(parents=True)
    for i in range(n):
        scaffold_task(f"task-{i:03d}", root)
    tasks, invalid = discover_tasks([root])
    assert not invalid, invalid
    return tasks


async def one_job(tasks: list, jobs: Path, name: str, attempts: int, conc: int,
                  start: float, executor: str, address: str | None) -> float:  # fmt: skip
    params = {"start_latency": str(start), "seed": "1"}
    cfg = make_job_config(job_id=name, tasks=tasks, agent="oracle", env="simulated",
                          attempts=attempts, concurrency=conc, dataset=[])  # fmt: skip
    settings = ExecutorSettings(name=executor, address=address, env="simulated",
                                env_params=params, job_id=name)  # fmt: skip
    ex = RayExecutor(settings) if executor == "ray" else LocalExecutor(settings)
    runner = JobRunner(cfg, tasks, SimulatedProvider(**params), OracleAgent(), jobs,
                       JobOptions(max_retries=0), executor=ex)  # fmt: skip
    t0 = time.perf_counter()
    summary = await runner.run()
    wall = time.perf_counter() - t0
    assert summary.n_done == len(tasks) * attempts, summary.outcomes
    return wall


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--nodes", type=int, nargs="*", default=[])
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--start", type=float, default=0.5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="crucible-bench-ray-"))
    os.environ.setdefault("RAY_TMPDIR", str(work))
    (Path(os.environ["RAY_TMPDIR"]) / "ray").mkdir(exist_ok=True)
    os.environ["CRUCIBLE_NODE_SCRATCH"] = str(work / "scratch")
    try:
        import ray

        tasks = make_tasks(work / "tasks", 20)
        attempts = max(1, args.trials // len(tasks))
        n = len(tasks) * attempts
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _temp_dir=str(work / "ray"))  # fmt: skip
        # a warm-up: the node agent's worker process and imports, not per trial
        await one_job(tasks, work / "jobs", "warm", 1, args.concurrency, 0, "ray", None)
        local = await one_job(tasks, work / "jobs", "local", attempts, args.concurrency, 0,
                              "local", None)  # fmt: skip
        on_ray = await one_job(tasks, work / "jobs", "ray", attempts, args.concurrency, 0,
                               "ray", None)  # fmt: skip
        ray.shutdown()
        print(f"trials                {n} (-c {args.concurrency}, 0 s start, simulated)")
        print(f"local executor        {local:.2f} s  ({n / local:.0f} trials/s)")
        print(
            f"ray executor, 1 node  {on_ray:.2f} s  ({n / on_ray:.0f} trials/s, agent start included)"
        )
        print(f"ratio ray/local       {on_ray / local:.2f}x")
        print(f"added per trial       {(on_ray - local) / n * 1000:.1f} ms")
        for k in args.nodes:
            from ray.cluster_utils import Cluster

            c = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 1, "resources": {"crucible_slots": args.slots},
                "include_dashboard": False, "temp_dir": str(work / "ray")})  # fmt: skip
            for _ in range(k - 1):
                c.add_node(num_cpus=1, resources={"crucible_slots": args.slots},
                           temp_dir=str(work / "ray"))  # fmt: skip
            c.wait_for_nodes()
            ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
            conc = args.slots * 3  # more than one node holds: the nodes' slots bind
            wall = await one_job(tasks, work / "jobs", f"nodes-{k}", attempts, conc,
                                 args.start, "ray", c.address)  # fmt: skip
            print(f"{k} node(s) x {args.slots} slots, {args.start}s start: {n / wall:.1f} trials/s")
            ray.shutdown()
            c.shutdown()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
