"""The trainer command lines a Modal recipe runs: slime's train.py and verl's main_ppo.

slime (THUDM/slime; flags as its scripts use them, e.g. scripts/run-qwen3-30B-A3B-fsdp.sh
and scripts/run-qwen3-0.6B-single-gpu.sh) runs with its FSDP backend, so the Hugging
Face checkpoint trains as it is (no Megatron conversion); the reward is crucible's,
named by `--custom-rm-path crucible.train.remote.slime_rm`. verl (volcengine/verl, as
installed: its keys are checked against verl's own ppo_trainer config in the tests) runs
`python3 -m verl.trainer.main_ppo` with GRPO (or GSPO's policy loss) and crucible's reward
as `custom_reward_function` (train/remote.py `compute_score`).

The knobs map as: steps -> --num-rollout / trainer.total_training_steps; batch_size ->
--rollout-batch-size / data.train_batch_size; samples_per_prompt -> --n-samples-per-prompt
/ actor_rollout_ref.rollout.n; max_response_length, temperature, learning_rate, seed,
save_interval, eval_interval and chat_template_kwargs to their flags.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from crucible.train.config import TrainConfig

Trainer = Literal["slime", "verl"]
Algorithm = Literal["grpo", "gspo"]

SRC_DIR = "/crucible/src"  # crucible's own source, in the image
CONFIG_DIR = "/crucible/config"  # the config's folder, in the image
DATA_DIR = "/crucible/data"
CKPT_MOUNT = "/checkpoints"
HF_CACHE_MOUNT = "/root/.cache/huggingface"
SLIME_DIR = "/root/slime"  # where slime's image keeps its checkout


@dataclass(frozen=True)
class Layout:
    """Where a run's things are inside the sandbox."""

    run_id: str
    config_file: str  # the config module's file name, under CONFIG_DIR
    data_file: str  # prompts.jsonl (slime) or prompts.parquet (verl), under DATA_DIR

    @property
    def save_dir(self) -> str:
        return f"{CKPT_MOUNT}/{self.run_id}"


def _download(model: str) -> str:
    """A shell line that puts the model in the Hugging Face cache (a Volume) and sets
    $MODEL_DIR to its folder; a local path in the image is used as it is."""
    code = ("import os,sys; m=sys.argv[1]; print(m) if os.path.isdir(m) else "
            "print(__import__('huggingface_hub').snapshot_download(m))")  # fmt: skip
    return f"MODEL_DIR=$(python3 -c {shlex.quote(code)} {shlex.quote(model)})"


def slime_args(config: TrainConfig, lay: Layout, *, gpus: int, algorithm: Algorithm,
               gpus_per_engine: int = 1) -> list[str]:  # fmt: skip
    data = f"{DATA_DIR}/{lay.data_file}"
    args = [
        "python3", "train.py",
        "--train-backend", "fsdp",
        "--hf-checkpoint", "$MODEL_DIR",
        "--prompt-data", data, "--input-key", "prompt", "--label-key", "label",
        "--metadata-key", "metadata", "--apply-chat-template", "--rollout-shuffle",
        "--custom-rm-path", "crucible.train.remote.slime_rm",
        "--num-rollout", str(config.steps),
        "--rollout-batch-size", str(config.batch_size),
        "--n-samples-per-prompt", str(config.samples_per_prompt),
        "--global-batch-size", str(config.batch_size * config.samples_per_prompt),
        "--rollout-max-response-len", str(config.max_response_length),
        "--rollout-temperature", str(config.temperature),
        "--advantage-estimator", algorithm,
        "--optimizer", "adam", "--lr", str(config.learning_rate),
        "--seed", str(config.seed),
        "--save", lay.save_dir,
        "--actor-num-nodes", "1", "--actor-num-gpus-per-node", str(gpus), "--colocate",
        "--rollout-num-gpus-per-engine", str(gpus_per_engine),
    ]  # fmt: skip
    if config.save_interval:
        args += ["--save-interval", str(config.save_interval)]
    if config.eval_interval:
        args += ["--eval-interval", str(config.eval_interval),
                 "--eval-prompt-data", "train", data]  # fmt: skip
    if config.chat_template_kwargs:
        args += ["--apply-chat-template-kwargs", json.dumps(config.chat_template_kwargs)]
    return args


def verl_overrides(config: TrainConfig, lay: Layout, *, gpus: int,
                   algorithm: Algorithm) -> list[str]:  # fmt: skip
    data = f"{DATA_DIR}/{lay.data_file}"
    over = [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={data}", f"data.val_files={data}", "data.prompt_key=prompt",
        f"data.train_batch_size={config.batch_size}",
        f"data.max_response_length={config.max_response_length}",
        "actor_rollout_ref.model.path=$MODEL_DIR",
        f"actor_rollout_ref.actor.optim.lr={config.learning_rate}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={config.batch_size}",
        f"actor_rollout_ref.rollout.n={config.samples_per_prompt}",
        f"actor_rollout_ref.rollout.temperature={config.temperature}",
        "actor_rollout_ref.rollout.name=vllm",
        f"custom_reward_function.path={SRC_DIR}/crucible/train/remote.py",
        "custom_reward_function.name=compute_score",
        f"trainer.total_training_steps={config.steps}",
        f"trainer.n_gpus_per_node={gpus}", "trainer.nnodes=1",
        f"trainer.save_freq={config.save_interval or -1}",
        f"trainer.test_freq={config.eval_interval or -1}",
        f"trainer.default_local_dir={lay.save_dir}",
        "trainer.logger=[console]", "trainer.project_name=crucible",
        f"trainer.experiment_name={lay.run_id}",
    ]  # fmt: skip
    if algorithm == "gspo":
        over.append("actor_rollout_ref.actor.policy_loss.loss_mode=gspo")
    if config.chat_template_kwargs:
        kw = json.dumps(config.chat_template_kwargs, separators=(",", ":"))
        over.append(f"+data.apply_chat_template_kwargs={kw}")
    return over


def trainer_argv(trainer: Trainer, config: TrainConfig, lay: Layout, *, gpus: int,
                 algorithm: Algorithm) -> list[str]:  # fmt: skip
    if trainer == "slime":
        return slime_args(config, lay, gpus=gpus, algorithm=algorithm)
    return ["python3", "-m", "verl.trainer.main_ppo",
            *verl_overrides(config, lay, gpus=gpus, algorithm=algorithm)]  # fmt: skip


def shell_script(trainer: Trainer, config: TrainConfig, lay: Layout, *, gpus: int,
                 algorithm: Algorithm) -> str:  # fmt: skip
    """The one shell line the sandbox runs (stderr into stdout: one stream to read): fetch
    the model, start Ray (slime), train.
    `$MODEL_DIR` is left for the shell; everything else is quoted."""
    argv = trainer_argv(trainer, config, lay, gpus=gpus, algorithm=algorithm)
    quoted = " ".join('"$MODEL_DIR"' if a == "$MODEL_DIR" else
                      a.replace("=$MODEL_DIR", '="$MODEL_DIR"') if a.endswith("=$MODEL_DIR")
                      else shlex.quote(a) for a in argv)  # fmt: skip
    steps = [
        "exec 2>&1",
        "set -euo pipefail",
        _download(config.model),
        f"mkdir -p {shlex.quote(lay.save_dir)}",
    ]
    if trainer == "slime":
        steps += [f"cd {SLIME_DIR}",
                  f"ray start --head --node-ip-address 127.0.0.1 --num-gpus {gpus} "
                  "--disable-usage-stats"]  # fmt: skip
    steps.append(quoted)
    return "; ".join(steps)
