"""A tiny training config for the tests: a JSONL of prompts beside it, a reward with
components, the TRL recipe."""

from pathlib import Path

from crucible.train import JSONLDataset, TrainConfig, TRLGRPORecipe

HERE = Path(__file__).parent


async def rm(args, sample, **kw):
    """Rewards answers that mention the label; a length component beside it."""
    words = sample.response.split()
    hit = 1.0 if str(sample.label).lower() in sample.response.lower() else 0.0
    short = 1.0 if 0 < len(words) <= args.max_words else 0.0
    return {"total": hit + 0.5 * short, "hit": hit, "short": short}


config = TrainConfig(
    model="tiny",
    dataset=JSONLDataset(
        path=HERE / "tiny_prompts.jsonl",
        system_prompt="Answer briefly.",
        prompt_template="Question: {prompt}",
    ),
    recipe=TRLGRPORecipe(),
    reward=rm,
    reward_args={"max_words": 8},
    steps=2,
    batch_size=2,
    samples_per_prompt=2,
    max_response_length=8,
    trace_samples=3,
    learning_rate=1e-4,
)
