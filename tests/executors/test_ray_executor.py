"""The ray executor on a three-node fake cluster (tests/executors/conftest.py), with real
local (bubblewrap) sandboxes on every node: placement by declared needs, a node lost
mid-job, and the same results as the local executor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.serving import write_task

from crucible.engine.launch import prepare_launch
from crucible.engine.request import RunRequest
from crucible.engine.spec import TrialPlan
from crucible.executors.ray.executor import RayExecutor
from crucible.executors.ray.placement import Needs, NodeView, choose, node_view
from crucible.records.trial import TrialResult

ray = pytest.importorskip("ray")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


async def _run(req: RunRequest, on_placed: Any = None) -> tuple[Any, list[TrialResult]]:
    plan = await prepare_launch(req)
    runner = plan.runner()
    recorded: list[TrialResult] = []
    runner.events.on_trial = recorded.append
    if on_placed is not None:
        assert isinstance(runner.executor, RayExecutor)
        runner.executor.on_placed = on_placed
    try:
        summary = await runner.run()
    finally:
        await plan.provider.aclose()
    return summary, recorded


def _hello(root: Path, name: str, toml: str = "") -> Path:
    """A task the oracle solves: write /app/hello.txt."""
    d = write_task(root, name, toml=toml)
    (d / "solution").mkdir()
    (d / "solution" / "solve.sh").write_text(
        "#!/usr/bin/env bash\nprintf 'Hello, crucible!\\n' > /app/hello.txt\n"
    )
    return d


def _views() -> dict[str, NodeView]:
    return {n["NodeID"]: node_view(n, 4) for n in ray.nodes() if n["Alive"]}


def test_placement_reads_what_each_node_advertises(ray_cluster: Any) -> None:
    views = _views()
    gpu, docker = ray_cluster.gpu.node_id, ray_cluster.docker.node_id
    assert views[gpu].gpus == 1 and views[docker].docker and views[gpu].slots == 4
    nodes = list(views.values())
    for _ in range(3):  # with every node free and with the GPU node loaded
        assert choose(nodes, Needs(gpus=1)).node_id == gpu  # type: ignore[union-attr]
        assert choose(nodes, Needs(docker=True)).node_id == docker  # type: ignore[union-attr]
        views[gpu].running += 1
    views[gpu].gpus_used = 1  # its one GPU is taken: the GPU task waits, never goes elsewhere
    assert choose(nodes, Needs(gpus=1)) is None
    assert not any(n.could_fit(Needs(gpus=2)) for n in nodes)
    views[docker].images.add("img")  # soft affinity: the node holding the image first
    assert choose(nodes, Needs(image="img")).node_id == docker  # type: ignore[union-attr]
    views[docker].running = 4  # full: another node, which pulls or builds it
    assert choose(nodes, Needs(image="img")).node_id != docker  # type: ignore[union-attr]


async def test_a_docker_job_has_agents_only_where_docker_is(ray_cluster: Any) -> None:
    from crucible.engine.executor import ExecutorSettings

    ex = RayExecutor(ExecutorSettings(name="ray", env="docker", job_id="docker-only"))
    await ex._refresh()
    try:
        assert set(ex.agents) == {ray_cluster.docker.node_id}
    finally:
        for a in ex.agents.values():
            ray.kill(a)


async def test_a_gpu_task_goes_only_to_the_node_with_a_gpu(
    ray_cluster: Any, tmp_path: Path
) -> None:
    gpu_task = _hello(tmp_path / "tasks", "needs-gpu", toml="gpus = 1\n")
    _hello(tmp_path / "tasks", "cpu-only")
    placed: list[tuple[str, str]] = []
    req = RunRequest(paths=[tmp_path / "tasks"], agent="oracle", attempts=3, concurrency=6,
                     jobs_dir=tmp_path / "jobs", job_name="gpu-place", max_retries=0,
                     executor="ray", ray_address=ray_cluster.address)  # fmt: skip
    assert gpu_task.is_dir()
    summary, recorded = await _run(req, lambda p, n: placed.append((p.task.name, n.node_id)))
    gpu = ray_cluster.gpu.node_id
    assert {n for t, n in placed if t == "needs-gpu"} == {gpu}
    assert len([t for t, _ in placed if t == "needs-gpu"]) == 3
    by_name = {r.trial_name: r for r in recorded}
    # The node's bubblewrap provider offers no GPU: the node itself says so, on that node.
    gpu_name = _views()[gpu].name
    for a in range(3):
        r = by_name[f"needs-gpu__{a}"]
        assert (r.outcome, r.node) == ("resources_unavailable", gpu_name)
        assert by_name[f"cpu-only__{a}"].reward == 1.0
    assert summary.status == "completed"


def _normal(job: Path) -> dict[str, Any]:
    """What the two executors' job folders must share: the files of each trial, and each
    record but for what differs run to run (ids, times, the node)."""
    out: dict[str, Any] = {}
    for trial in sorted(p for p in job.iterdir() if p.is_dir()):
        rec = json.loads((trial / "result.json").read_text())
        for key in ("id", "job_id", "node", "started_at", "finished_at", "environment_setup",
                    "agent_setup", "agent_execution", "verifier", "exception_info"):  # fmt: skip
            rec.pop(key, None)
        if rec.get("verifier_result"):
            rec["verifier_result"] = {"rewards": rec["verifier_result"].get("rewards")}
        files = sorted(str(f.relative_to(trial)) for f in trial.rglob("*") if f.is_file())
        out[trial.name] = {"record": rec, "files": files}
    return out


@pytest.mark.slow
def test_run_on_the_cluster_matches_the_local_executor(ray_cluster: Any, tmp_path: Path) -> None:
    """Done-when: `crucible run examples/tasks --agent oracle --executor ray` on the three
    nodes gives the local executor's rewards, and the same job folder but the nodes."""
    from typer.testing import CliRunner

    from crucible.cli.main import app

    jobs = tmp_path / "jobs"
    base = ["run", str(EXAMPLES), "--agent", "oracle", "--jobs-dir", str(jobs), "--json"]
    runner = CliRunner()
    local = runner.invoke(app, [*base, "--job-name", "on-local"])
    on_ray = runner.invoke(app, [*base, "--job-name", "on-ray", "--executor", "ray",
                                 "--ray-address", ray_cluster.address])  # fmt: skip
    assert local.exit_code == on_ray.exit_code == 0, (local.output, on_ray.output)
    a, b = _normal(jobs / "on-local"), _normal(jobs / "on-ray")
    assert a == b and len(a) == len(list(EXAMPLES.glob("*/task.toml")))
    nodes = {json.loads((jobs / "on-ray" / t / "result.json").read_text())["node"] for t in b}
    assert len(nodes) > 1 and None not in nodes  # spread over the cluster, each node named
    assert {json.loads((jobs / "on-local" / t / "result.json").read_text())["node"] for t in a} == {
        None
    }


async def test_a_node_lost_mid_job_retries_its_trials_elsewhere(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """A fourth node joins; it is removed (its raylet and workers killed) while a trial
    is on its way to it. That trial is crucible's failure (sandbox_failed), retried on a
    node still there; the job completes, every trial recorded and graded exactly once."""
    doomed = ray_cluster.cluster.add_node(num_cpus=1, resources={"crucible_slots": 8},
                                          temp_dir=str(ray_cluster.scratch.parent / "ray"))  # fmt: skip
    ray_cluster.cluster.wait_for_nodes()
    for name in ("hello-a", "hello-b", "hello-c"):
        _hello(tmp_path / "tasks", name)
    lost: list[TrialPlan] = []

    def on_placed(plan: TrialPlan, node: NodeView) -> None:
        if node.node_id == doomed.node_id and not lost:
            lost.append(plan)
            ray_cluster.cluster.remove_node(doomed)

    req = RunRequest(paths=[tmp_path / "tasks"], agent="oracle", attempts=3, concurrency=9,
                     jobs_dir=tmp_path / "jobs", job_name="node-loss", max_retries=3,
                     executor="ray", ray_address=ray_cluster.address)  # fmt: skip
    summary, recorded = await _run(req, on_placed)
    assert lost, "no trial was placed on the node that joined"
    assert summary.status == "completed" and summary.n_done == 9
    names = [r.trial_name for r in recorded]
    assert sorted(names) == sorted(set(names)) and len(names) == 9  # each recorded once
    assert all(r.outcome == "graded" and r.reward == 1.0 for r in recorded)
    retried = {r.trial_name: r for r in recorded}[lost[0].trial_name]
    assert retried.retries >= 1 and retried.node is not None
    assert doomed.node_id[:8] not in retried.node
    log = (tmp_path / "jobs" / "node-loss" / "job.log").read_text()
    assert f"{lost[0].trial_name}: sandbox_failed (the trial was lost on node" in log


RAY_PROBE = r"""
: > /app/reached
for target in TARGETS; do
  addr=${target%:*}; port=${target#*:}
  if timeout 3 bash -c "exec 3<>/dev/tcp/$addr/$port" 2>/dev/null; then
    echo "$target" >> /app/reached
  fi
done
touch /app/ok
"""


def _ray_ports() -> list[tuple[str, int]]:
    """Every Ray port of every node: GCS, raylet, object manager, metrics, the runtime-env
    agent, and the dashboard agent's, at the node's own address."""
    out: set[tuple[str, int]] = set()
    for n in ray.nodes():
        if not n["Alive"]:
            continue
        ip = n["NodeManagerAddress"]
        for key in ("NodeManagerPort", "ObjectManagerPort", "MetricsExportPort",
                    "RuntimeEnvAgentPort", "DashboardAgentListenPort"):  # fmt: skip
            if 0 < int(n.get(key) or 0) < 65536:
                out.add((ip, int(n[key])))
    gcs_ip, gcs_port = ray.get_runtime_context().gcs_address.rsplit(":", 1)
    out.add((gcs_ip, int(gcs_port)))
    return sorted(out)


async def test_a_trial_on_a_node_cannot_reach_the_ray_ports(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """Attack: a trial with network, on a node, connects to every Ray port of the cluster
    (the GCS, each raylet and object manager) at the node's address, at 127.0.0.1 and at
    slirp's gateway: a sandbox that reached them could submit work as the head. The
    host reaches each one (the probe can succeed); from the sandbox, none. Were the
    sandbox in the host's network namespace (local sandboxes with network before issue
    23's sealing), every port would be listed in /app/reached and the trial score 0."""
    import contextlib
    import socket

    ports = []
    for ip, port in _ray_ports():  # the control: what is live, from the host
        with contextlib.suppress(OSError), socket.create_connection((ip, port), timeout=5):
            ports.append((ip, port))
    live = {p for _, p in ports}
    gcs = int(ray.get_runtime_context().gcs_address.rsplit(":", 1)[1])
    raylets = {int(n["NodeManagerPort"]) for n in ray.nodes() if n["Alive"]}
    assert gcs in live and raylets <= live  # the ports that take work are all there
    targets = [f"{ip}:{p}" for ip, p in ports]
    targets += [f"{a}:{p}" for _, p in ports for a in ("127.0.0.1", "10.0.2.2")]
    d = _hello(tmp_path / "tasks", "probe-ray")
    (d / "task.toml").write_text((d / "task.toml").read_text().replace("no-network", "public"))
    (d / "solution" / "solve.sh").write_text(
        "#!/usr/bin/env bash\n" + RAY_PROBE.replace("TARGETS", " ".join(targets))
    )
    (d / "tests" / "test.sh").write_text(
        "#!/usr/bin/env bash\nmkdir -p /logs/verifier; cp /app/reached /logs/verifier/reached.txt\n"
        "if [ -f /app/ok ] && [ ! -s /app/reached ]; then echo 1; else echo 0; fi"
        " > /logs/verifier/reward.txt\n"
    )
    req = RunRequest(paths=[d], agent="oracle", attempts=3, concurrency=3, max_retries=0,
                     jobs_dir=tmp_path / "jobs", job_name="probe", executor="ray",
                     ray_address=ray_cluster.address)  # fmt: skip
    _, recorded = await _run(req)
    for r in recorded:
        reached = tmp_path / "jobs" / "probe" / r.trial_name / "verifier" / "reached.txt"
        assert r.outcome == "graded", r.error
        assert r.reward == 1.0, reached.read_text() if reached.exists() else r
