"""CPU and wall time of a `local` sandbox's parts, one at a time (concurrency 1): an exec,
an exec then kill_all, a sandbox's start and close, and one with an exec between.

    python bench/local_lifecycle.py            # 200 of each, host userland, no network
    python bench/local_lifecycle.py -n 500 --network public

CPU is the whole machine's (busy jiffies from /proc/stat, so the sandboxes' processes and
the kernel's work for them count), per operation; run it on an idle machine. `self` is
this process's own CPU, `children` what its reaped children (bwrap) used.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time

from crucible.sandboxes.base import Sandbox, SandboxSpec
from crucible.sandboxes.local.provider import LocalProvider


def busy_jiffies() -> int:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4]  # all but idle and iowait


def own_cpu() -> tuple[float, float]:
    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


async def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-n", type=int, default=200, help="operations of each kind")
    ap.add_argument("--network", choices=["none", "public"], default="none")
    args = ap.parse_args()
    provider = LocalProvider(userland="host")
    await provider.preflight()
    spec = SandboxSpec(job_id="bench-lifecycle", network=args.network)
    hz = os.sysconf("SC_CLK_TCK")

    async def exec_only(sb: Sandbox) -> None:
        await sb.exec("true")

    async def exec_sweep(sb: Sandbox) -> None:
        await sb.exec("true")
        await sb.kill_all()

    async def start_close(_: Sandbox) -> None:
        s = await provider.create(spec)
        await s.close()

    async def start_exec_close(_: Sandbox) -> None:
        s = await provider.create(spec)
        await s.exec("true")
        await s.close()

    try:
        for name, op in [("exec", exec_only), ("exec + kill_all", exec_sweep),
                         ("start + close", start_close),
                         ("start + exec + close", start_exec_close)]:  # fmt: skip
            sb = await provider.create(spec)
            await sb.exec("true")
            t0, j0, c0 = time.perf_counter(), busy_jiffies(), own_cpu()
            for _ in range(args.n):
                await op(sb)
            wall, jiffies, c1 = time.perf_counter() - t0, busy_jiffies() - j0, own_cpu()
            await sb.close()
            per = 1000 / args.n
            print(f"{name:22s} wall {wall * per:6.2f} ms   machine cpu "
                  f"{jiffies / hz * per:6.2f} ms   self {(c1[0] - c0[0]) * per:5.2f} ms   "
                  f"children {(c1[1] - c0[1]) * per:5.2f} ms")  # fmt: skip
    finally:
        await provider.aclose()


if __name__ == "__main__":
    asyncio.run(main())
