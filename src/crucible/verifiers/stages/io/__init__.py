"""The io stage: the reference and the submitted Modal program on the task's inputs (stage.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crucible.verifiers.stages.io.stage import IoSpec, IoStage

__all__ = ["IoSpec", "IoStage"]


def __getattr__(name: str) -> Any:
    # lazily: the io sandbox imports this package for its driver (driver.py), which must
    # start with as little as plain python; the stage's own imports are the host's
    if name in __all__:
        from crucible.verifiers.stages.io import stage

        return getattr(stage, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
