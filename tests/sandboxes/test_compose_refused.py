"""Providers without compose sidecars refuse a compose spec themselves: whatever way a
compose task reaches them (tasks check --run, the reward service), it is never run as its
main container alone. (The launch refuses it first: tests/tasks/harbor/test_compose.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.sandboxes.modal_fixtures import make, spec

from crucible.errors import ResourcesUnavailable
from crucible.sandboxes.local.provider import LocalProvider

COMPOSE = Path(__file__).parents[1] / "tasks/harbor/tasks/compose/environment/docker-compose.yaml"


async def test_local_and_modal_refuse_a_compose_spec(standin: tuple[Any, Any]) -> None:
    modal = await make(standin)
    for provider in (LocalProvider(), modal):
        with pytest.raises(ResourcesUnavailable) as info:
            await provider.create(spec(compose_file=COMPOSE))
        assert info.value.message == (
            "compose environments (docker-compose.yaml) are not supported on this provider "
            f"({provider.name!r})"
        )
        assert info.value.hint == "run the task with --env docker"
    _, world = standin
    assert not world.called("Sandbox.create")
