"""Fixtures of the generation tests: a scripted setter and solver server each."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from crucible.generate.loop import GenConfig
from crucible.generate.setter import SetterSpec
from crucible.generate.solver import SolverSpec
from tests.helpers.fake_openai import FakeOpenAI


@pytest.fixture
def setter_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def solver_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def make_cfg(
    setter_server: FakeOpenAI, solver_server: FakeOpenAI, tmp_path: Path
) -> Callable[..., GenConfig]:
    def make(**kw: Any) -> GenConfig:
        base: dict[str, Any] = {
            "out": tmp_path / "gen",
            "setter": SetterSpec("gpt-4.1-mini", setter_server.url, None),
            "solver": SolverSpec(
                "terminal",
                {"model": "gpt-4.1-mini", "model_base_url": solver_server.url, "max_retries": 0},
            ),
            "categories": ["files"],
            "max_tasks": 1,
            "k": 2,
            "band": (0.2, 0.7),
            "jobs_dir": tmp_path / "jobs",
        }
        base.update(kw)
        return GenConfig(**base)

    return make
