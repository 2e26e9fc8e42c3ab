"""Training runs written the way a recipe writes them (through RunHandle, the real writer),
without a trainer: two steps with a component, samples, a checkpoint.

    h = make_run(jobs_dir); fill(h)
"""

from __future__ import annotations

from pathlib import Path

from crucible.records.train import SampleRecord, StepMetrics, TrainRun
from crucible.train.run import RunHandle, new_run_id


def make_run(jobs: Path, *, steps: int = 2, cap: int = 2) -> RunHandle:
    rec = TrainRun(id=new_run_id(), recipe="trl-grpo", model="tiny", dataset="d.jsonl",
                   reward="rm", knobs={"trace_samples": cap}, total_steps=steps)  # fmt: skip
    return RunHandle.create(jobs, rec, trace_samples=cap)


def fill(h: RunHandle, component: str = "rhyme") -> None:
    """Steps 1 and 2 (rewards 0.25, 0.75; `component` the same), 3 samples offered a step,
    a checkpoint at step 2; the run completed."""
    h.start(2)
    for step, reward in ((1, 0.25), (2, 0.75)):
        h.add_step(StepMetrics(step=step, reward_mean=reward, components={component: reward},
                               n_samples=3, step_time_s=0.5))  # fmt: skip
        kept = h.add_samples([SampleRecord(step=step, index=i, prompt="p\x1b[2J", response=f"r{i}",
                                           reward=reward) for i in range(3)])  # fmt: skip
        assert kept == min(3, h.trace_samples)  # the cap is per step
    ckpt = h.checkpoints_dir / "checkpoint-2"
    ckpt.mkdir()
    h.add_checkpoint(2, ckpt)
    h.finish("completed")
