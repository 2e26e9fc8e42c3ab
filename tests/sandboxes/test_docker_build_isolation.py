"""The double-chroot build attack (build_attack.py) against the Docker engine's builder:
the docker provider's builds (task images and compose services go through one
ImageCache) and the local provider's Docker fallback. The engine runs each RUN step in a
container of its own (pid, mount and network namespaces, a pivot_root'd root), so the
step that breaks out of its chroot lands in that container, never on the host."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.sandboxes.build_attack import (
    NOTHING_REACHED,
    HostBait,
    attack_results,
    host_bait,
    hostile_env,
)

from crucible.sandboxes.base import NetworkMode, SandboxSpec
from crucible.sandboxes.docker.build import ImageCache, env_tag
from crucible.sandboxes.local.images import ImageStore, RootfsCache
from crucible.tasks.loader import tree_digest

pytestmark = pytest.mark.docker


MADE: list[str] = []  # tags this module built: removed at its end


@pytest.fixture
def api(docker_engine: None) -> Iterator[Any]:
    import docker

    client = docker.APIClient(version="auto", timeout=120)
    yield client
    for ref in MADE:
        try:
            client.remove_image(ref, force=True)
        except docker.errors.DockerException:
            pass
    MADE.clear()
    client.close()


@pytest.fixture
def bait(tmp_path: Path) -> Iterator[HostBait]:
    with host_bait(tmp_path / "host") as b:
        yield b


def _read(api: Any, image: str, path: str) -> str:
    """A file of the built image, read by a container of it that never runs the task."""
    cid = api.create_container(image, command=["cat", path], network_disabled=True)["Id"]
    try:
        api.start(cid)
        api.wait(cid, timeout=60)
        return api.logs(cid, stdout=True, stderr=False).decode(errors="replace")
    finally:
        api.remove_container(cid, force=True)


def _assert_nothing_reached(bait: HostBait, report: str, stored: str) -> None:
    assert attack_results(report) == NOTHING_REACHED, report
    assert not bait.marker.exists(), "a RUN step wrote a file on the host"
    assert bait.secret_text not in stored, "a RUN step read the host's file into the image"
    assert bait.victim.poll() is None, "a RUN step killed a host process"
    assert bait.connections() == 0, "a RUN step reached the host's 127.0.0.1"


@pytest.mark.parametrize("network", ["none", "public"])
async def test_docker_provider_build_never_reaches_the_host(
    api: Any, tmp_path: Path, bait: HostBait, network: NetworkMode
) -> None:
    async def run(fn: Any, *args: Any, **kw: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kw)

    env = hostile_env(tmp_path / "task", bait)
    cache = ImageCache(api, run)
    tag = await cache.resolve(SandboxSpec(task_name="hostile", dockerfile_dir=env, network=network))
    MADE.append(tag)
    assert cache.builds_run == 1
    _assert_nothing_reached(
        bait, _read(api, tag, "/attack-report.txt"), _read(api, tag, "/leaked.txt")
    )


async def test_local_docker_fallback_build_never_reaches_the_host(
    api: Any, tmp_path: Path, bait: HostBait
) -> None:
    env = hostile_env(tmp_path / "task", bait)
    store = ImageStore(RootfsCache(tmp_path / "rootfs"), "docker")
    store.log_dir = tmp_path / "job"
    try:
        rootfs = await store.resolve(SandboxSpec(task_name="hostile", dockerfile_dir=env))
    finally:
        store.close()
    MADE.append(env_tag(tree_digest(env)))
    log = "".join(p.read_text(errors="replace") for p in (tmp_path / "job").rglob("*.log"))
    assert store.builds_run == 1
    leaked = rootfs.stack.find("leaked.txt")
    assert leaked is not None
    stored = leaked.read_text() + log
    _assert_nothing_reached(bait, log, stored)
    shutil.rmtree(tmp_path / "rootfs", ignore_errors=True)
