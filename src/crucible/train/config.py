"""TrainConfig: a training run in a few lines of Python, and its `.launch()` and `.wait()`.

    from crucible.train import TrainConfig, JSONLDataset, TRLGRPORecipe
    config = TrainConfig(model="Qwen/Qwen3-0.6B", dataset=JSONLDataset(path="p.jsonl"),
                         recipe=TRLGRPORecipe(), reward=rm, steps=20, samples_per_prompt=8)

A config file is a plain Python module that defines `config` (load_config reads it); the
CLI's `crucible train launch|smoke FILE` and `config.launch()` share one path
(train/launcher.py). The knobs are the usual ones; each recipe maps them to its trainer
and says how in its plan (`--dry-run`). `model` is a local folder, a hub id (where the
hub is reachable) or `tiny` (random weights and a tokenizer trained on the dataset: what
`train smoke` uses).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr

from crucible.train.dataset import Dataset
from crucible.train.recipe import Recipe
from crucible.train.reward import RewardFn, reward_name

if TYPE_CHECKING:
    from crucible.records.train import TrainRun

TINY_MODEL = "tiny"

# The knobs: what a recipe maps to its trainer, recorded in run.json as run.
KNOBS = ("steps", "batch_size", "samples_per_prompt", "max_response_length", "temperature",
         "learning_rate", "save_interval", "eval_interval", "trace_samples", "image_overlay",
         "chat_template_kwargs", "seed", "reward_args")  # fmt: skip


class TrainConfig(BaseModel):
    """One training run: the model, the prompts, the recipe, the reward, and the knobs."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid",
                              populate_by_name=True, protected_namespaces=())  # fmt: skip

    model: str
    dataset: Dataset
    recipe: Recipe
    reward: RewardFn | list[RewardFn]
    name: str | None = None
    # rollout steps: each samples `batch_size` prompts x `samples_per_prompt` responses,
    # scores them and takes one optimizer step
    steps: int = Field(10, ge=1, validation_alias=AliasChoices("steps", "rollouts"))
    batch_size: int = Field(4, ge=1)  # prompts per step
    samples_per_prompt: int = Field(4, ge=2)  # GRPO needs a group to compare within
    max_response_length: int = Field(256, ge=1)  # tokens
    temperature: float = Field(1.0, gt=0)
    learning_rate: float = Field(1e-6, gt=0)
    save_interval: int | None = Field(None, ge=1)  # steps between checkpoints (None: at the end)
    eval_interval: int | None = Field(None, ge=1)
    trace_samples: int = Field(16, ge=0)  # sampled responses recorded per step, at most
    image_overlay: list[str] = Field(default_factory=list)  # the reward's own pip packages
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)  # enable_thinking, ...
    seed: int = 0
    reward_args: dict[str, Any] = Field(default_factory=dict)  # `args` of the reward function
    jobs_dir: Path | None = None  # where the run's folder goes (default: the jobs dir)
    source: Path | None = None  # the module this config came from (set by load_config)
    _last_run: str | None = PrivateAttr(default=None)

    def rewards(self) -> list[RewardFn]:
        return list(self.reward) if isinstance(self.reward, list) else [self.reward]

    def knobs(self) -> dict[str, Any]:
        return self.model_dump(include=set(KNOBS), mode="json")

    def reward_label(self) -> str:
        return "+".join(reward_name(f) for f in self.rewards())

    def launch(self, *, detach: bool | None = None, jobs_dir: Path | None = None) -> str:
        """Start the run; return its id. Detached (its own process, which outlives this
        one) when the config came from a file (`source`), else in this process, returning
        when it ends. `crucible runs get ID` follows it from any shell."""
        from crucible.train.launcher import launch

        run_id = launch(self, detach=detach, jobs_dir=jobs_dir)
        self._last_run = run_id
        return run_id

    def wait(self, run_id: str | None = None, *, timeout_s: float | None = None) -> TrainRun:
        """Block until the run (default: this config's last launch) ends; its record."""
        from crucible.train.launcher import wait

        rid = run_id or self._last_run
        if rid is None:
            raise ValueError("nothing to wait for: launch() first, or pass a run id")
        return wait(rid, jobs_dir=jobs_dir_of(self, None), timeout_s=timeout_s)


def jobs_dir_of(config: TrainConfig, override: Path | None) -> Path:
    from crucible.store.layout import default_jobs_dir

    return override or config.jobs_dir or default_jobs_dir()


def load_config(path: Path) -> TrainConfig:
    """The `config` a config module defines (a plain Python file)."""
    import importlib.util
    import sys

    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no config file {path}")
    mod_name = f"crucible_train_config_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses and pickling look their module up
    sys.path.insert(0, str(path.parent))  # the config's own helpers (reward.py beside it)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    config = getattr(module, "config", None)
    if not isinstance(config, TrainConfig):
        raise ValueError(f"{path} defines no `config = TrainConfig(...)`")
    config.source = path
    return config
