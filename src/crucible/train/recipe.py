"""The recipe interface: how a TrainConfig becomes a training run on an existing trainer.

A recipe has two halves. `plan(config)` says, without starting anything, what a launch
would do: the trainer, its image, the GPUs (type and count), the volumes, the command, the
names (never the values) of the environment variables it passes, the estimated cost per
hour; `crucible train launch CONFIG --dry-run` prints it. `launch(config, run)` runs the
training to its end in the calling process (the launcher's worker, detached or not),
recording steps, samples, checkpoints and log lines through `run` (train/run.py RunHandle)
and returning when the trainer stops; it checks `run.cancel_requested()` between steps.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from crucible.train.run import RunHandle

# config.py holds recipes (TrainConfig.recipe), so a recipe names the config's type only
# in words: `config` is a crucible.train.config.TrainConfig.
TrainConfig = Any


class GPUSpec(BaseModel):
    type: str  # "cpu" for none; else the provider's name (H100, A100-80GB, ...)
    count: int = 1


class VolumeSpec(BaseModel):
    name: str
    mount: str
    purpose: str = ""  # checkpoints, the Hugging Face cache, ...


class LaunchPlan(BaseModel):
    """What a launch would do: printed by `--dry-run`, recorded beside the run."""

    schema_version: int = 1
    recipe: str
    trainer: str  # the trainer package and its version: "trl 1.16.0", "slime", ...
    where: str = "local"  # local | modal
    image: str | None = None  # the image it runs in (None: this process's environment)
    gpus: GPUSpec = Field(default_factory=lambda: GPUSpec(type="cpu", count=0))
    volumes: list[VolumeSpec] = Field(default_factory=list)
    command: list[str] = Field(default_factory=list)
    env: list[str] = Field(default_factory=list)  # names only: values never leave the host
    cost_per_hour_usd: float | None = None  # at the provider's list prices; None: local
    knobs: dict[str, Any] = Field(default_factory=dict)  # as the trainer will get them
    notes: list[str] = Field(default_factory=list)


class Recipe(ABC):
    """One way to train: a trainer, where it runs, and how the config's knobs map to it."""

    name: ClassVar[str] = "recipe"

    @abstractmethod
    def plan(self, config: TrainConfig) -> LaunchPlan:
        """What `launch` would do with `config`, starting nothing."""

    @abstractmethod
    def launch(self, config: TrainConfig, run: RunHandle) -> None:
        """Train to the end, recording through `run`; raise on failure (the run is then
        marked failed with the error). Return normally when done or cancelled."""

    def describe(self) -> str:
        return self.name
