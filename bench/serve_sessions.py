"""Sessions of the grading service on the local provider: time to first command, how many
idle sessions one machine holds, and a trivial exec's latency at that load.

    python bench/serve_sessions.py                  # 1000 idle sessions, 5 first commands
    python bench/serve_sessions.py -n 200 --first 10
    python bench/serve_sessions.py --image debian:bookworm-slim   # sandboxes on an image

A service (the sessions router, a bearer token, real uvicorn on 127.0.0.1, the local
provider in host mode) runs in a child process; this one is its client, over HTTP.
1. Time to first command: open a session and run `true` in it, then close it; cold (no
   pool) and warm (a pool of 2 kept full), `--first` times each: the median and range.
2. Idle sessions: open `-n` sessions (16 at a time), then measure the memory of the
   service and every sandbox process under it: the sum of PSS (shared pages split
   between their users, what the machine really spends) and the sum of RSS (shared
   pages counted in each process: an upper bound), and how far the machine's MemAvailable
   fell meanwhile (which counts the kernel's memory too, and anything else running).
3. Exec latency at that load (and, for scale, an empty route's HTTP round trip): `--execs` trivial execs (`true`), each in a session drawn at
   random, one at a time and `--parallel` at a time: p50, p99 and max, in ms, as the client sees them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

TEST = "echo 1 > /logs/verifier/reward.txt"


def make_task(root: Path, image: str | None) -> Path:
    task = root / "idle"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(
        'schema_version = "1.1"\n[agent]\ntimeout_sec = 36000\n[verifier]\ntimeout_sec = 60\n'
        '[environment]\nnetwork_mode = "no-network"\nmemory_mb = 256\n'
        + (f'docker_image = "{image}"\n' if image else "")
    )
    (task / "instruction.md").write_text("Nothing.\n")
    (task / "tests" / "test.sh").write_text("#!/usr/bin/env bash\n" + TEST + "\n")
    return task


# ---- the service (child process) --------------------------------------------------------


def serve(task_dir: str, jobs: str, pool: int, max_sessions: int) -> None:
    import uvicorn
    from fastapi import Depends, FastAPI, Header, HTTPException

    from crucible.sandboxes.base import Provider
    from crucible.sandboxes.local.provider import LocalProvider
    from crucible.serve.pool import PooledProvider
    from crucible.serve.session_routes import sessions_router
    from crucible.serve.sessions import SessionManager
    from crucible.tasks.loader import load_task

    token = secrets.token_urlsafe(16)
    task = load_task(Path(task_dir))
    job_id = f"bench-sessions-{secrets.token_hex(3)}"
    # host mode for a task without an image; image mode (an overlay on the image) with one
    provider: Provider = LocalProvider(userland="auto")
    if pool:
        provider = PooledProvider(provider, pool)
    manager = SessionManager({task.name: task}, provider, job_dir=Path(jobs) / job_id,
                             job_id=job_id, slots=asyncio.Semaphore(max_sessions),
                             max_sessions=max_sessions, idle_timeout_s=36000)  # fmt: skip
    (Path(jobs) / job_id).mkdir(parents=True)

    def auth(authorization: str | None = Header(default=None)) -> None:
        if authorization != f"Bearer {token}":
            raise HTTPException(status_code=401)

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        await provider.preflight()
        if isinstance(provider, PooledProvider):
            await provider.prepare(manager.specs())
        yield
        await manager.aclose()
        await provider.cleanup(job_id)
        await provider.aclose()

    app = FastAPI(lifespan=lifespan)
    app.include_router(sessions_router(manager, [Depends(auth)]))

    @app.get("/bench/pool")
    async def pool_ready() -> dict[str, int]:
        ready = provider.ready(manager.specs()[0]) if isinstance(provider, PooledProvider) else 0
        return {"ready": ready}

    @app.get("/bench/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)

    async def run() -> None:
        serving = asyncio.create_task(server.serve())
        while not server.started and not serving.done():  # noqa: ASYNC110 (uvicorn has no event)
            await asyncio.sleep(0.01)
        if server.started:
            port = server.servers[0].sockets[0].getsockname()[1]
            print(f"READY {port} {token}", flush=True)
        await serving

    asyncio.run(run())


class Service:
    def __init__(self, task: Path, jobs: Path, pool: int, max_sessions: int) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        argv = [
            sys.executable,
            __file__,
            "--serve",
            str(task),
            str(jobs),
            str(pool),
            str(max_sessions),
        ]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "READY":
            raise SystemExit("the service did not start")
        self.url, self.token = f"http://127.0.0.1:{line[1]}", line[2]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


# ---- memory -------------------------------------------------------------------------------


def tree(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def memory_kib(pids: list[int]) -> tuple[int, int]:
    """(sum of PSS, sum of RSS) in KiB over `pids`."""
    pss = rss = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1])
                    elif line.startswith("Rss:"):
                        rss += int(line.split()[1])
        except OSError:
            continue
    return pss, rss


def mem_available_kib() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))


# ---- the client ---------------------------------------------------------------------------


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await call()
    return time.perf_counter() - t0


async def first_command(http: httpx.AsyncClient) -> float:
    t0 = time.perf_counter()
    sid = (
        (await http.post("/v1/sessions", json={"task": {"id": "idle"}}))
        .raise_for_status()
        .json()["id"]
    )
    (await http.post(f"/v1/sessions/{sid}/exec", json={"command": "true"})).raise_for_status()
    took = time.perf_counter() - t0
    (await http.delete(f"/v1/sessions/{sid}")).raise_for_status()
    return took


async def first_commands(svc: Service, n: int, pooled: bool) -> list[float]:
    out = []
    async with httpx.AsyncClient(base_url=svc.url, timeout=120,
                                 headers={"Authorization": f"Bearer {svc.token}"}) as http:  # fmt: skip
        for _ in range(n):
            while pooled and (await http.get("/bench/pool")).json()["ready"] < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            out.append(await first_command(http))
    return out


async def exec_latency(
    http: httpx.AsyncClient, ids: list[str], execs: int, width: int
) -> dict[str, float]:
    lat: list[float] = []
    slots = asyncio.Semaphore(width)
    body = {"command": "true"}

    async def one() -> None:
        async with slots:
            sid = random.choice(ids)
            lat.append(await timed(lambda: http.post(f"/v1/sessions/{sid}/exec", json=body)))

    await asyncio.gather(*(one() for _ in range(execs)))
    lat.sort()
    return {f"p50_{width}": 1000 * lat[len(lat) // 2],
            f"p99_{width}": 1000 * lat[int(len(lat) * 0.99)], f"max_{width}": 1000 * lat[-1]}  # fmt: skip


async def load(svc: Service, n: int, execs: int, parallel: int) -> dict[str, float]:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=svc.url, timeout=600, limits=limits,
                                 headers={"Authorization": f"Bearer {svc.token}"}) as http:  # fmt: skip
        gate = asyncio.Semaphore(16)

        async def open_one() -> str:
            async with gate:
                got = await http.post("/v1/sessions", json={"task": {"id": "idle"}})
                return str(got.raise_for_status().json()["id"])

        before = mem_available_kib()
        t0 = time.perf_counter()
        ids = await asyncio.gather(*(open_one() for _ in range(n)))
        opened = time.perf_counter() - t0
        pss, rss = memory_kib(tree(svc.proc.pid))
        out: dict[str, float] = {"opened_s": opened, "pss_mib": pss / 1024, "rss_mib": rss / 1024,
                                 "avail_mib": (before - mem_available_kib()) / 1024}  # fmt: skip
        for width in sorted({1, parallel}):
            out |= await exec_latency(http, ids, execs, width)
        pings = sorted([await timed(lambda: http.get("/bench/ping")) for _ in range(200)])
        return out | {"ping_ms": 1000 * pings[100]}


def summary(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1000:.0f} ms (range {min(xs) * 1000:.0f}-{max(xs) * 1000:.0f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=1000, help="idle sessions to hold")
    ap.add_argument("--first", type=int, default=5, help="first commands timed, cold and warm")
    ap.add_argument("--execs", type=int, default=2000)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument(
        "--image", help="the task's docker_image (local image mode), e.g. debian:bookworm-slim"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as tmp:
        task = make_task(Path(tmp), args.image)
        for pool in (0, 2):
            svc = Service(task, Path(tmp) / "jobs", pool, 8)
            try:
                took = asyncio.run(first_commands(svc, args.first, pooled=bool(pool)))
            finally:
                svc.stop()
            print(
                f"time to first command, {'warm pool of 2' if pool else 'no pool'}: {summary(took)}"
            )
        svc = Service(task, Path(tmp) / "jobs", 0, args.n)
        try:
            got = asyncio.run(load(svc, args.n, args.execs, args.parallel))
        finally:
            svc.stop()
        print(f"{args.n} idle sessions opened in {got['opened_s']:.1f} s; service + sandboxes: "
              f"PSS {got['pss_mib']:.0f} MiB ({got['pss_mib'] / args.n:.2f} MiB a session), "
              f"RSS sum {got['rss_mib']:.0f} MiB; the machine's MemAvailable fell by "
              f"{got['avail_mib']:.0f} MiB (kernel memory included; other work on it too)")  # fmt: skip
        for width in sorted({1, args.parallel}):
            print(f"trivial exec at that load ({args.execs} execs, {width} at a time): "
                  f"p50 {got[f'p50_{width}']:.1f} ms, p99 {got[f'p99_{width}']:.1f} ms, "
                  f"max {got[f'max_{width}']:.1f} ms")  # fmt: skip
        print(f"an empty route's HTTP round trip, for scale: p50 {got['ping_ms']:.1f} ms")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
