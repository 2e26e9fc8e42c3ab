"""End to end: `crucible runs cancel` during a job's image builds leaves no build process
and no build container, and starts no further build; a forced exit (the job's process
killed outright) leaves no build process either. A real `crucible run` in another
process, on the local provider (Buildah) and on docker, with builds whose RUN step
blocks in a uniquely named process.

Before: a cancelled local job went on to start its other builds, a docker build went on
in the engine, and a killed job left `buildah build` and its step running."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
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
    remove_images,
    remove_working_containers,
    running,
    working_containers,
)
from tests.helpers.wait import wait_until
from typer.testing import CliRunner

from crucible.cli.main import app
from crucible.sandboxes.buildgate import START_STAMP
from crucible.sandboxes.docker.build import env_tag
from crucible.sandboxes.local import buildahbuild
from crucible.tasks.models import Task

pytestmark = pytest.mark.slow


@pytest.fixture
def env(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    request.getfixturevalue("buildah" if name == "local" else "docker_engine")
    return name


@pytest.fixture
def rootfs() -> Iterator[Path]:
    """Not under pytest's 0700 folders: the sandboxes' uid must search its way in."""
    d = Path("/tmp") / f"crucible-test-rootfs-{uuid.uuid4().hex[:12]}"
    d.mkdir(mode=0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


class BuildJob:
    """Two tasks whose builds block, run with --max-builds 1: the first builds, the
    second waits for its turn."""

    def __init__(self, tmp_path: Path, env: str, rootfs: Path) -> None:
        self.jobs_dir, self.name = tmp_path / "jobs", f"builds-{uuid.uuid4().hex[:8]}"
        self.steps = [blocking_step(f"e2e{i}") for i in range(2)]
        self.tasks: list[Task] = [
            image_task(tmp_path / "tasks" / f"t{i}", step) for i, (step, _) in enumerate(self.steps)
        ]
        self.before = working_containers() if env == "local" else set()
        self.env = env
        argv = [sys.executable, "-m", "crucible.cli.main", "run", tmp_path / "tasks",
                "--agent", "nop", "--env", env, "-c", 2, "--max-builds", 1,
                "--jobs-dir", self.jobs_dir, "--job-name", self.name, "--json"]  # fmt: skip
        self.proc = subprocess.Popen(
            [str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "CRUCIBLE_ROOTFS_DIR": str(rootfs)},
        )  # fmt: skip

    def wait_for_a_step(self) -> str:
        """The name of the blocking step that runs (the other build waits its turn)."""

        def one() -> str | None:
            assert self.proc.poll() is None, self.proc.communicate()
            return next((name for _, name in self.steps if running(name)), None)

        return wait_until(one, "a build's blocking step to run", 600)

    def build_processes(self) -> list[int]:
        """Processes of this job's builds: a step, or `buildah build` of one of its tags."""
        tags = [env_tag(t.environment_digest or "").encode() for t in self.tasks]
        found = [pid for _, name in self.steps for pid in running(name)]
        for d in Path("/proc").iterdir():
            try:
                cmd = (d / "cmdline").read_bytes() if d.name.isdigit() else b""
            except OSError:
                continue
            if any(tag in cmd for tag in tags) and b"build" in cmd:
                found.append(int(d.name))
        return found

    def build_containers(self) -> list[str]:
        if self.env == "docker":
            return [c for _, name in self.steps for c in docker_build_containers(name)]
        new = working_containers() - self.before
        return [c for t in self.tasks for c in made_by(t, new)]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()
        for _, name in self.steps:
            kill_all(name)
        if self.env == "local":  # what a killed job left: this test's own containers
            remove_working_containers(self.build_containers())
        remove_images(self.tasks)


@pytest.fixture
def job(tmp_path: Path, env: str, rootfs: Path) -> Iterator[BuildJob]:
    j = BuildJob(tmp_path, env, rootfs)
    try:
        yield j
    finally:
        j.close()


@pytest.mark.parametrize("env", ["local", "docker"], indirect=True)
def test_runs_cancel_during_builds_leaves_no_build_process_or_container(job: BuildJob) -> None:
    started = job.wait_for_a_step()
    res = CliRunner().invoke(app, ["runs", "cancel", job.name, "--jobs-dir", str(job.jobs_dir),
                                   "--wait", "300", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["stopped"] is True and rep["status"] == "cancelled", rep
    assert job.proc.wait(timeout=120) == 130
    wait_until(lambda: not job.build_processes(), "the job's build processes to be gone", 60)
    assert job.build_containers() == []
    logs = sorted((job.jobs_dir / job.name / "builds").glob("*.log"))
    starts = [p for p in logs if START_STAMP in p.read_text(errors="replace")]
    assert len(starts) == 1, f"a build started after the cancel: {starts}"
    other = next(name for _, name in job.steps if name != started)
    assert not running(other)


@pytest.mark.parametrize("env", ["local", "docker"], indirect=True)
def test_a_killed_job_leaves_no_build_process(job: BuildJob) -> None:
    """kill -9 of the job's process, as a forced exit (a second Ctrl-C) leaves it: nothing
    of crucible runs to stop the build, and still none of it outlives the job."""
    job.wait_for_a_step()
    job.proc.send_signal(signal.SIGKILL)
    job.proc.wait(timeout=60)
    wait_until(lambda: not job.build_processes(), "the killed job's build processes to go", 120)
    if job.env == "local":
        # Its killed Buildah left its working container; `sandboxes cleanup` removes it
        # (its mark is no longer held), and only what dead builds left.
        assert job.build_containers() != []
        assert asyncio.run(buildahbuild.sweep()) >= 1
        assert job.build_containers() == []
