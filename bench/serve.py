"""The grading service, end to end, in one run (issue 26's benchmark), against a real
`crucible serve` child process on 127.0.0.1 (local provider) and its HTTP API:

    python bench/serve.py                          # 200 grades -c 4, 1000 idle sessions
    python bench/serve.py -n 40 -c 2 --sessions 50 --first 3 --execs 200 --json

1. Grades per second through the service against `crucible run` on the same trials: one
   task, `-n` of them at `-c` at once, `--rounds` times, the two interleaved;
   `crucible run -a oracle -k N` (its solution writes
   the file) and one POST of `-n` grades whose files submission writes the same file.
   The run's rate is over its job's own span (job.json to result.json: no interpreter
   start), the service's over the POST's round trip. Target: >= 0.8x.
2. The latency the service adds per grade: `--latency` grades one at a time, each its
   round trip minus its trial's own duration (the record's started_at..finished_at);
   and a cached grade's HTTP round trip (the same id again). Target: < 5 ms.
3. Time to first command of a session (open, run `true`), cold (no pool) and with
   `--warm 2`, `--first` times each: the median and range.
4. Idle sessions: open `--sessions` (16 at a time), then the memory of the service and
   every sandbox process under it: the sum of PSS (shared pages split between their
   users, what the machine really spends) and of RSS (an upper bound), and how far the
   machine's MemAvailable fell (kernel memory and anything else running included).
   Then `--execs` trivial execs (`true`), each in a session drawn at random, one at a
   time and `--parallel` at a time: p50, p99 and max in ms, as the client sees them
   (with /health's round trip, for scale). Target: 1000 sessions, p99 < 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

HELLO = "Hello, crucible!\n"
TEST = (
    "mkdir -p /logs/verifier; if printf 'Hello, crucible!\\n' | cmp -s - /app/hello.txt; "
    "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi"
)
SUBMISSION = {"type": "files", "files": {"/app/hello.txt": HELLO}}


def make_task(root: Path, image: str | None) -> Path:
    task = root / "idle"
    (task / "tests").mkdir(parents=True)
    (task / "solution").mkdir()
    (task / "solution" / "solve.sh").write_text(
        "#!/usr/bin/env bash\nprintf 'Hello, crucible!\\n' > /app/hello.txt\n"
    )
    (task / "task.toml").write_text(
        'schema_version = "1.1"\n[agent]\ntimeout_sec = 36000\n[verifier]\ntimeout_sec = 60\n'
        '[environment]\nnetwork_mode = "no-network"\nmemory_mb = 256\n'
        + (f'docker_image = "{image}"\n' if image else "")
    )
    (task / "instruction.md").write_text("Nothing.\n")
    (task / "tests" / "test.sh").write_text("#!/usr/bin/env bash\n" + TEST + "\n")
    return task


# ---- the service (`crucible serve`, a child process) ---------------------------------


def crucible(*argv: str, **kw: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, "-m", "crucible.cli.main", *argv], text=True,
                            env=env, **kw)  # fmt: skip


class Service:
    def __init__(self, task: Path, jobs: Path, *, concurrency: int, warm: int = 0,
                 max_sessions: int = 64) -> None:  # fmt: skip
        self.proc = crucible(
            "serve", str(task), "--env", "local", "--jobs-dir", str(jobs), "--port", "0",
            "--job-name", f"bench-serve-{secrets.token_hex(3)}", "--json",
            "-c", str(concurrency), "--warm", str(warm), "--max-sessions", str(max_sessions),
            "--session-idle-timeout", "36000", stdout=subprocess.PIPE,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("the service did not start")
        info = json.loads(line)
        self.url, self.token, self.job = info["url"], info["token"], info["job_id"]

    def client(self, **kw: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=600,
                                 headers={"Authorization": f"Bearer {self.token}"}, **kw)  # fmt: skip

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(120)


async def metric(http: httpx.AsyncClient, name: str) -> float:
    for line in (await http.get("/metrics")).text.splitlines():
        if line.startswith(f"crucible_serve_{name} "):
            return float(line.split()[1])
    raise KeyError(name)


# ---- 1, 2: grades -------------------------------------------------------------------------


def span_s(job_dir: Path) -> float:
    """A job's own span: its start (job.json) to its end (result.json)."""
    data = json.loads((job_dir / "result.json").read_text())
    return (datetime.fromisoformat(data["finished_at"]) -
            datetime.fromisoformat(data["started_at"])).total_seconds()  # fmt: skip


def run_rate(task: Path, jobs: Path, n: int, concurrency: int) -> float:
    job = f"bench-run-{secrets.token_hex(3)}"
    proc = crucible("run", str(task), "-a", "oracle", "-k", str(n), "-c", str(concurrency),
                    "--env", "local", "--jobs-dir", str(jobs), "--job-name", job,
                    stdout=subprocess.DEVNULL)  # fmt: skip
    assert proc.wait() == 0, "crucible run failed"
    return n / span_s(jobs / job)


async def grades(svc: Service, n: int, latency_n: int) -> dict[str, float]:
    async with svc.client() as http:
        items = [{"id": f"g{i}", "task": {"id": "idle"}, "submission": SUBMISSION}
                 for i in range(n)]  # fmt: skip
        t0 = time.perf_counter()
        got = (await http.post("/v1/grade", json={"items": items, "wait_s": 600})).json()
        rate = n / (time.perf_counter() - t0)
        assert all(r["status"] == "ok" and r["reward"] == 1.0 for r in got["results"]), got
        added = []
        for i in range(latency_n):
            item = {"id": f"l{i}", "task": {"id": "idle"}, "submission": SUBMISSION}
            t0 = time.perf_counter()
            r = (await http.post("/v1/grade", json={"items": [item], "wait_s": 600})).json()
            took = time.perf_counter() - t0
            added.append(took - r["results"][0]["metrics"]["duration_s"])
        cached = sorted([await timed(lambda: http.post(
            "/v1/grade", json={"items": [items[0]], "wait_s": 1})) for _ in range(200)])  # fmt: skip
    added.sort()
    return {"service_rate": rate, "added_p50_ms": 1000 * added[len(added) // 2],
            "added_max_ms": 1000 * added[-1], "cached_p50_ms": 1000 * cached[100],
            "cached_p99_ms": 1000 * cached[198]}  # fmt: skip


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
    async with svc.client() as http:
        full = 0.0
        while pooled:  # the pool's level once filled: two looks a second apart agree
            now = await metric(http, "warm_ready")
            if now and now == full:
                break
            full = now
            await asyncio.sleep(1.0)
        for _ in range(n):
            while pooled and await metric(http, "warm_ready") < full:  # noqa: ASYNC110
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
    async with svc.client(limits=limits) as http:
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
        pings = sorted([await timed(lambda: http.get("/health")) for _ in range(200)])
        return out | {"ping_ms": 1000 * pings[100]}


def summary(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1000:.0f} ms (range {min(xs) * 1000:.0f}-{max(xs) * 1000:.0f})"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-n", type=int, default=200, help="grades (and `crucible run` trials)")
    ap.add_argument("-c", "--concurrency", type=int, default=4)
    ap.add_argument("--latency", type=int, default=20, help="grades timed one at a time")
    ap.add_argument("--sessions", type=int, default=1000, help="idle sessions to hold")
    ap.add_argument("--first", type=int, default=5, help="first commands timed, cold and warm")
    ap.add_argument("--execs", type=int, default=2000)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument(
        "--image", help="the task's docker_image (local image mode), e.g. debian:bookworm-slim"
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="interleaved rounds of run and service (figures: medians)",
    )
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = ap.parse_args()
    out: dict[str, Any] = {"n": args.n, "concurrency": args.concurrency,
                           "sessions": args.sessions}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        task, jobs = make_task(Path(tmp), args.image), Path(tmp) / "jobs"
        rounds: list[dict[str, float]] = []
        for _ in range(args.rounds):  # interleaved: a load that drifts weighs on both alike
            got = {"run_rate": run_rate(task, jobs, args.n, args.concurrency)}
            svc = Service(task, jobs, concurrency=args.concurrency)
            try:
                got |= asyncio.run(grades(svc, args.n, args.latency))
            finally:
                svc.stop()
            rounds.append(got | {"ratio": got["service_rate"] / got["run_rate"]})
        out |= {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        out["ratios"] = [r["ratio"] for r in rounds]
        for warm in (0, 2):
            svc = Service(task, jobs, concurrency=4, warm=warm)
            try:
                took = asyncio.run(first_commands(svc, args.first, pooled=bool(warm)))
            finally:
                svc.stop()
            out[f"first_command_{'warm' if warm else 'cold'}_ms"] = [1000 * t for t in took]
        svc = Service(task, jobs, concurrency=args.sessions, max_sessions=args.sessions)
        try:
            out |= asyncio.run(load(svc, args.sessions, args.execs, args.parallel))
        finally:
            svc.stop()
    if args.json:
        print(json.dumps(out))
        return
    print(
        f"grades/s, {args.n} at -c {args.concurrency}: service {out['service_rate']:.2f}, "
        f"crucible run {out['run_rate']:.2f}: {out['ratio']:.2f}x (target >= 0.8x; "
        f"rounds: {', '.join(f'{r:.2f}x' for r in out['ratios'])})"
    )
    print(
        f"latency the service adds per grade ({args.latency} one at a time): p50 "
        f"{out['added_p50_ms']:.1f} ms, max {out['added_max_ms']:.1f} ms; a cached grade's "
        f"round trip: p50 {out['cached_p50_ms']:.1f} ms, p99 {out['cached_p99_ms']:.1f} ms"
    )
    for kind in ("cold", "warm"):
        print(
            f"time to first command, {'--warm 2' if kind == 'warm' else 'no pool'}: "
            f"{summary([t / 1000 for t in out[f'first_command_{kind}_ms']])}"
        )
    n = args.sessions
    print(
        f"{n} idle sessions opened in {out['opened_s']:.1f} s; service + sandboxes: "
        f"PSS {out['pss_mib']:.0f} MiB ({out['pss_mib'] / n:.2f} MiB a session), "
        f"RSS sum {out['rss_mib']:.0f} MiB; the machine's MemAvailable fell by "
        f"{out['avail_mib']:.0f} MiB (kernel memory included; other work on it too)"
    )
    for width in sorted({1, args.parallel}):
        print(
            f"trivial exec at that load ({args.execs} execs, {width} at a time): "
            f"p50 {out[f'p50_{width}']:.1f} ms, p99 {out[f'p99_{width}']:.1f} ms, "
            f"max {out[f'max_{width}']:.1f} ms"
        )
    print(f"/health's HTTP round trip, for scale: p50 {out['ping_ms']:.1f} ms")


if __name__ == "__main__":
    main()
