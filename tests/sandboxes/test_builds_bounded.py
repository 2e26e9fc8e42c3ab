"""Image builds are bounded, cancellable and clean (sandboxes/buildgate.py,
local/buildahbuild.py): a job runs at most `--max-builds` at once on every provider, a
closed gate stops running builds and starts none, and a build that fails or is stopped
leaves none of its working containers in Buildah's store.

Before: the docker provider started every build of a job at once; a failed Buildah
build left its working container in the store (9 seen), and one that was killed too."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.build_jobs import (
    blocking_step,
    docker_build_containers,
    image_task,
    kill_all,
    made_by,
    max_overlap,
    remove_images,
    running,
    working_containers,
)
from tests.helpers.wait import await_until

from crucible.agents.nop import NopAgent
from crucible.engine.job import JobOptions, JobRunner
from crucible.engine.plan import make_job_config
from crucible.engine.spec import TrialPlan, build_spec
from crucible.errors import Cancelled, TaskInvalid
from crucible.sandboxes.base import Provider
from crucible.sandboxes.buildgate import BuildGate
from crucible.sandboxes.local.images import ImageStore, RootfsCache
from crucible.tasks.models import Task

pytestmark = pytest.mark.slow

MADE: list[Task] = []


@pytest.fixture(scope="module", autouse=True)
def _remove_images() -> Iterator[None]:
    yield
    remove_images(MADE)


def _task(root: Path, steps: str) -> Task:
    task = image_task(root, steps)
    MADE.append(task)
    return task


def _store(tmp_path: Path) -> ImageStore:
    store = ImageStore(RootfsCache(tmp_path / "rootfs"), "buildah")
    store.log_dir = tmp_path / "job"
    return store


def _spec(task: Task) -> object:
    plan = TrialPlan(task=task, attempt=0, job_id="builds")
    return build_spec(plan, NopAgent(), {})


async def test_a_failed_build_leaves_no_working_container(buildah: None, tmp_path: Path) -> None:
    task = _task(tmp_path / "t", "RUN echo made-a-layer\nRUN false")
    store = _store(tmp_path)
    before = working_containers()
    try:
        with pytest.raises(TaskInvalid, match="buildah exited"):
            await store.resolve(_spec(task))  # type: ignore[arg-type]
    finally:
        store.close()
    assert "made-a-layer" in "".join(p.read_text() for p in (tmp_path / "job").rglob("*.log"))
    assert made_by(task, working_containers() - before) == []


async def test_a_stopped_build_is_killed_and_leaves_no_working_container(
    buildah: None, tmp_path: Path
) -> None:
    """Closing the gate (what a cancelled job does) kills the RUN step that blocks, and
    the working container the killed Buildah could not remove is removed for it."""
    step, name = blocking_step("gate")
    task = _task(tmp_path / "t", step)
    store = _store(tmp_path)
    gate = BuildGate(1)
    store.gate = lambda: gate
    before = working_containers()
    try:
        build = asyncio.ensure_future(store.resolve(_spec(task)))  # type: ignore[arg-type]
        await await_until(lambda: running(name) or build.done(), f"the step {name} to run", 600)
        assert not build.done(), build.exception()
        gate.close()
        with pytest.raises(Cancelled, match="was stopped"):
            await build
        with pytest.raises(Cancelled, match="did not start"):  # and none starts now
            await store.resolve(_spec(_task(tmp_path / "t2", "RUN true")))  # type: ignore[arg-type]
        await await_until(lambda: not running(name), f"the step {name} to be gone", 60)
        assert made_by(task, working_containers() - before) == []
    finally:
        store.close()
        kill_all(name)


def _provider(env: str) -> Provider:
    if env == "docker":
        from crucible.sandboxes.docker.provider import DockerProvider

        return DockerProvider()
    from crucible.sandboxes.local.provider import LocalProvider

    return LocalProvider(image_tool="buildah")


@pytest.mark.parametrize("env", ["local", "docker"])
async def test_a_job_never_runs_more_builds_at_once_than_its_limit(
    env: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three distinct Dockerfiles, --max-builds 1: the builds' logs show them one after
    another (each log's start and end stamps), at -c 3."""
    request.getfixturevalue("buildah" if env == "local" else "docker_engine")
    # Not under pytest's 0700 folders: the sandboxes' uid searches its way to the trees.
    rootfs = Path("/tmp") / f"crucible-test-rootfs-{uuid.uuid4().hex[:12]}"
    rootfs.mkdir(mode=0o711)
    monkeypatch.setenv("CRUCIBLE_ROOTFS_DIR", str(rootfs))
    tasks = [_task(tmp_path / "tasks" / f"t{i}", f"RUN echo step-{i}") for i in range(3)]
    job_id = f"builds-{uuid.uuid4().hex[:8]}"
    cfg = make_job_config(job_id=job_id, tasks=tasks, agent="nop", env=env, attempts=1,
                          concurrency=3, dataset=[str(tmp_path / "tasks")])  # fmt: skip
    provider = _provider(env)
    await provider.preflight()
    try:
        runner = JobRunner(cfg, tasks, provider, NopAgent(), tmp_path / "jobs",
                           JobOptions(max_builds=1))  # fmt: skip
        summary = await runner.run()
    finally:
        await provider.cleanup(job_id)
        await provider.aclose()
        shutil.rmtree(rootfs, ignore_errors=True)
    assert summary.outcomes == {"graded": 3}, summary.outcomes
    logs = sorted((tmp_path / "jobs" / job_id / "builds").glob("*.log"))
    assert len(logs) == 3, logs
    assert max_overlap(logs) == 1
    assert provider.build_gate.limit == 1 and provider.build_gate.peak == 1


@pytest.mark.parametrize("env", ["docker"])
async def test_a_stopped_docker_build_leaves_no_step_and_no_container(
    env: str, docker_engine: None, tmp_path: Path
) -> None:
    """The engine's build, cancelled through its API (the stream cut), kills and removes
    its step's container."""
    from crucible.sandboxes.docker.provider import DockerProvider

    step, name = blocking_step("docker")
    task = _task(tmp_path / "t", step)
    provider = DockerProvider()
    await provider.preflight()
    gate = provider.build_gate = BuildGate(1)
    try:
        build = asyncio.ensure_future(provider.prepare([_spec(task)]))  # type: ignore[list-item]
        await await_until(lambda: running(name) or build.done(), f"the step {name} to run", 600)
        assert not build.done()
        gate.close()
        await build  # prepare() leaves the failure to create()
        await await_until(lambda: not running(name), f"the step {name} to be gone", 60)
        await await_until(
            lambda: not docker_build_containers(name), "the step's container to go", 60
        )
    finally:
        await provider.aclose()
        kill_all(name)


async def test_a_forged_mark_never_makes_the_sweep_remove_a_live_builds_stage(
    buildah: None, tmp_path: Path
) -> None:
    """The build user writes its containers' records: one that names a mark in a live
    build's stage (where no such file is) gets its own container removed, never root's
    stage. Before, a missing mark counted as a dead build, and root removed the stage."""
    from crucible.sandboxes.local import buildahbuild, builduser

    user = builduser.find_user()
    if user is None:
        pytest.skip("run as a user: the sweep removes no stage")
    stage = builduser.Stage(user)  # a live build's, as root makes it
    (stage.root / "context").mkdir()
    forged = stage.root / f"{buildahbuild.MARK_PREFIX}{uuid.uuid4().hex[:16]}"
    try:
        rc, out = await builduser.as_user(
            user, "buildah", "--default-mounts-file", str(forged), "from", "--pull-never",
            "--quiet", "localhost/debian:bookworm-slim",
        )  # fmt: skip
        assert rc == 0, out
        rc, cid = await builduser.as_user(
            user, "buildah", "inspect", "--type", "container", "--format", "{{.ContainerID}}",
            out.split()[-1],
        )  # fmt: skip
        assert rc == 0 and cid.strip() in working_containers(), cid
        await buildahbuild.sweep()
        assert (stage.root / "context").is_dir(), "the sweep removed a live build's stage"
        assert cid.strip() not in working_containers()  # only the user's own record went
    finally:
        stage.close()
