"""Oracle trials per second on the local provider, next to bare bubblewrap.

    python bench/local_throughput.py                 # 200 trials, concurrency 4
    python bench/local_throughput.py -n 500 -c 8

The bare baseline does the same work with two bwrap launches per trial (one
that writes the answer, one that checks it and writes a reward) and nothing
else: no result files, no index, no logs. The ratio is crucible's rate over
the bare rate (issue target: >= 0.8).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from crucible.agents.oracle import OracleAgent
from crucible.engine.job import JobOptions, JobRunner, make_job_config
from crucible.sandboxes.bwrap import find_bwrap
from crucible.sandboxes.local import LocalProvider
from crucible.tasks.dataset import discover_tasks
from crucible.tasks.scaffold import scaffold_task

SOLVE = "echo 'Hello from bench!' > /app/greeting.txt"
CHECK = (
    "mkdir -p /logs/verifier; if [ \"$(cat /app/greeting.txt)\" = 'Hello from bench!' ]; "
    "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi"
)


def bare_argv(bwrap: str, app: Path, logs: Path, command: str) -> list[str]:
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        p = Path("/") / name
        if p.is_symlink():
            argv += ["--symlink", str(p.readlink()), f"/{name}"]
        elif p.is_dir():
            argv += ["--ro-bind", str(p), f"/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
             "--bind", str(app), "/app", "--bind", str(logs), "/logs",
             "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--chdir", "/app",
             "sh", "-c", command]  # fmt: skip
    return argv


async def bare(n: int, concurrency: int, work: Path, bwrap: str) -> float:
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            app, logs = work / f"bare-{i}" / "app", work / f"bare-{i}" / "logs"
            app.mkdir(parents=True)
            logs.mkdir()
            for cmd in (SOLVE, CHECK):
                proc = await asyncio.create_subprocess_exec(*bare_argv(bwrap, app, logs, cmd))
                assert await proc.wait() == 0
            assert (logs / "verifier" / "reward.txt").read_text().strip() == "1"

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return n / (time.perf_counter() - t0)


async def crucible_rate(n: int, concurrency: int, work: Path) -> float:
    scaffold_task("bench", work / "tasks")
    tasks, invalid = discover_tasks([work / "tasks"])
    assert not invalid
    cfg = make_job_config(job_id="bench", tasks=tasks, agent="oracle", env="local",
                          attempts=n, concurrency=concurrency, dataset=[])  # fmt: skip
    runner = JobRunner(cfg, tasks, LocalProvider(), OracleAgent(), work / "jobs", JobOptions())
    t0 = time.perf_counter()
    summary = await runner.run()
    rate = n / (time.perf_counter() - t0)
    assert summary.outcomes == {"graded": n}, summary.outcomes
    assert summary.mean_reward == 1.0
    return rate


async def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-n", "--trials", type=int, default=200)
    ap.add_argument("-c", "--concurrency", type=int, default=4)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="crucible-bench-"))
    try:
        bwrap = str(find_bwrap().path)
        bare_rate = await bare(args.trials, args.concurrency, work, bwrap)
        ours = await crucible_rate(args.trials, args.concurrency, work)
        print(f"trials             {args.trials} oracle trials, concurrency {args.concurrency}")
        print(f"bare bubblewrap    {bare_rate:.1f} trials/s (2 bwrap launches per trial)")
        print(f"crucible local     {ours:.1f} trials/s (full trials: results, logs, index)")
        print(f"ratio              {ours / bare_rate:.2f}  (target >= 0.8)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
