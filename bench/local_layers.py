"""The local image cache by layers, against the flat cache (a full tree per image) and docker,
on N images that share a base, in one run.

    python bench/local_layers.py                  # 12 images, 40 warm trials per mode
    python bench/local_layers.py -n 4 -t 20 -c 2  # a loaded machine

Each image is `FROM debian:bookworm-slim` plus one small layer of its own (a nonce), built
with Buildah (and with docker, under the same tag) before anything is timed. Then, for
each mode, from an empty cache:
- cold: per image, its first trial (the cache filled from the tool's store: layers
  unpacked, or the whole tree copied; then a sandbox made, one command, closed);
- disk: the cache's size (du) once all N are in, and per image as one flat tree;
- warm: trials per second at --concurrency once every image is in the cache.
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


async def measure(provider: Any, tags: list[str], trials: int, conc: int) -> dict[str, Any]:
    cold = []
    for i, tag in enumerate(tags):
        t0 = time.perf_counter()
        await trial(provider, tag, i)
        cold.append(time.perf_counter() - t0)
    sem = asyncio.Semaphore(conc)

    async def one(k: int) -> None:
        async with sem:
            await trial(provider, tags[k % len(tags)], k % len(tags))

    t0 = time.perf_counter()
    await asyncio.gather(*(one(k) for k in range(trials)))
    return {"cold": cold, "rate": trials / (time.perf_counter() - t0)}


async def local_mode(layered: bool, tags: list[str], args: argparse.Namespace) -> dict[str, Any]:
    from crucible.sandboxes.local.provider import LocalProvider

    cache = Path("/tmp") / f"crucible-bench-layers-{secrets.token_hex(6)}"
    cache.mkdir(mode=0o711)
    os.environ["CRUCIBLE_ROOTFS_DIR"] = str(cache)
    provider = LocalProvider(image_tool="buildah")
    provider.images.store.layered = layered
    await provider.preflight()
    try:
        out = await measure(provider, tags, args.trials, args.concurrency)
    finally:
        await provider.aclose()
    out["disk"] = du(cache)
    flat = [d for d in cache.iterdir() if (d / "rootfs").is_dir()]
    out["one_image"] = du(flat[0] / "rootfs") if flat else None
    shutil.rmtree(cache, ignore_errors=True)
    return out


async def docker_mode(tags: list[str], args: argparse.Namespace) -> dict[str, Any]:
    from crucible.sandboxes.docker.provider import DockerProvider

    provider = DockerProvider()
    await provider.preflight()
    try:
        return await measure(provider, tags, args.trials, args.concurrency)
    finally:
        await provider.aclose()


def mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.0f} MB"


async def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-n", "--images", type=int, default=12)
    ap.add_argument("-t", "--trials", type=int, default=40, help="warm trials per mode")
    ap.add_argument("-c", "--concurrency", type=int, default=4)
    ap.add_argument("--no-docker", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="crucible-bench-layers-"))
    docker = not args.no_docker
    tags, t_buildah, t_docker = build_images(work, args.images, docker)
    try:
        results = {
            "local, layers": await local_mode(True, tags, args),
            "local, flat": await local_mode(False, tags, args),
        }
        if docker:
            results["docker"] = await docker_mode(tags, args)
    finally:
        remove_images(tags, docker)
        shutil.rmtree(work, ignore_errors=True)
    one = results["local, flat"]["one_image"]
    print(f"\n{args.images} images FROM {BASE}, one small layer each; {args.trials} warm "
          f"trials at -c {args.concurrency}; builds (not timed below): buildah "
          f"{t_buildah:.1f}s, docker {t_docker:.1f}s")  # fmt: skip
    print(f"{'mode':<15}{'cache disk':>12}{'x one image':>12}{'cold total':>12}"
          f"{'cold first':>12}{'cold max':>10}{'warm/s':>9}")  # fmt: skip
    for name, r in results.items():
        disk = r.get("disk")
        ratio = f"{disk / one:.2f}" if disk and one else "-"
        cold = r["cold"]
        print(f"{name:<15}{mb(disk):>12}{ratio:>12}{sum(cold):>11.1f}s{cold[0]:>11.1f}s"
              f"{max(cold[1:] or cold):>9.1f}s{r['rate']:>9.2f}")  # fmt: skip
    print(f"(one image as a flat tree: {mb(one)})")


if __name__ == "__main__":
    asyncio.run(main())
