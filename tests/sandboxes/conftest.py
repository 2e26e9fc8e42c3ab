"""Docker fixtures: a real engine, or a skip (locally) / a loud failure (in CI)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

BASE_IMAGE = "debian:bookworm-slim"
SETUP_HINT = "run scripts/setup-docker.sh (installs and starts dockerd, builds the base image)"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes", "on"}


def _engine_problem() -> str | None:
    try:
        import docker
        import docker.errors
    except ImportError:
        return "the docker SDK is not installed (pip install 'crucible[docker]')"
    try:
        client = docker.from_env(timeout=10)
    except docker.errors.DockerException as e:
        return f"no Docker engine answers: {e}"
    try:
        client.ping()
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        return f"the engine has no {BASE_IMAGE} image"
    except Exception as e:
        return f"no Docker engine answers: {e}"
    finally:
        client.close()
    return None


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """A Docker engine with the base image; tests needing one never skip in CI."""
    problem = _engine_problem()
    if problem is None:
        return
    if in_ci():
        pytest.fail(f"CI needs a Docker engine, and {problem}; {SETUP_HINT}", pytrace=False)
    pytest.skip(f"{problem}; {SETUP_HINT}")


@pytest.fixture
def docker_job_id() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def docker_provider(docker_engine: None, docker_job_id: str) -> AsyncIterator[Any]:
    """A preflighted DockerProvider; whatever the test's job leaves behind is removed."""
    from crucible.sandboxes.docker import DockerProvider

    provider = DockerProvider()
    await provider.preflight()
    try:
        yield provider
    finally:
        await provider.cleanup(docker_job_id)
        await provider.aclose()


@pytest.fixture
def docker_spec(docker_job_id: str) -> Any:
    """Make a SandboxSpec for this test's job (base image unless told otherwise)."""
    from crucible.sandboxes.base import SandboxSpec

    def make(**kw: Any) -> SandboxSpec:
        kw.setdefault("job_id", docker_job_id)
        kw.setdefault("trial_id", f"trial-{uuid.uuid4().hex[:8]}")
        kw.setdefault("task_name", "docker-test")
        if "dockerfile_dir" not in kw:
            kw.setdefault("image", BASE_IMAGE)
        return SandboxSpec(**kw)

    return make
