"""What TRLGRPORecipe records of a step, as TRL runs it: the rewards (Scorer, its one
reward function) and the step's time and logs (Recorder, a TrainerCallback).

The Scorer is called by GRPOTrainer once per generation batch with the completions and
the `crucible_row` column; it scores each completion with every reward function of the
config (slime's signature, train/reward.py), records up to `trace_samples` of them with
their rewards, and leaves the step's rewards on the StepBoard. The Recorder writes the
step's StepMetrics when the trainer logs it (logging_steps=1), or at the end for a step
that was never logged, and asks the trainer to stop once the run's cancel.request is
there. A reward function that raises fails the run: a broken reward must not train.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from crucible.records.train import SampleRecord, StepMetrics
from crucible.train.reward import Sample, as_args, reward_name, score

if TYPE_CHECKING:
    from crucible.train.config import TrainConfig
    from crucible.train.dataset import Row
    from crucible.train.run import RunHandle

# TRL's log keys kept as a step's extra metrics (the rest are its reward copies)
EXTRA_KEYS = ("loss", "kl", "entropy", "grad_norm", "learning_rate",
              "completions/mean_length", "clip_ratio/region_mean")  # fmt: skip


@dataclass
class _Step:
    totals: list[float] = field(default_factory=list)
    components: dict[str, list[float]] = field(default_factory=dict)
    started: float | None = None
    seconds: float | None = None


class StepBoard:
    """Each step's rewards and time until the Recorder writes them (thread-safe)."""

    def __init__(self) -> None:
        self._steps: dict[int, _Step] = {}
        self._lock = threading.Lock()

    def get(self, step: int) -> _Step:
        with self._lock:
            return self._steps.setdefault(step, _Step())

    def pop(self, step: int) -> _Step | None:
        with self._lock:
            return self._steps.pop(step, None)

    def pending(self) -> list[int]:
        with self._lock:
            return sorted(self._steps)


def completion_text(completion: Any) -> str:
    from crucible.trainers.trl import completion_text as text

    return text(completion)


class Scorer:
    """The TRL reward function of a run: the config's rewards, summed, and recorded."""

    __name__ = "crucible_train"  # TRL's metric: rewards/crucible_train/mean

    def __init__(self, config: TrainConfig, rows: list[Row], run: RunHandle,
                 board: StepBoard) -> None:  # fmt: skip
        self.fns = config.rewards()
        self.args = as_args(config.reward_args)
        self.rows, self.run, self.board = rows, run, board

    def __call__(self, prompts: list[Any], completions: list[Any], crucible_row: list[int],
                 trainer_state: Any = None, **kw: Any) -> list[float]:  # fmt: skip
        step = (getattr(trainer_state, "global_step", 0) or 0) + 1
        samples = []
        for i, (completion, row_i) in enumerate(zip(completions, crucible_row, strict=True)):
            row = self.rows[int(row_i)]
            samples.append(Sample(prompt=row.text, response=completion_text(completion),
                                  label=row.label, metadata=dict(row.metadata),
                                  messages=row.prompt, index=i, step=step))  # fmt: skip
        scored = asyncio.run(self._score_all(samples))
        rec = self.board.get(step)
        records = []
        for s, (total, comps) in zip(samples, scored, strict=True):
            rec.totals.append(total)
            for k, v in comps.items():
                rec.components.setdefault(k, []).append(v)
            records.append(SampleRecord(step=step, index=s.index, prompt=s.prompt,
                                        response=s.response, reward=total, components=comps,
                                        label=s.label if _plain(s.label) else str(s.label)))  # fmt: skip
        self.run.add_samples(records)
        return [t for t, _ in scored]

    async def _score_all(self, samples: list[Sample]) -> list[tuple[float, dict[str, float]]]:
        return list(await asyncio.gather(*(self._score_one(s) for s in samples)))

    async def _score_one(self, sample: Sample) -> tuple[float, dict[str, float]]:
        if len(self.fns) == 1:
            return await score(self.fns[0], self.args, sample)
        total, comps = 0.0, {}
        for fn in self.fns:  # several: each one's total is a component, and so are its parts
            t, parts = await score(fn, self.args, sample)
            name = reward_name(fn)
            total += t
            comps[name] = t
            comps.update({f"{name}.{k}": v for k, v in parts.items()})
        return total, comps


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool | list | dict)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


class Recorder(TrainerCallback):  # type: ignore[misc]
    """Times each step, writes its metrics into the run, stops the trainer on a cancel,
    and lists each checkpoint the trainer saves."""

    def __init__(self, run: RunHandle, board: StepBoard) -> None:
        self.run, self.board = run, board

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.board.get(state.global_step + 1).started = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        rec = self.board.get(state.global_step)
        if rec.started is not None:
            rec.seconds = time.perf_counter() - rec.started
        if self.run.cancel_requested():
            self.run.log("cancel requested: stopping after this step")
            control.should_training_stop = True

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kw: Any) -> None:  # fmt: skip
        logs = logs or {}
        if "train_runtime" in logs:  # the end-of-training summary, not a step
            return
        self._write(state.global_step, logs)

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        step = state.global_step
        self.run.add_checkpoint(step, Path(args.output_dir) / f"checkpoint-{step}")

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        for step in self.board.pending():
            if step <= state.global_step:
                self._write(step, {})

    def _write(self, step: int, logs: dict[str, Any]) -> None:
        rec = self.board.pop(step)
        if rec is None or not rec.totals:
            return
        extra = {k: float(logs[k]) for k in EXTRA_KEYS
                 if isinstance(logs.get(k), int | float) and math.isfinite(logs[k])}  # fmt: skip
        self.run.add_step(StepMetrics(
            step=step, reward_mean=_mean(rec.totals),
            reward_std=statistics.pstdev(rec.totals) if len(rec.totals) > 1 else 0.0,
            components={k: m for k, v in rec.components.items() if (m := _mean(v)) is not None},
            n_samples=len(rec.totals), step_time_s=rec.seconds, extra=extra,
        ))  # fmt: skip
        self.run.log(f"step {step}: reward {_mean(rec.totals):.4f} over {len(rec.totals)} "
                     f"samples" + (f" in {rec.seconds:.2f}s" if rec.seconds else ""))  # fmt: skip
