"""TRLGRPORecipe: GRPO with TRL 1.16's GRPOTrainer, in this process, on CPU or GPU.

The config's knobs map to GRPOConfig (`grpo_kwargs`; the plan shows the mapping): steps
-> max_steps, batch_size x samples_per_prompt -> per_device_train_batch_size (TRL counts
completions) and samples_per_prompt -> num_generations, max_response_length ->
max_completion_length, and temperature, learning_rate, seed, chat_template_kwargs as
named; save_interval -> save_steps into the run's checkpoints/ (else one save at the end),
eval_interval -> eval_steps on the first batch of prompts. The rewards run through one
TRL reward function (train/trl_capture.py) that scores each completion with the config's
reward functions, and records each step's rewards, components and sampled responses into
the run; a callback records the step's time and the trainer's logs, stops at a
`runs cancel`, and lists checkpoints. `environment=` passes TRL's environment_factory
(trainers/trl_env.py `crucible_environment` for grading-service sessions): each rollout
then acts in its own task sandbox and the environment's reward counts too.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from crucible.train.config import TINY_MODEL, TrainConfig
from crucible.train.recipe import GPUSpec, LaunchPlan, Recipe
from crucible.train.reward import GraderReward

if TYPE_CHECKING:
    from crucible.train.dataset import Row
    from crucible.train.run import RunHandle

ROW_COLUMN = "crucible_row"  # the dataset column that names a completion's row
TASK_COLUMNS = ("task_id", "task_hash")  # passed on for an environment's reset(**row)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cuda() -> tuple[bool, int]:
    try:
        import torch
    except ImportError:
        return False, 0
    ok = torch.cuda.is_available()
    return ok, torch.cuda.device_count() if ok else 0


class TRLGRPORecipe(Recipe):
    """GRPO with TRL where crucible runs. `extra`: more GRPOConfig fields, as given."""

    name: ClassVar[str] = "trl-grpo"

    def __init__(self, *, environment: Callable[[], Any] | None = None,
                 extra: dict[str, Any] | None = None) -> None:  # fmt: skip
        self.environment = environment
        self.extra = dict(extra or {})

    def grpo_kwargs(self, config: TrainConfig, output_dir: Path, *, gpu: bool,
                    smoke: bool = False) -> dict[str, Any]:  # fmt: skip
        kw: dict[str, Any] = {
            "output_dir": str(output_dir),
            "max_steps": config.steps,
            "per_device_train_batch_size": config.batch_size * config.samples_per_prompt,
            "num_generations": config.samples_per_prompt,
            "max_completion_length": config.max_response_length,
            "temperature": config.temperature,
            "learning_rate": config.learning_rate,
            "seed": config.seed,
            "logging_steps": 1,
            "report_to": "none",
            "disable_tqdm": True,
            "log_completions": False,
            "use_cpu": not gpu,
            "bf16": gpu,
            "save_strategy": "steps" if config.save_interval else "no",
            "dataloader_num_workers": 0,
        }
        if config.save_interval:
            kw["save_steps"] = config.save_interval
        if config.eval_interval and not smoke:
            kw.update(eval_strategy="steps", eval_steps=config.eval_interval)
        if config.chat_template_kwargs:
            kw["chat_template_kwargs"] = dict(config.chat_template_kwargs)
        kw.update(self.extra)
        return kw

    def plan(self, config: TrainConfig) -> LaunchPlan:
        gpu, count = _cuda()
        env = sorted({"CRUCIBLE_SERVE_URL", "CRUCIBLE_SERVE_TOKEN"}
                     if self.environment or any(isinstance(r, GraderReward)
                                                for r in config.rewards()) else set())  # fmt: skip
        notes = [f"runs in this process's environment (transformers {_version('transformers')}"
                 f", torch {_version('torch')}); {'GPU' if gpu else 'CPU'}"]  # fmt: skip
        if config.image_overlay:
            notes.append("image_overlay " + " ".join(config.image_overlay)
                         + ": a local run uses what is installed here; install them first")  # fmt: skip
        if config.model == TINY_MODEL:
            notes.append("model 'tiny': random weights, a tokenizer trained on the dataset")
        cmd = ["crucible", "train", "launch", str(config.source or "CONFIG")]
        return LaunchPlan(
            recipe=self.name, trainer=f"trl {_version('trl')}", where="local",
            gpus=GPUSpec(type="cuda" if gpu else "cpu", count=count), command=cmd, env=env,
            knobs=self.grpo_kwargs(config, Path("<run>/checkpoints"), gpu=gpu), notes=notes,
        )  # fmt: skip

    def launch(self, config: TrainConfig, run: RunHandle) -> None:
        from trl import GRPOConfig, GRPOTrainer

        from crucible.train.trl_capture import Recorder, Scorer, StepBoard

        gpu, _ = _cuda()
        rows = config.dataset.rows()
        model, tokenizer = self._model(config, rows)
        train = _hf_rows(rows)
        args = GRPOConfig(**self.grpo_kwargs(config, run.checkpoints_dir, gpu=gpu,
                                             smoke=run.record.smoke))  # fmt: skip
        board = StepBoard()
        funcs: list[Any] = [Scorer(config, rows, run, board)] if config.rewards() else []
        run.log(f"trl {_version('trl')}: {len(rows)} prompts, {config.steps} steps, "
                f"{config.batch_size}x{config.samples_per_prompt} samples a step")  # fmt: skip
        trainer = GRPOTrainer(
            model=model, processing_class=tokenizer,
            reward_funcs=funcs or None, args=args,
            train_dataset=train,
            eval_dataset=train.select(range(min(len(train), config.batch_size)))
            if args.eval_strategy != "no" else None,
            callbacks=[Recorder(run, board)], environment_factory=self.environment,
        )  # fmt: skip
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        for cb in (PrinterCallback, ProgressCallback):  # stdout is the CLI's (--json)
            trainer.remove_callback(cb)
        trainer.train()
        if not config.save_interval and not run.record.smoke and not run.cancel_requested():
            final = run.checkpoints_dir / "final"
            trainer.save_model(str(final))
            tokenizer.save_pretrained(str(final))
            run.add_checkpoint(trainer.state.global_step, final)

    def _model(self, config: TrainConfig, rows: list[Row]) -> tuple[Any, Any]:
        if config.model == TINY_MODEL:
            from crucible.train.tiny import tiny_model, tiny_tokenizer

            texts = [m["content"] for r in rows for m in r.prompt]
            texts += [str(r.label) for r in rows if r.label is not None]
            tok = tiny_tokenizer(texts)
            model = tiny_model(tok, seed=config.seed)
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tok = AutoTokenizer.from_pretrained(config.model)
            model = AutoModelForCausalLM.from_pretrained(config.model, dtype="auto")
            if tok.pad_token is None:
                tok.pad_token = tok.eos_token
        if config.dataset.chat_template:
            tok.chat_template = config.dataset.chat_template
        return model, tok


def _hf_rows(rows: list[Row]) -> Any:
    import datasets

    data: dict[str, list[Any]] = {"prompt": [r.prompt for r in rows],
                                  ROW_COLUMN: list(range(len(rows)))}  # fmt: skip
    for col in TASK_COLUMNS:
        if all(isinstance(r.metadata.get(col), str) for r in rows):
            data[col] = [r.metadata[col] for r in rows]
    return datasets.Dataset.from_dict(data)
