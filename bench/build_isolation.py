"""What isolated local builds cost next to the old `buildah build --isolation chroot` as root.

    sudo python bench/build_isolation.py             # 3 builds per mode
    sudo python bench/build_isolation.py -n 5

Each build is of a new environment (a nonce in the RUN step, so no layer is cached): one
COPY and one RUN step on debian:bookworm-slim, what most task images add. Modes, in
alternating rounds so a busy machine slows all alike:
- chroot: the old way, `buildah build --isolation chroot` run by root, in the host's
  namespaces (no longer used by crucible);
- isolated: crucible's build (imagetools.Buildah.build): rootless as the build user, OCI
  isolation, its own network namespace without network, the result handed back to
  root's storage;
- isolated+net: the same with network (slirp4netns).
Prints the median and the range of each, in seconds, and what the first isolated build
paid once to hand the base image to the build user (when it had not been handed yet).
Needs root and scripts/setup-images.sh.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from crucible.sandboxes.local.imagetools import Buildah

DOCKERFILE = "FROM debian:bookworm-slim\nCOPY payload /opt/payload\nRUN : {nonce}; mkdir -p /app && cp -r /opt/payload /app/ && useradd -m runner\n"


def make_env(root: Path) -> Path:
    env = root / f"env-{secrets.token_hex(4)}"
    (env / "payload").mkdir(parents=True)
    for i in range(20):
        (env / "payload" / f"f{i}.txt").write_text(secrets.token_hex(512))
    (env / "Dockerfile").write_text(DOCKERFILE.format(nonce=secrets.token_hex(8)))
    return env


def chroot_build(buildah: str, env: Path, tag: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        [buildah, "build", "--pull-never", "--isolation", "chroot", "--layers", "-q", "-t", tag, str(env)],
        check=True, capture_output=True,
    )  # fmt: skip
    return time.perf_counter() - started


async def isolated_build(tool: Buildah, env: Path, tag: str, network: bool) -> float:
    started = time.perf_counter()
    await tool.build(env, tag, env.parent / f"{env.name}.log", 600, network)
    return time.perf_counter() - started


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, default=3, help="builds per mode")
    args = ap.parse_args()
    buildah = shutil.which("buildah")
    if buildah is None:
        raise SystemExit("no buildah: run scripts/setup-images.sh")
    tool = Buildah(buildah)
    times: dict[str, list[float]] = {"chroot": [], "isolated": [], "isolated+net": []}
    tags: list[str] = []
    with tempfile.TemporaryDirectory(prefix="crucible-bench-build-") as tmp:
        work = Path(tmp)
        first = await isolated_build(tool, make_env(work), "localhost/bench-iso:first", False)
        tags.append("localhost/bench-iso:first")
        for i in range(args.n):
            for mode in times:
                tag = f"localhost/bench-iso:{mode.replace('+', '-')}-{i}"
                tags.append(tag)
                env = make_env(work)
                if mode == "chroot":
                    times[mode].append(chroot_build(buildah, env, tag))
                else:
                    times[mode].append(await isolated_build(tool, env, tag, mode.endswith("net")))
    await asyncio.to_thread(subprocess.run, [buildah, "rmi", "-f", *tags], capture_output=True)
    base = statistics.median(times["chroot"])
    print(f"builds per mode: {args.n} (one COPY + one RUN on debian:bookworm-slim)")
    for mode, ts in times.items():
        med = statistics.median(ts)
        print(
            f"  {mode:13s} median {med:6.2f}s  range {min(ts):.2f}-{max(ts):.2f}s  x{med / base:.2f} of chroot"
        )
    print(f"  first isolated build (hands the base image over if not yet): {first:.2f}s")


if __name__ == "__main__":
    asyncio.run(main())
