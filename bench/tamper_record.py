"""What the tamper record costs at grading: one `system_changes()` after an agent that wrote
N files outside its places (an `apt-get install`-sized change) and N inside its workdir.

    python bench/tamper_record.py                 # local image mode (Buildah)
    python bench/tamper_record.py --env docker
    python bench/tamper_record.py -n 20000

Printed as JSON: the files written, the changes recorded (and whether the record was cut),
and the seconds the record took (median of --repeat reads of the same sandbox).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from crucible.sandboxes.base import Provider, SandboxSpec

WRITE = (
    "mkdir -p /usr/share/bench /app/bench && cd /usr/share/bench && "
    "seq {n} | xargs -n 500 touch && cd /app/bench && seq {n} | xargs -n 500 touch"
)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="local", choices=["local", "docker"])
    ap.add_argument("-n", type=int, default=5000, help="files written outside and inside")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    provider: Provider
    if args.env == "docker":
        from crucible.sandboxes.docker.provider import DockerProvider

        provider = DockerProvider()
    else:
        from crucible.sandboxes.local.provider import LocalProvider

        provider = LocalProvider(userland="image", image_tool="buildah")
    await provider.preflight()
    spec = SandboxSpec(job_id="bench-tamper", image="debian:bookworm-slim", workdir="/app")
    box = await provider.create(spec)
    try:
        res = await box.exec(WRITE.format(n=args.n), timeout=300)
        assert res.ok, res.stderr
        await box.kill_all()
        times, record = [], None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            record = await box.system_changes()
            times.append(time.perf_counter() - t0)
        assert record is not None
        out = {
            "env": args.env,
            "files_outside": args.n,
            "files_in_workdir": args.n,
            "changes_recorded": len(record.changes),
            "n_total": record.n_total,
            "truncated": record.truncated,
            "record_sec_median": round(statistics.median(times), 4),
        }
        print(json.dumps(out))
    finally:
        await box.close()
        await provider.cleanup("bench-tamper")
        await provider.aclose()


if __name__ == "__main__":
    asyncio.run(main())
