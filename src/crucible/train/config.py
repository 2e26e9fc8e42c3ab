"""TrainConfig: a training run in a few lines of Python, and its `.launch()` and `.wait()`.

    from crucible.train import TrainConfig, JSONLDataset, TRLGRPORecipe
    config = TrainConfig(model="Qwen/Qwen3-0.6B", dataset=JSONLDataset(path="p.jsonl"),
                         recipe=TRLGRPORecipe(), reward=rm, steps=20, samples_per_prompt=8)

A config file is a plain Python module that defines `config` (load_config reads it); the
CLI's `crucible train launch|smoke FILE` and `config.launch()` share one path
(`launch` below). The knobs are the usual ones; each recipe maps them to its trainer
and says how in its plan (`--dry-run`). `model` is a local folder, a hub id (where the
hub is reachable) or `tiny` (random weights and a tokenizer trained on the dataset: what
`train smoke` uses).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr

from crucible.records.train import TERMINAL_STATES, TrainRun
from crucible.store.procs import pid_alive
from crucible.store.train_runs import read_run
from crucible.train.dataset import Dataset
from crucible.train.recipe import Recipe
from crucible.train.reward import RewardFn, reward_name
from crucible.train.run import RunHandle, new_run_id

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
        run_id = launch(self, detach=detach, jobs_dir=jobs_dir)
        self._last_run = run_id
        return run_id

    def wait(self, run_id: str | None = None, *, timeout_s: float | None = None) -> TrainRun:
        """Block until the run (default: this config's last launch) ends; its record."""
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


# -- launching ------------------------------------------------------------------------
# `launch` writes the run's record (state pending) and either runs the recipe in this
# process or starts `python -m crucible.train.worker RUN_DIR` in a session of its own (so it
# outlives the launcher and a Ctrl-C in the launcher's terminal), which loads the config
# module again from `source`. Either way the recipe runs through `run_recipe`, which marks
# the run running, then completed, cancelled (cancel.request or SIGINT) or failed (with the
# error). A smoke run is the same with `smoke_config`: one step on the tiny local model.

WORKER_OUT = "worker.out"  # the detached worker's stdout and stderr
SMOKE_MAX_RESPONSE = 24  # tokens: enough to see the shape of an answer


def smoke_config(config: TrainConfig) -> TrainConfig:
    """One step on a tiny random model with a tokenizer trained on the dataset's text."""
    return config.model_copy(update={
        "model": TINY_MODEL, "steps": 1, "batch_size": min(config.batch_size, 2),
        "samples_per_prompt": min(config.samples_per_prompt, 4),
        "max_response_length": min(config.max_response_length, SMOKE_MAX_RESPONSE),
        "save_interval": None, "eval_interval": None,
        "trace_samples": max(config.trace_samples, 8),
    })  # fmt: skip


def create_run(config: TrainConfig, jobs_dir: Path, *, smoke: bool = False) -> RunHandle:
    rec = TrainRun(id=new_run_id(), recipe=config.recipe.name, model=config.model,
                   dataset=config.dataset.describe(), reward=config.reward_label(),
                   knobs=config.knobs(), source=str(config.source) if config.source else None,
                   smoke=smoke, total_steps=config.steps)  # fmt: skip
    return RunHandle.create(jobs_dir, rec, trace_samples=config.trace_samples)


def run_recipe(config: TrainConfig, handle: RunHandle) -> TrainRun:
    """Run the recipe to its end in this process; the run's final record."""
    handle.start(config.steps)
    try:
        config.recipe.launch(config, handle)
    except KeyboardInterrupt:
        handle.finish("cancelled")
    except BaseException as exc:
        handle.finish("failed", "".join(traceback.format_exception(exc)))
        if not isinstance(exc, Exception):
            raise
    else:
        handle.finish("cancelled" if handle.cancel_requested() else "completed")
    return handle.record


def launch(config: TrainConfig, *, detach: bool | None = None, jobs_dir: Path | None = None,
           smoke: bool = False) -> str:  # fmt: skip
    """Start a run of `config`; its id. Detached by default when the config has a source."""
    if detach is None:
        detach = config.source is not None
    if detach and config.source is None:
        raise ValueError("a detached run loads its config again: launch it from a config "
                         "file (`crucible train launch FILE`), or pass detach=False")  # fmt: skip
    root = jobs_dir_of(config, jobs_dir)
    run_cfg = smoke_config(config) if smoke else config
    handle = create_run(run_cfg, root, smoke=smoke)
    if not detach:
        run_recipe(run_cfg, handle)
        return handle.id
    with (handle.folder / WORKER_OUT).open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "crucible.train.worker", str(handle.folder.resolve())],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env=_worker_env(), cwd=os.getcwd(),
        )  # fmt: skip
    handle.record.pid = proc.pid  # until the worker records its own (the same process)
    handle.save()
    handle.log(f"worker started: pid {proc.pid}")
    return handle.id


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    # the worker imports crucible as this process did (a checkout's src/ on sys.path)
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
    return env


def wait(run_id: str, *, jobs_dir: Path, timeout_s: float | None = None,
         poll_s: float = 0.5) -> TrainRun:  # fmt: skip
    """Block until the run ends (or its process is gone); its record. TimeoutError after
    `timeout_s`."""
    folder = jobs_dir / run_id
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        rec = read_run(folder)
        if rec.state in TERMINAL_STATES:
            return rec
        if rec.state in ("pending", "running") and rec.pid and not pid_alive(rec.pid):
            return rec.model_copy(update={"state": "failed",
                                          "error": "its process is gone (killed or crashed)"})  # fmt: skip
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"run {run_id} still {rec.state} after {timeout_s}s")
        time.sleep(poll_s)
