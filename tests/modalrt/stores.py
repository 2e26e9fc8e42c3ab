"""Reading the runtime's stores from the test process, as a later program would."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crucible.modalrt import context
from crucible.modalrt.sdk.stores import Dict, Queue


@contextlib.contextmanager
def runtime(state: Path, **settings: Any) -> Iterator[None]:
    """The runtime's settings in this process, as a program's process has them."""
    cfg = context.RuntimeConfig(
        program="-", module="-", state_dir=str(state), run_dir=str(state), **settings
    )
    old = os.environ.get(context.ENV_VAR)
    os.environ[context.ENV_VAR] = cfg.model_dump_json()
    context.config.cache_clear()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(context.ENV_VAR, None)
        else:
            os.environ[context.ENV_VAR] = old
        context.config.cache_clear()


def queue_items(state: Path, name: str) -> list[Any]:
    """Everything in Queue `name` of the runtime state at `state`."""
    with runtime(state):
        return list(Queue.from_name(name).get_many(1000, block=False))


def dict_value(state: Path, name: str, key: Any) -> Any:
    with runtime(state):
        return Dict.from_name(name)[key]
