"""GRPO with TRL, every completion graded in its task's sandbox by a running `crucible serve`.

    crucible dataset export examples/tasks/hello-file -o /tmp/prompts.jsonl
    crucible serve examples/tasks/hello-file --env local      # prints URL and token
    export CRUCIBLE_SERVE_URL=... CRUCIBLE_SERVE_TOKEN=...
    python examples/trainers/trl_grpo.py /tmp/prompts.jsonl \\
        --submission files --answer-path /app/hello.txt --steps 1

Without --model it trains a tiny random model with a tokenizer trained on the prompts, on
the CPU, with nothing downloaded: a check of the wiring, not a policy. Give --model (a hub
id or a local folder) for a real one. tests/trainers/test_trl_grpo.py runs this file's
`tiny_policy` and `grpo_trainer` against a service on loopback.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

# A chat template that renders system/user/assistant turns: enough for TRL's
# conversational prompts (the tiny tokenizer has no template of its own).
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<eos>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL = ["<unk>", "<pad>", "<eos>", "<|system|>", "<|user|>", "<|assistant|>"]


def tiny_policy(corpus: Iterable[str], *, vocab_size: int = 400, hidden: int = 32,
                layers: int = 2, seed: int = 0, chat_template: str = CHAT_TEMPLATE,
                eos: str = "<eos>", extra_tokens: Sequence[str] = ()) -> tuple[Any, Any]:  # fmt: skip
    """A random-weight Llama (hidden 32, 2 layers) and a byte-level BPE tokenizer trained
    on `corpus` on the spot: made here, nothing downloaded. `chat_template`, `eos` and
    `extra_tokens` give it another chat format (one that renders tool calls, say)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(list(corpus), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(dict.fromkeys([*SPECIAL, eos, *extra_tokens])),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))  # fmt: skip
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>",
                                        pad_token="<pad>", eos_token=eos,
                                        padding_side="left")  # fmt: skip
    tokenizer.chat_template = chat_template
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=4096, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None)  # fmt: skip
    return LlamaForCausalLM(config), tokenizer


def prompt_texts(dataset: Any) -> list[str]:
    """Every message of the prompt set's `prompt` column (what the tiny tokenizer learns)."""
    return [m["content"] for row in dataset for m in row["prompt"]]


def grpo_trainer(model: Any, tokenizer: Any, dataset: Any, reward: Any, output_dir: Path, *,
                 steps: int = 1, generations: int = 2, batch: int = 4,
                 completion_tokens: int = 8, cpu: bool = True) -> Any:  # fmt: skip
    """A GRPOTrainer over `dataset` (a `crucible dataset export` prompt set) whose reward is
    `reward` (crucible.trainers.trl.crucible_reward)."""
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(output_dir=str(output_dir), max_steps=steps, num_generations=generations,
                      per_device_train_batch_size=batch, max_completion_length=completion_tokens,
                      use_cpu=cpu, bf16=False, report_to="none", logging_steps=1,
                      save_strategy="no", dataloader_num_workers=0, seed=0)  # fmt: skip
    return GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=dataset,
                       processing_class=tokenizer)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompts", type=Path, help="a prompt set from `crucible dataset export`")
    ap.add_argument("--model", help="hub id or folder (default: a tiny random model)")
    ap.add_argument("--submission", default="text", choices=["text", "files", "patch"])
    ap.add_argument("--answer-path", help="with --submission files: the file a completion is")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("grpo-out"))
    a = ap.parse_args()

    from datasets import load_dataset, load_from_disk

    from crucible.trainers.trl import crucible_reward

    if a.prompts.is_dir():
        dataset = load_from_disk(str(a.prompts))
    else:
        kind = "parquet" if a.prompts.suffix == ".parquet" else "json"
        dataset = load_dataset(kind, data_files=str(a.prompts), split="train")
    if a.model:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(a.model)
        tokenizer = AutoTokenizer.from_pretrained(a.model, padding_side="left")
    else:
        model, tokenizer = tiny_policy(prompt_texts(dataset))
    reward = crucible_reward(submission=a.submission, answer_path=a.answer_path)
    # A batch holds whole groups (2 generations of each of up to 2 prompts): a prompt set of
    # one task still makes a step.
    batch = 2 * min(2, len(dataset))
    trainer = grpo_trainer(model, tokenizer, dataset, reward, a.out, steps=a.steps,
                           batch=batch, cpu=a.model is None)  # fmt: skip
    trainer.train()
    for entry in trainer.state.log_history:  # one JSON line per logged step
        print("log", json.dumps(entry))


if __name__ == "__main__":
    main()
