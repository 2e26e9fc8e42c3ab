"""A few real TRL GRPO steps through crucible.train, printing reward per step and time per step.

    PYTHONPATH=src python bench/train_trl.py                       # CPU: the tiny model
    PYTHONPATH=src python bench/train_trl.py --size small --steps 8  # GPU: ~30M params, random
    PYTHONPATH=src python bench/train_trl.py --model /models/Qwen3-0.6B --steps 8

Nothing is downloaded: `--size` builds a Qwen2 with random weights and a tokenizer trained
on the prompts (train/tiny.py), `--model` loads a local folder. The reward is learnable
(short answers that contain the prompt's keyword), so a real model's curve should rise; a
random one shows the pipeline's cost per step. The run is recorded like any other: the
script prints its id, and `crucible runs get ID --verbose` shows the same figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from crucible.store.train_runs import read_metrics, read_run
from crucible.train import JSONLDataset, TrainConfig, TRLGRPORecipe

SIZES = {  # hidden, layers, heads, kv heads, intermediate
    "tiny": (32, 2, 2, 1, 64),
    "small": (512, 8, 8, 2, 1536),
    "medium": (1024, 16, 16, 4, 3072),
}
WORDS = ["sun", "moon", "tree", "river", "stone", "cloud", "fire", "snow", "bird", "wind"]


async def rm(args: Any, sample: Any, **kw: Any) -> dict[str, float]:
    words = sample.response.split()
    hit = 1.0 if str(sample.label) in sample.response.lower() else 0.0
    short = 1.0 if 0 < len(words) <= 12 else 0.0
    return {"total": hit + 0.5 * short, "keyword": hit, "short": short}


class SizedRecipe(TRLGRPORecipe):
    """TRL GRPO on a random Qwen2 of a chosen size (train/tiny.py's tokenizer)."""

    def __init__(self, size: str) -> None:
        super().__init__()
        self.size = size

    def _model(self, config: TrainConfig, rows: list[Any]) -> tuple[Any, Any]:
        if config.model != "sized":
            return super()._model(config, rows)
        import torch
        from transformers import Qwen2Config, Qwen2ForCausalLM

        from crucible.train.tiny import tiny_tokenizer

        tok = tiny_tokenizer([m["content"] for r in rows for m in r.prompt] + WORDS,
                             vocab_size=2048)  # fmt: skip
        hidden, layers, heads, kv, inter = SIZES[self.size]
        torch.manual_seed(config.seed)
        model = Qwen2ForCausalLM(Qwen2Config(
            vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers,
            num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=inter,
            max_position_embeddings=2048, eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id, tie_word_embeddings=True,
        ))  # fmt: skip
        model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
        return model, tok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--model", help="a local model folder (instead of --size)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4, help="prompts per step")
    ap.add_argument("--samples", type=int, default=4, help="samples per prompt")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--jobs-dir", type=Path, default=None)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    work = Path(tempfile.mkdtemp(prefix="bench-train-"))
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Write a short line about the {w}.",
                                           "label": w}) + "\n" for w in WORDS))  # fmt: skip
    config = TrainConfig(
        model=args.model or "sized", dataset=JSONLDataset(path=prompts, system_prompt="Be brief."),
        recipe=SizedRecipe(args.size), reward=rm, steps=args.steps, batch_size=args.batch,
        samples_per_prompt=args.samples, max_response_length=args.max_tokens,
        learning_rate=1e-5, trace_samples=4, jobs_dir=args.jobs_dir or work / "jobs",
    )  # fmt: skip
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    run_id = config.launch(detach=False)
    wall = time.perf_counter() - t0
    folder = (args.jobs_dir or work / "jobs") / run_id
    run, (metrics, _) = read_run(folder), read_metrics(folder)
    print(f"run {run_id}: {run.state} on {device}; model {args.model or args.size}; "
          f"{args.batch}x{args.samples} samples/step, {args.max_tokens} tokens")
    if run.error:
        print(run.error, file=sys.stderr)
    print(f"{'step':>4}  {'reward':>7}  {'keyword':>7}  {'short':>5}  {'seconds':>7}")
    for m in metrics:
        c = m.components
        print(f"{m.step:>4}  {m.reward_mean or 0:>7.3f}  {c.get('keyword', 0):>7.3f}  "
              f"{c.get('short', 0):>5.2f}  {m.step_time_s or 0:>7.2f}")
    times = [m.step_time_s for m in metrics[1:] if m.step_time_s]  # the first step warms up
    if times:
        print(f"mean step time (after the first): {sum(times) / len(times):.2f} s")
    print(f"wall (model build, {len(metrics)} steps, save): {wall:.1f} s")
    return 0 if run.state == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
