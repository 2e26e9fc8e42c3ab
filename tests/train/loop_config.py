"""A config whose recipe needs no trainer: it records a step, then waits for a cancel, so
the tests can watch a detached run from another process cheaply."""

import time
from pathlib import Path

from crucible.records.train import StepMetrics
from crucible.train import JSONLDataset, LaunchPlan, Recipe, TrainConfig


class LoopRecipe(Recipe):
    name = "loop"

    def plan(self, config):
        return LaunchPlan(recipe=self.name, trainer="none")

    def launch(self, config, run):
        run.add_step(StepMetrics(step=1, reward_mean=0.5, components={"c": 0.5}, n_samples=1))
        while not run.cancel_requested():
            time.sleep(0.05)  # timing-ok: the run's own loop polls for its cancel file


def rm(args, sample, **kw):
    return 0.0


config = TrainConfig(
    model="none",
    dataset=JSONLDataset(path=Path(__file__).parent / "tiny_prompts.jsonl"),
    recipe=LoopRecipe(),
    reward=rm,
    steps=3,
)
