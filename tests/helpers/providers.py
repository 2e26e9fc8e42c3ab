"""A real provider per test, local and docker alike (docker marked, and never skipped in CI)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from crucible.sandboxes.base import Provider

BOTH = ["local", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture(params=BOTH)
def provider_env(request: pytest.FixtureRequest) -> str:
    """ "local" or "docker" (the engine there first), one test each: for tests that make
    their provider by name (tests/helpers/attack_tasks.attack_trial)."""
    if request.param == "docker":
        request.getfixturevalue("docker_engine")
    return str(request.param)


async def real_provider(request: pytest.FixtureRequest, *jobs: str) -> AsyncIterator[Provider]:
    """Yield the provider named by request.param; docker's `jobs` are cleaned up after."""
    if request.param == "local":
        from crucible.sandboxes.local.provider import LocalProvider

        yield LocalProvider()
        return
    request.getfixturevalue("docker_engine")
    from crucible.sandboxes.docker.provider import DockerProvider

    p = DockerProvider()
    await p.preflight()
    try:
        yield p
    finally:
        for job in jobs:
            await p.cleanup(job)
        await p.aclose()
