"""The local image cache by layers, against the flat cache (a full tree per image) and docker,
on N images that share a base, in one run.

    python bench/local_layers.py                  # 12 images, 48 warm trials per mode
    python bench/local_layers.py -n 4 -t 20 -c 2  # a loaded machine

Each image is `FROM debian:bookworm-slim` plus one small layer of its own (a nonce), built
with Buildah (and with docker, under the same tag) before anything is timed. Then, for
each mode, from an empty cache:
- cold: per image, its first trial (the cache filled from the tool's store: layers
  unpacked, or the whole tree copied; then a sandbox made, one command, closed);
  "cold rest" is the mean over all images but the first;
- disk: the cache's size (du) once all N are in, and per image as one flat tree;
- warm: trials per second at --concurrency once every image is in the cache, in
  alternating rounds of the modes (--rounds; the median round counts).
A trial is create + `cat /nonce` + close through the provider (no engine, no agent).
Needs Buildah with debian:bookworm-slim (scripts/setup-images.sh) and, for the docker
column, a Docker engine that has it (scripts/setup-docker.sh; --no-docker skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from crucible.sandboxes.base import SandboxSpec

BASE = "debian:bookworm-slim"


def build_images(work: Path, n: int, docker: bool) -> tuple[list[str], float, float]:
    """N images sharing BASE; (their tags, buildah seconds, docker seconds)."""
    tags, t_buildah, t_docker = [], 0.0, 0.0
    run = secrets.token_hex(3)
    for i in range(n):
        ctx = work / f"ctx{i}"
        ctx.mkdir(parents=True)
        (ctx / "nonce").write_text(f"{run}-{i}\n")
        (ctx / "Dockerfile").write_text(f"FROM {BASE}\nCOPY nonce /nonce\n")
        tag = f"crucible-bench-layers:{run}-{i}"
        t0 = time.perf_counter()
        subprocess.run(
            ["buildah", "build", "--pull-never", "-q", "-t", tag, str(ctx)],
            check=True, capture_output=True,
        )  # fmt: skip
        t_buildah += time.perf_counter() - t0
        if docker:
            t0 = time.perf_counter()
            subprocess.run(["docker", "build", "-q", "-t", tag, str(ctx)], check=True,
                           capture_output=True)  # fmt: skip
            t_docker += time.perf_counter() - t0
        tags.append(tag)
    return tags, t_buildah, t_docker


def remove_images(tags: list[str], docker: bool) -> None:
    subprocess.run(["buildah", "rmi", "-f", *(f"localhost/{t}" for t in tags)], capture_output=True)
    if docker:
        subprocess.run(["docker", "rmi", "-f", *tags], capture_output=True)


def du(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def spec(tag: str, i: int) -> SandboxSpec:
    return SandboxSpec(image=tag, task_name=f"bench-{i}", job_id=f"bench-{secrets.token_hex(4)}",
                       memory_mb=256, pids_limit=128)  # fmt: skip


async def trial(provider: Any, tag: str, i: int) -> None:
    sb = await provider.create(spec(tag, i))
    try:
        r = await sb.exec("cat /nonce", timeout=60)
        assert r.ok and r.stdout.endswith(f"-{i}\n"), (r.stdout, r.stderr)
    finally:
        await sb.close()


async def cold(provider: Any, tags: list[str]) -> list[float]:
    """Seconds to each image's first trial, one image after the other."""
    out = []
    for i, tag in enumerate(tags):
        t0 = time.perf_counter()
        await trial(provider, tag, i)
        out.append(time.perf_counter() - t0)
    return out


async def rate(provider: Any, tags: list[str], trials: int, conc: int) -> float:
    """Trials per second at `conc`, over the images in turn."""
    sem = asyncio.Semaphore(conc)

    async def one(k: int) -> None:
        async with sem:
            await trial(provider, tags[k % len(tags)], k % len(tags))

    t0 = time.perf_counter()
    await asyncio.gather(*(one(k) for k in range(trials)))
    return trials / (time.perf_counter() - t0)


async def local_provider(layered: bool) -> tuple[Any, Path]:
    from crucible.sandboxes.local.provider import LocalProvider

    cache = Path("/tmp") / f"crucible-bench-layers-{secrets.token_hex(6)}"
    cache.mkdir(mode=0o711)
    os.environ["CRUCIBLE_ROOTFS_DIR"] = str(cache)  # read as the provider is made
    provider = LocalProvider(image_tool="buildah")
    provider.images.store.layered = layered
    await provider.preflight()
    return provider, cache


async def run_all(tags: list[str], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Cold per mode, one mode after the other; then warm in alternating rounds (a busy
    machine slows every mode alike), the median round's rate."""
    from crucible.sandboxes.docker.provider import DockerProvider

    providers: dict[str, tuple[Any, Path | None]] = {}
    results: dict[str, dict[str, Any]] = {}
    try:
        for name, layered in (("local, layers", True), ("local, flat", False)):
            providers[name] = await local_provider(layered)
            results[name] = {"cold": await cold(providers[name][0], tags)}
        if not args.no_docker:
            docker = DockerProvider()
            await docker.preflight()
            providers["docker"] = (docker, None)
            results["docker"] = {"cold": await cold(docker, tags)}
        rounds: dict[str, list[float]] = {name: [] for name in providers}
        per_round = max(1, args.trials // args.rounds)
        for _ in range(args.rounds):
            for name, (provider, _) in providers.items():
                rounds[name].append(await rate(provider, tags, per_round, args.concurrency))
        for name, (_, cache) in providers.items():
            results[name]["rate"] = statistics.median(rounds[name])
            if cache is not None:
                results[name]["disk"] = du(cache)
                flat = [d for d in cache.iterdir() if (d / "rootfs").is_dir()]
                results[name]["one_image"] = du(flat[0] / "rootfs") if flat else None
    finally:
        for provider, cache in providers.values():
            await provider.aclose()
            if cache is not None:
                shutil.rmtree(cache, ignore_errors=True)
    return results


def mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.0f} MB"


async def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-n", "--images", type=int, default=12)
    ap.add_argument("-t", "--trials", type=int, default=48, help="warm trials per mode")
    ap.add_argument("-c", "--concurrency", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of warm trials")
    ap.add_argument("--no-docker", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="crucible-bench-layers-"))
    docker = not args.no_docker
    tags, t_buildah, t_docker = build_images(work, args.images, docker)
    try:
        results = await run_all(tags, args)
    finally:
        remove_images(tags, docker)
        shutil.rmtree(work, ignore_errors=True)
    one = results["local, flat"]["one_image"]
    print(f"\n{args.images} images FROM {BASE}, one small layer each; {args.trials} warm "
          f"trials at -c {args.concurrency}; builds (not timed below): buildah "
          f"{t_buildah:.1f}s, docker {t_docker:.1f}s")  # fmt: skip
    print(f"{'mode':<15}{'cache disk':>12}{'x one image':>12}{'cold total':>12}"
          f"{'cold 1st':>10}{'cold rest':>11}{'warm/s':>9}")  # fmt: skip
    for name, r in results.items():
        disk = r.get("disk")
        ratio = f"{disk / one:.2f}" if disk and one else "-"
        c = r["cold"]
        rest = statistics.mean(c[1:]) if len(c) > 1 else c[0]
        print(f"{name:<15}{mb(disk):>12}{ratio:>12}{sum(c):>11.1f}s{c[0]:>9.1f}s"
              f"{rest:>10.1f}s{r['rate']:>9.2f}")  # fmt: skip
    print(f"(one image as a flat tree: {mb(one)})")


if __name__ == "__main__":
    asyncio.run(main())
