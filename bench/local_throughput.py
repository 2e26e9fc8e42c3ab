"""Oracle trials per second on the local provider, next to bare bubblewrap, with network
off and on.

    python bench/local_throughput.py                 # 200 trials, concurrency 4, both modes
    python bench/local_throughput.py -n 500 -c 8 --network on

The bare baseline does the same work with two bwrap launches per trial: one
runs the task's solution/solve.sh, the other its tests/test.sh (both with
bash, as a trial does), and nothing else: no result files, no index, no logs,
no isolation of the tests from the solution. With network off it unshares the
network (`--unshare-all`, as crucible's sandbox has loopback only); with network on
it keeps the host's (`--share-net`: the cheapest way to a network, with none of the
netns, slirp4netns and prohibit routes a crucible sandbox with network gets). The
ratio is crucible's rate over the bare rate of the same mode (issue target: >= 0.8).
The two modes run interleaved (off, on, off, on... per round) so that a busy
machine weighs on both alike.

Where the jobs folder lives matters on ext4 without a journal (this kind of VM's disk):
each file created skips every inode its block group freed in the last one to six
minutes, so a run started soon after a large delete there (an earlier run's cleanup, a
test suite) pays up to a millisecond per create, and crucible makes about 12 a trial
against the floor's 5. `--dir /dev/shm` (tmpfs) measures the sandboxes alone; space
runs on a disk folder several minutes apart.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from crucible.agents.oracle import OracleAgent
from crucible.engine.job import JobOptions, JobRunner
from crucible.engine.plan import make_job_config
from crucible.sandboxes.local.bwrap import find_bwrap
from crucible.sandboxes.local.provider import LocalProvider
from crucible.tasks.dataset import discover_tasks
from crucible.tasks.scaffold import scaffold_task

SOLVE = "bash /solution/solve.sh"
CHECK = "mkdir -p /logs/verifier && bash /tests/test.sh"


def bare_argv(
    bwrap: str, task: Path, app: Path, logs: Path, command: str, network: bool
) -> list[str]:
    argv = [bwrap, "--unshare-all", *(["--share-net"] if network else [])]
    argv += ["--die-with-parent", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        p = Path("/") / name
        if p.is_symlink():
            argv += ["--symlink", str(p.readlink()), f"/{name}"]
        elif p.is_dir():
            argv += ["--ro-bind", str(p), f"/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
             "--bind", str(app), "/app", "--bind", str(logs), "/logs",
             "--ro-bind", str(task / "solution"), "/solution", "--ro-bind", str(task / "tests"), "/tests",
             "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--chdir", "/app",
             "sh", "-c", command]  # fmt: skip
    return argv


def bench_task(root: Path, network: bool) -> Path:
    """The scaffold (no network), or the same task with the network."""
    task = scaffold_task("bench", root)
    if network:
        toml = task / "task.toml"
        toml.write_text(
            toml.read_text().replace('network_mode = "no-network"', 'network_mode = "public"')
        )
    return task


async def bare(n: int, concurrency: int, work: Path, bwrap: str, network: bool) -> float:
    sem = asyncio.Semaphore(concurrency)
    task = bench_task(work / "bare-task", network)

    async def one(i: int) -> None:
        async with sem:
            app, logs = work / f"bare-{i}" / "app", work / f"bare-{i}" / "logs"
            app.mkdir(parents=True)
            logs.mkdir()
            for cmd in (SOLVE, CHECK):
                proc = await asyncio.create_subprocess_exec(
                    *bare_argv(bwrap, task, app, logs, cmd, network),
                    stdout=asyncio.subprocess.DEVNULL,
                )
                assert await proc.wait() == 0
            assert (logs / "verifier" / "reward.txt").read_text().strip() == "1"

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return n / (time.perf_counter() - t0)


async def crucible_rate(n: int, concurrency: int, work: Path, network: bool) -> float:
    bench_task(work / "tasks" / "bench", network)
    tasks, invalid = discover_tasks([work / "tasks"])
    assert not invalid
    cfg = make_job_config(job_id="bench", tasks=tasks, agent="oracle", env="local",
                          attempts=n, concurrency=concurrency, dataset=[])  # fmt: skip
    # The host's userland, as the bare baseline uses: the scaffold's Dockerfile would
    # otherwise run it in image mode (measured apart by bench/local_images.py).
    provider = LocalProvider(userland="host")
    runner = JobRunner(cfg, tasks, provider, OracleAgent(), work / "jobs", JobOptions())
    t0 = time.perf_counter()
    summary = await runner.run()
    rate = n / (time.perf_counter() - t0)
    assert summary.outcomes == {"graded": n}, summary.outcomes
    assert summary.mean_reward == 1.0
    return rate


def cpu() -> tuple[float, float]:
    """CPU seconds of this process, and of its reaped children (the sandboxes)."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


async def round_of(n: int, concurrency: int, root: Path, bwrap: str, network: bool) -> list[float]:
    """bare rate, crucible rate, and CPU ms per trial (bare, crucible: ours + sandboxes')."""
    # Kept until the whole run ends (main): on ext4 without a journal (this VM's disk),
    # each create skips past every inode freed in its block group in the last one to six
    # minutes (ialloc.c: recently_deleted), so deleting a round's thousands of files here
    # would slow the next round's creates tenfold, crucible's (12 a trial) most.
    work = Path(tempfile.mkdtemp(prefix="round-", dir=root))
    c0 = cpu()
    bare_rate = await bare(n, concurrency, work, bwrap, network)
    c1 = cpu()
    ours = await crucible_rate(n, concurrency, work, network)
    c2 = cpu()
    per = [sum(b) - sum(a) for a, b in ((c0, c1), (c1, c2))]
    return [bare_rate, ours, per[0] / n * 1e3, per[1] / n * 1e3]


async def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-n", "--trials", type=int, default=200, help="trials per mode and round")
    ap.add_argument("-c", "--concurrency", type=int, default=4)
    ap.add_argument("--network", choices=["off", "on", "both"], default="both")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds (figures: median)")
    ap.add_argument(
        "--dir", default=".", help="where the jobs dir goes (default: here, like ./jobs)"
    )
    args = ap.parse_args()
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.network]
    root = Path(tempfile.mkdtemp(prefix=".crucible-bench-", dir=args.dir))
    try:
        bwrap = str(find_bwrap().path)
        got: dict[bool, list[list[float]]] = {m: [] for m in modes}
        for _ in range(args.rounds):
            for network in modes:
                got[network].append(
                    await round_of(args.trials, args.concurrency, root, bwrap, network)
                )
        print(f"trials             {args.trials} oracle trials per mode and round, "
              f"concurrency {args.concurrency}, {args.rounds} round(s), medians")  # fmt: skip
        for network in modes:
            bare_rate, ours, bare_cpu, our_cpu = (
                statistics.median(r[i] for r in got[network]) for i in range(4)
            )
            ratios = [r[1] / r[0] for r in got[network]]
            name = "on " if network else "off"
            print(f"network {name}        bare bubblewrap {bare_rate:6.1f} trials/s, "
                  f"crucible local {ours:6.1f} trials/s, ratio {statistics.median(ratios):.2f} "
                  f"(rounds: {' '.join(f'{x:.2f}' for x in ratios)}; target >= 0.8)")  # fmt: skip
            print(f"  cpu per trial    bare {bare_cpu:.2f} ms, crucible {our_cpu:.2f} ms "
                  "(this process and its reaped children)")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
